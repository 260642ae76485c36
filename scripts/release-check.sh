#!/usr/bin/env bash
# The GPU checks before a release (device tool; carry .devdeps and the Rust
# test binaries that `bindings/rust/gpu-test.sh build` leaves in
# bindings/rust/gpu-bin). Logs and tables go to $OUT; a run keeps to
# TK_BUDGET seconds (default 560), later steps getting what is left.
# TK_PARTS (default "suites measure moe sweep") picks the steps, so that
# they can be spread over calls; the build (Release, incremental) and the
# Python C extension come first in every call:
#   suites   correctness, in parallel: every GPU suite (the GEMM cases each
#            in its own process; TK_GEMM_CASES picks them), the Rust device tests and GEMM pilot, and
#            the default manifest's precompile for sm_90 into a fresh cache;
#   measure  one at a time on a quiet machine: the cache's size and disk hit
#            (bench/cache_size, on the precompiled cache), bench/jit, the
#            host cost of a call from Python;
#   moe      the MoE training example in every mode, 200 steps;
#   sweep    the seeded random GEMM sweep against cuBLAS (TK_SWEEP_SEED,
#            default 7; TK_SWEEP_N shapes per op, default 36), after the
#            shapes of TK_SWEEP_SHAPES (manifest lines separated by ';');
#   perf     bench/jit, the cold training loop (bench/dynamic), softmax
#            at the widest rows with other cluster shapes (--sweep-fwd);
#   cold     the cold training loop alone;
#   host     the host cost of a call from Python alone;
#   tune     every tuning candidate's time at the shapes of TK_TUNE_SHAPES
#            (manifest lines separated by ';', policy TK_TUNE_POLICY,
#            default exact; only the classes of the M values named; default: the vocabulary projection's grad_a
#            at a few hundred tokens).
. "$(dirname "$0")/gpu-lib.sh" /tmp/tk-release-out
t0=$SECONDS
budget=${TK_BUDGET:-560}
left() { echo $((budget - (SECONDS - t0))); }
rc=0
parts=${TK_PARTS:-suites measure moe sweep}
gpu_build
echo "build done at $((SECONDS - t0)) s"
(cd python && TOKITAI_JIT_LIBRARY_DIR=../build-gpu python3 setup.py -q build_ext --inplace) >"$out/ext.log" 2>&1 ||
  echo "C extension not built (see ext.log); the ctypes path is measured"

if has suites; then
echo "== correctness (parallel)"
lim=$(($(left) - ${TK_AFTER_SUITES:-170}))
cases=${TK_GEMM_CASES:-exact_small exact_large generic offsets checked skinny smallk staged configurations}
for c in $cases; do
  CK_RUN_CASE=$c timeout "$lim" ./build-gpu/tests/test_gpu_gemm >"$out/gemm-$c.log" 2>&1 &
done
timeout "$lim" ctest --test-dir build-gpu -L gpu -E 'test_gpu_gemm|rust_gpu' -j4 --output-on-failure >"$out/ctest-gpu.log" 2>&1 &
ctest_pid=$!
timeout "$lim" bash bindings/rust/gpu-test.sh run build-gpu >"$out/rust.log" 2>&1 &
rust_pid=$!
timeout "$lim" $cli --precompile --arch sm_90 --cache-dir /tmp/tk-cs -j 8 >"$out/precompile.log" 2>&1 &
wait "$ctest_pid" || rc=1
wait "$rust_pid" || { rc=1; echo "rust: FAILED"; }
wait
for c in $cases; do
  r=$(grep -E '^[0-9]+%: Checks' "$out/gemm-$c.log" | tail -1)
  echo "test_gpu_gemm $c: ${r:-no result (timed out?)}"
  case $r in 100%*) ;; *) rc=1; grep -E "Assertion|:F:|:E:" "$out/gemm-$c.log" | head -3 ;; esac
done
grep -E "Test +#|tests passed|tests failed" "$out/ctest-gpu.log"
grep -E "test result|cold|warm|exit status" "$out/rust.log" | tail -10
tail -1 "$out/precompile.log"
grep -E "^(eager|default|reduce-overhead) " "$out/ctest-gpu.log" | head -4
echo "correctness done at $((SECONDS - t0)) s, rc $rc"
fi

if has measure; then
echo "== cache size and disk hit"
[ -d /tmp/tk-cs ] || timeout 150 $cli --precompile --arch sm_90 --cache-dir /tmp/tk-cs -j 16 >"$out/precompile.log" 2>&1
timeout 90 ./build-gpu/bench/cache_size /tmp/tk-cs sm_90 2>&1
echo "== bench/jit"
timeout 120 ./build-gpu/bench/jit 2>&1 | grep -E "^\|"
fi
if { has measure || has host; } && [ "$(left)" -gt 60 ]; then
echo "== host cost of a call from Python"
PYTHONPATH=$PWD/python TOKITAI_JIT_LIBRARY=$PWD/build-gpu/libtokitai_jit.so.1 \
  timeout 150 python3 examples/torch_host_cost.py --rounds 12 2>&1 | tail -18
