#!/usr/bin/env bash
# One GPU call for correctness (device tool, with .devdeps): build, then every
# GPU suite at once: the cases of test_gpu_gemm each in its own process
# (CK_RUN_CASE; the configurations case, ~100 configurations, in $SHARDS
# processes, default 6, through TK_TEST_SHARD: one process ran 40 of them in
# 400 s beside the other cases; six ran all of them in 190 s), the other GPU
# suites through CTest. Logs to $OUT; prints each part's verdict.
. "$(dirname "$0")/gpu-lib.sh" /tmp/tk-suites-out
rc=0
gpu_build
echo "== GPU suites"
pids=() names=()
shards=${SHARDS:-6}
for c in exact_small exact_large generic offsets checked skinny smallk staged; do
  CK_RUN_CASE=$c ./build-gpu/tests/test_gpu_gemm >"$out/gemm-$c.log" 2>&1 &
  pids+=($!) names+=("$c")
done
for i in $(seq 0 $((shards - 1))); do
  TK_TEST_SHARD=$i/$shards CK_RUN_CASE=configurations ./build-gpu/tests/test_gpu_gemm \
    >"$out/gemm-configurations-$i.log" 2>&1 &
  pids+=($!) names+=("configurations-$i")
done
ctest --test-dir build-gpu -L gpu -E test_gpu_gemm -j3 --output-on-failure >"$out/ctest-gpu.log" 2>&1 || rc=1
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"; r=$?; c=${names[$i]}
  echo "test_gpu_gemm $c: exit $r, $(grep -E '^[0-9]+%: Checks' "$out/gemm-$c.log" | tail -1)"
  [ $r -eq 0 ] || { rc=1; grep -E "Assertion|failed|FAIL|skipped" "$out/gemm-$c.log" | head -5; }
done
grep -E "Test +#|tests passed|Failed" "$out/ctest-gpu.log" | tail -12
exit $rc
