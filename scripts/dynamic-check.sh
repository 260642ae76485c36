#!/usr/bin/env bash
# Runs on a GPU machine (the device tool's copy of the tree, with .devdeps):
# build, then the parts named in $PARTS (default: all):
#   suites  every GPU suite (ctest -L gpu: C suites and the Python GPU tests)
#   cold    bench/dynamic from cold caches (ours and NVRTC's)
#   warm    the default precompile into a fresh cache, then bench/dynamic on it
#   jit     bench/jit (JIT overhead, user-header disk hits)
#   ops     bench/ops --gemm-only --quick (GEMM at squares, against cuBLAS)
#   run     checked runs (--run --json) of two operators from a cold cache
# Figures go to stdout and to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/tk-gpu-out}
mkdir -p "$out"
parts=${PARTS:-suites cold warm jit}
prefix=$PWD/.devdeps/root/usr
rc=0
echo "== build"
cmake -S . -B build-gpu -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >"$out/cmake.log" 2>&1 || { tail -30 "$out/cmake.log"; exit 1; }
grep -E "Python tests|remote" "$out/cmake.log" | head -3
cmake --build build-gpu -j16 >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
cli=./build-gpu/tokitai-jit
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
case " $parts " in *" suites "*)
  echo "== GPU suites"
  ctest --test-dir build-gpu -L gpu --output-on-failure -j1 >"$out/ctest-gpu.log" 2>&1 || rc=1
  grep -E "tests passed|Test +#|\*\*\*" "$out/ctest-gpu.log" | tail -12
  [ $rc -eq 0 ] || grep -E "Assertion|failed|FAIL|Error" "$out/ctest-gpu.log" | head -30
  grep -E "^(gemm|softmax|embedding) policy" "$out/ctest-gpu.log" | head -20
  grep -E "passed|failed|skipped" "$out/ctest-gpu.log" | grep -iE "pytest|[0-9]+ passed" | tail -3
esac
case " $parts " in *" cold "*)
  echo "== bench/dynamic, cold caches"
  TOKITAI_JIT_LOG=info ./build-gpu/bench/dynamic ${DYN_ARGS:-} ${DYN_COLD:-} >"$out/dynamic-cold.txt" 2>"$out/dynamic-cold.log" || rc=1
  grep -E "^SUMMARY|^GROUPS|checks|skipped|error" "$out/dynamic-cold.txt"
esac
case " $parts " in *" warm "*)
  echo "== default precompile into a fresh cache"
  warm=$(mktemp -d)
  /usr/bin/time -f "precompile: %e s wall, %M KB max RSS" $cli --precompile --cache-dir "$warm" >"$out/precompile.txt" 2>&1 || rc=1
  tail -3 "$out/precompile.txt"
  echo "== bench/dynamic, warm cache"
  ./build-gpu/bench/dynamic --warm-cache "$warm" --only stable/async/warm,stable/sync/warm ${DYN_ARGS:-} >"$out/dynamic-warm.txt" 2>&1 || rc=1
  grep -E "^SUMMARY|^GROUPS|checks" "$out/dynamic-warm.txt"
esac
case " $parts " in *" jit "*)
  echo "== bench/jit"
  ./build-gpu/bench/jit >"$out/bench-jit.txt" 2>&1 || rc=1
  tail -16 "$out/bench-jit.txt"
esac
case " $parts " in *" ops "*)
  echo "== bench/ops --gemm-only --quick"
  ./build-gpu/bench/ops --gemm-only --quick >"$out/bench-ops.txt" 2>&1 || rc=1
  tail -14 "$out/bench-ops.txt"
esac
case " $parts " in *" run "*)
  echo "== checked runs, cold cache"
  c=$(mktemp -d)
  for a in "gemm_f16_fwd 1882x1024x2816" "softmax_f16_fwd 4096x50304"; do
    set -- $a
    TOKITAI_JIT_CACHE_DIR=$c $cli --run "$1" --shape "$2" --json >"$out/run.json" 2>&1 || rc=1
    cat "$out/run.json"
  done
esac
exit $rc
