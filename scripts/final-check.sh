#!/usr/bin/env bash
# One GPU call for a final tree (device tool, with .devdeps): build, every
# GPU suite (in parallel: correctness only), a first-use tuning run
# (TOKITAI_JIT_TUNE=auto) checked against the CPU reference, bench/sweep with
# the heuristics, bench/softmax and PyTorch's softmax figures. Logs to $OUT.
. "$(dirname "$0")/gpu-lib.sh" /tmp/tk-final-out
rc=0
gpu_build
echo "== GPU suites"
ctest --test-dir build-gpu -L gpu -j4 --output-on-failure >"$out/ctest-gpu.log" 2>&1 || rc=1
grep -E "Test +#|tests passed|Failed" "$out/ctest-gpu.log" | tail -12
[ $rc -eq 0 ] || grep -E "Assertion|failed|FAIL" "$out/ctest-gpu.log" | head -20
echo "== first-use tuning (TOKITAI_JIT_TUNE=auto), checked run"
c=$(mktemp -d)
TOKITAI_JIT_TUNE=auto TOKITAI_JIT_LOG=info $cli --run gemm_f16_fwd --shape 1000x2816x1024 --cache-dir "$c" >"$out/auto.md" 2>&1 || rc=1
grep -iE "tuned|passed|max_abs|kernel_ms|ms" "$out/auto.md" | head -6
$cli --list --cache-dir "$c" | grep tuning
echo "== sweep (heuristics)"
TOKITAI_JIT_TUNE=off ./build-gpu/bench/sweep --csv "$out/sweep-heur.csv" >"$out/sweep-heur.md" 2>&1 || rc=1
sed -n '/^## summary/,$p' "$out/sweep-heur.md"
if [ -x ./build-gpu/bench/softmax ]; then
  echo "== softmax"
  ./build-gpu/bench/softmax >"$out/softmax.md" 2>&1 || rc=1
  tail -25 "$out/softmax.md"
  python3 bench/torch_softmax.py >"$out/torch_softmax.md" 2>&1 || rc=1
  tail -20 "$out/torch_softmax.md"
fi
exit $rc
