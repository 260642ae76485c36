#!/usr/bin/env bash
# Runs on a GPU machine (the device tool's copy of the tree, with .devdeps and a
# cache precompiled elsewhere in .tkcache): build, GPU suites, the warm-cache
# proof for a cache precompiled on a machine without a GPU, checked runs of all
# seven operators, and the benchmarks. Figures go to stdout and to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/tk-gpu-out}
mkdir -p "$out"
prefix=$PWD/.devdeps/root/usr
rc=0

echo "== build"
cmake -S . -B build-gpu -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null || exit 1
cmake --build build-gpu -j16 >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
cli=./build-gpu/tokitai-jit
$cli --info

echo "== GPU suites"
ctest --test-dir build-gpu -L gpu --output-on-failure >"$out/ctest-gpu.log" 2>&1 || rc=1
grep -E "tests passed|Passed|Failed|Skipped|\*\*\*" "$out/ctest-gpu.log" | tail -12
[ $rc -eq 0 ] || grep -E "Assertion|failed|FAIL" "$out/ctest-gpu.log" | head -20

if [ -d .tkcache ]; then
  echo "== cache precompiled without a GPU: must need zero compiles here"
  warm=$(mktemp -d) && cp -r .tkcache/. "$warm/"
  fresh=0
  while read -r op shape; do
    TOKITAI_JIT_CACHE_DIR=$warm $cli --run "$op" --shape "$shape" --json >"$out/run.json" 2>&1
    r=$?
    origin=$(grep -o '"origin": *"[a-z]*"' "$out/run.json" | head -1)
    pass=$(grep -o '"passed": *[a-z]*' "$out/run.json" | head -1)
    echo "$op $shape: exit $r, $origin, $pass"
    case "$origin" in *compile*) fresh=$((fresh + 1)) ;; esac
    [ $r -eq 0 ] || rc=1
  done <<'LIST'
gemm_f16_fwd 512x1024x1024
gemm_f16_grad_a 4096x1024x1024
gemm_f16_grad_b 512x1024x1024
gemm_f16_fwd 4096x32000x1024
softmax_f16_fwd 4096x32000
softmax_xent_f16_bwd 4096x32000
softmax_f16_fwd 16384x1024
embedding_f16_fwd 50304x1024x16384
embedding_f16_bwd 50304x1024x512
LIST
  echo "runs that compiled: $fresh"
  echo "precompile for the device target into the same cache (must compile nothing):"
  $cli --precompile --manifest manifests/gpu-check.tkm --cache-dir "$warm" 2>&1 | tail -1
  [ $fresh -eq 0 ] || rc=1
fi

echo "== checked runs, odd shapes"
for a in "gemm_f16_fwd 127x509x257" "gemm_f16_grad_a 127x509x257" "gemm_f16_grad_b 127x509x257" \
         "softmax_f16_fwd 7x4099" "softmax_xent_f16_bwd 7x4099" \
         "embedding_f16_fwd 1000x131x77" "embedding_f16_bwd 1000x131x777"; do
  set -- $a
  $cli --run "$1" --shape "$2" >"$out/run.md" 2>&1 || { rc=1; cat "$out/run.md"; }
  echo "$1 $2: $(grep -iE 'pass|fail' "$out/run.md" | head -1)"
done

echo "== bench/jit"
./build-gpu/bench/jit 2>&1 | tee "$out/bench-jit.txt" | tail -12
echo "== bench/ops"
./build-gpu/bench/ops 2>&1 | tee "$out/bench-ops.txt" | tail -40
echo "== PyTorch reference"
PYTHONUNBUFFERED=1 python3 bench/torch_ref.py 2>&1 | tee "$out/torch.txt" | tail -12
exit $rc
