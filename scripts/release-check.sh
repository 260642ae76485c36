#!/usr/bin/env bash
# One GPU call before a release (device tool, with .devdeps and the Rust
# test binaries of bindings/rust/gpu-test.sh build): build, every GPU suite
# (GEMM cases in parallel), the Rust device tests and pilot, the cache-size
# targets, the GEMM sweep (heuristics) and the softmax bench. Logs to $OUT.
. "$(dirname "$0")/gpu-lib.sh" /tmp/tk-release-out
rc=0
gpu_build
echo "== GPU suites"
cases="exact_small exact_large generic offsets checked skinny smallk configurations"
for c in $cases; do
  CK_RUN_CASE=$c timeout 330 ./build-gpu/tests/test_gpu_gemm >"$out/gemm-$c.log" 2>&1 &
done
timeout 300 ctest --test-dir build-gpu -L gpu -E test_gpu_gemm -j4 --output-on-failure >"$out/ctest-gpu.log" 2>&1 || rc=1
wait
for c in $cases; do echo "test_gpu_gemm $c: $(grep -E '^[0-9]+%: Checks' "$out/gemm-$c.log" | tail -1)"; grep -E "Assertion|:F:|:E:" "$out/gemm-$c.log" | head -3; done
grep -E "Test +#|tests passed" "$out/ctest-gpu.log"
echo "== rust"
timeout 120 bash bindings/rust/gpu-test.sh run build-gpu >"$out/rust.log" 2>&1; echo "rust exit $?"; grep -E "test result|passed|FAIL|cold|warm" "$out/rust.log" | tail -8
echo "== cache size"
timeout 150 $cli --precompile --arch sm_90 --cache-dir /tmp/tk-cs -j 16 >"$out/precompile.log" 2>&1; tail -1 "$out/precompile.log"
timeout 60 ./build-gpu/bench/cache_size /tmp/tk-cs sm_90 2>&1 | tail -8
echo "== sweep (heuristics)"
TOKITAI_JIT_TUNE=off TOKITAI_JIT_CACHE_DIR=/tmp/tk-sw timeout 200 ./build-gpu/bench/sweep >"$out/sweep.md" 2>&1
sed -n '/^## summary/,$p' "$out/sweep.md" | head -9
exit $rc
