#!/usr/bin/env bash
# GPU machine (device tool, .devdeps carried): the ping-pong consumers
# (persist=3) against the cooperative ones. Builds the tree three times,
# TK_GEMM_PINGPONG=0 (never), 1 (the heuristics) and 2 (wherever they fit),
# checks every ping-pong configuration of test_gpu_gemm, then runs the same
# seeded random sweep with each build. SEEDS (default 2026), N per op (36).
. "$(dirname "$0")/gpu-lib.sh" /tmp/tk-pp-out
rc=0
for v in 0 1 2; do
  cmake -S . -B build-pp$v -DCMAKE_PREFIX_PATH="$PWD/.devdeps/root/usr" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_FLAGS="-DTK_GEMM_PINGPONG=$v" >/dev/null || exit 1
  cmake --build build-pp$v -j16 >"$out/build-pp$v.log" 2>&1 || { tail -30 "$out/build-pp$v.log"; exit 1; }
done
echo "== ping-pong configurations (test_gpu_gemm)"
TK_TEST_CONFIGS=${CONFIGS:-persist=3} CK_RUN_CASE=configurations timeout ${TEST_S:-100} ./build-pp1/tests/test_gpu_gemm >"$out/gemm-pp.log" 2>&1
echo "exit $?"; grep -E "^[0-9]+%|Assert|:F:|:E:" "$out/gemm-pp.log" | head -8
for seed in ${SEEDS:-2026}; do
  for v in ${SWEEP_VARIANTS:-1 2 0}; do
    TOKITAI_JIT_TUNE=off TOKITAI_JIT_CACHE_DIR=/tmp/tk-pp$v timeout ${SWEEP_S:-140} ./build-pp$v/bench/sweep --random "${N:-36}" \
      --seed "$seed" --csv "$out/sweep-s$seed-pp$v.csv" >"$out/sweep-s$seed-pp$v.md" 2>&1 || rc=1
    echo "== seed $seed, TK_GEMM_PINGPONG=$v"; sed -n '/^| op /,/^| all/p' "$out/sweep-s$seed-pp$v.md"
  done
done
exit $rc
