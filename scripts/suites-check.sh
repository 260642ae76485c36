#!/usr/bin/env bash
# One GPU call for correctness (device tool, with .devdeps): build, then every
# GPU suite at once: the cases of test_gpu_gemm each in its own process
# (CK_RUN_CASE; the configurations case alone compiles ~70 kernels), the other
# GPU suites through CTest. Logs to $OUT; prints each part's verdict.
. "$(dirname "$0")/gpu-lib.sh" /tmp/tk-suites-out
rc=0
gpu_build
echo "== GPU suites"
pids=()
for c in exact_small exact_large generic offsets checked configurations skinny smallk; do
  CK_RUN_CASE=$c ./build-gpu/tests/test_gpu_gemm >"$out/gemm-$c.log" 2>&1 &
  pids+=($!)
done
ctest --test-dir build-gpu -L gpu -E test_gpu_gemm -j3 --output-on-failure >"$out/ctest-gpu.log" 2>&1 || rc=1
i=0
for c in exact_small exact_large generic offsets checked configurations skinny smallk; do
  wait "${pids[$i]}"; r=$?; i=$((i + 1))
  echo "test_gpu_gemm $c: exit $r, $(grep -E '^[0-9]+%: Checks' "$out/gemm-$c.log" | tail -1)"
  [ $r -eq 0 ] || { rc=1; grep -E "Assertion|failed|FAIL|skipped" "$out/gemm-$c.log" | head -5; }
done
grep -E "Test +#|tests passed|Failed" "$out/ctest-gpu.log" | tail -12
exit $rc