fi
if has moe && [ "$(left)" -gt 60 ]; then
echo "== MoE training example ($(left) s left)"
PYTHONPATH=$PWD/python TOKITAI_JIT_LIBRARY=$PWD/build-gpu/libtokitai_jit.so.1 PYTHONUNBUFFERED=1 \
  timeout $(($(left) - 20)) python3 examples/moe_train.py --steps 200 >"$out/moe.log" 2>&1
tail -12 "$out/moe.log"
fi
if has sweep && [ "$(left)" -gt 40 ]; then
if [ -n "${TK_SWEEP_SHAPES:-}" ]; then
  echo "== GEMM sweep of TK_SWEEP_SHAPES"
  { echo 'policy stable'; printf '%s\n' "$TK_SWEEP_SHAPES" | tr ';' '\n'; } >/tmp/sweep-shapes.tkm
  TOKITAI_JIT_TUNE=off TOKITAI_JIT_CACHE_DIR=/tmp/tk-sw timeout 120 \
    ./build-gpu/bench/sweep --manifest /tmp/sweep-shapes.tkm --count 0 >"$out/sweep-shapes.md" 2>&1
  echo "sweep exit $?"; grep -E "^\| [0-9]+x|^## gemm" "$out/sweep-shapes.md"
fi
echo "== random GEMM sweep ($(left) s left)"
  TOKITAI_JIT_TUNE=off TOKITAI_JIT_CACHE_DIR=/tmp/tk-sw timeout $(($(left) - 10)) \
    ./build-gpu/bench/sweep --random "${TK_SWEEP_N:-36}" --seed "${TK_SWEEP_SEED:-7}" >"$out/sweep.md" 2>&1
  echo "sweep exit $?"
  sed -n '/^## summary/,$p' "$out/sweep.md" | head -12
fi
if has perf && [ "$(left)" -gt 60 ]; then
echo "== bench/jit ($(left) s left)"
timeout 120 ./build-gpu/bench/jit >"$out/jit.log" 2>&1; echo "jit exit $?"
grep -E "^\|" "$out/jit.log" | head -12
fi
if { has perf || has cold; } && [ "$(left)" -gt 60 ]; then
echo "== training loop from a cold cache"
for v in stable/async/bare stable/async/fallbacks stable/async/cold; do
  timeout 90 ./build-gpu/bench/dynamic --only $v --steps 20 >"$out/dynamic-${v//\//-}.log" 2>&1
  echo "dynamic $v exit $?"; grep -E "^\| [0-9]+ \|" "$out/dynamic-${v//\//-}.log" | head -3
  grep -E "^SUMMARY" "$out/dynamic-${v//\//-}.log" | tr ' ' '\n' | grep -E "step1_ms|first20|loaded_ms|caller_compiles|no_fallback_from_step|steady_over"
done
fi
if has perf && [ "$(left)" -gt 60 ]; then
echo "== softmax, widest rows"
timeout 120 ./build-gpu/bench/softmax --sweep-fwd --cols 262144,223207 >"$out/softmax-sweep.log" 2>&1
echo "softmax exit $?"; grep -E "^\|" "$out/softmax-sweep.log" | sort -t'|' -k8 -r | head -30
fi
if has tune && [ "$(left)" -gt 60 ]; then
echo "== tuning candidates ($(left) s left)"
{ echo "policy ${TK_TUNE_POLICY:-exact}"
  if [ -n "${TK_TUNE_SHAPES:-}" ]; then printf '%s\n' "$TK_TUNE_SHAPES" | tr ';' '\n'
  else printf '%s\n' 'gemm_f16_grad_a M=655 N=50304 K=1024' 'gemm_f16_grad_a M=300 N=50304 K=1024' \
    'gemm_f16_grad_a M=1000 N=32000 K=1024'; fi; } >/tmp/tune.tkm
cat /tmp/tune.tkm
TOKITAI_JIT_CACHE_DIR=/tmp/tk-tune timeout $(($(left) - 10)) $cli --tune --manifest /tmp/tune.tkm --policy "${TK_TUNE_POLICY:-exact}" --classes manifest -v >"$out/tune.log" 2>&1
echo "tune exit $?"; tail -80 "$out/tune.log"
fi
echo "all done at $((SECONDS - t0)) s, rc $rc"
exit $rc
