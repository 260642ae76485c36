#!/usr/bin/env bash
# One GPU call before a release (device tool; carry .devdeps and the Rust
# test binaries that `bindings/rust/gpu-test.sh build` leaves in
# bindings/rust/gpu-bin). Logs and tables go to $OUT; the whole run keeps to
# TK_BUDGET seconds (default 560), later steps getting what is left:
#   1. build (Release) and the Python C extension in place;
#   2. correctness, in parallel: every GPU suite (the GEMM cases each in its
#      own process), the Rust device tests and GEMM pilot, and the default
#      manifest's precompile for sm_90 into a fresh cache;
#   3. measurements, one at a time on a quiet machine: the cache's size and
#      disk hit (bench/cache_size), the host cost of a call from Python, the
#      MoE training example in every mode, and the seeded random GEMM sweep
#      against cuBLAS (TK_SWEEP_SEED, default 7; 36 shapes per op).
. "$(dirname "$0")/gpu-lib.sh" /tmp/tk-release-out
t0=$SECONDS
budget=${TK_BUDGET:-560}
left() { echo $((budget - (SECONDS - t0))); }
rc=0
gpu_build
echo "build done at $((SECONDS - t0)) s"
(cd python && TOKITAI_JIT_LIBRARY_DIR=../build-gpu python3 setup.py -q build_ext --inplace) >"$out/ext.log" 2>&1 ||
  echo "C extension not built (see ext.log); the ctypes path is measured"

echo "== correctness (parallel)"
lim=$(($(left) - 170))
cases="exact_small exact_large generic offsets checked skinny smallk configurations"
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
echo "correctness done at $((SECONDS - t0)) s, rc $rc"

echo "== cache size and disk hit"
timeout 60 ./build-gpu/bench/cache_size /tmp/tk-cs sm_90 2>&1 | tail -8
echo "== host cost of a call from Python"
PYTHONPATH=$PWD/python TOKITAI_JIT_LIBRARY=$PWD/build-gpu/libtokitai_jit.so.1 \
  timeout 90 python3 examples/torch_host_cost.py --rounds 15 2>&1 | tail -14
echo "== MoE training example"
PYTHONPATH=$PWD/python TOKITAI_JIT_LIBRARY=$PWD/build-gpu/libtokitai_jit.so.1 PYTHONUNBUFFERED=1 \
  timeout $(($(left) - 100)) python3 examples/moe_train.py --steps 200 >"$out/moe.log" 2>&1
tail -12 "$out/moe.log"
echo "== random GEMM sweep ($(left) s left)"
if [ "$(left)" -gt 40 ]; then
  TOKITAI_JIT_TUNE=off TOKITAI_JIT_CACHE_DIR=/tmp/tk-sw timeout $(($(left) - 10)) \
    ./build-gpu/bench/sweep --random 36 --seed "${TK_SWEEP_SEED:-7}" >"$out/sweep.md" 2>&1
  echo "sweep exit $?"
  sed -n '/^## summary/,$p' "$out/sweep.md" | head -12
fi
echo "all done at $((SECONDS - t0)) s, rc $rc"
exit $rc
