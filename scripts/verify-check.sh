#!/usr/bin/env bash
# GPU machine (device tool, .devdeps carried): this round's checks in one
# call. PARTS (default "suites cold unaligned"):
#   suites     test_gpu_gemm's staged, generic, exact_small, exact_large and
#              checked cases and the other GPU suites (not Rust, not
#              Python), in parallel
#   cold       bench/dynamic from an empty user cache with the shipped tier
#              (cold), with no tier at all (bare), with the fallbacks built
#   unaligned  bench/sweep of bench/unaligned-check.tkm (staged operands)
#   sweep      the random sweep of each seed in SEEDS (default "2026 7 31")
#   softmax    bench/softmax with odd widths
. "$(dirname "$0")/gpu-lib.sh" /tmp/tk-verify-out
parts=${PARTS:-suites cold unaligned}
rc=0
gpu_build
if has suites; then
  for c in ${CASES:-staged generic exact_small exact_large checked}; do
    CK_RUN_CASE=$c timeout "${SUITE_S:-300}" ./build-gpu/tests/test_gpu_gemm >"$out/gemm-$c.log" 2>&1 &
  done
  timeout "${SUITE_S:-300}" ctest --test-dir build-gpu -L gpu -E 'test_gpu_gemm|rust|python' -j4 \
    --output-on-failure >"$out/ctest-gpu.log" 2>&1 || rc=1
  wait
  for c in ${CASES:-staged generic exact_small exact_large checked}; do
    r=$(grep -E '^[0-9]+%: Checks' "$out/gemm-$c.log" | tail -1)
    echo "test_gpu_gemm $c: ${r:-no result (timed out?)}"
    case $r in 100%*) ;; *) rc=1; grep -E "Assertion|:F:|:E:" "$out/gemm-$c.log" | head -3 ;; esac
  done
  grep -E "Test +#|tests passed|tests failed" "$out/ctest-gpu.log"
fi
if has cold; then
  for v in stable/async/cold stable/async/bare stable/async/fallbacks; do
    timeout 120 ./build-gpu/bench/dynamic --only $v --steps 20 >"$out/dynamic-${v//\//-}.log" 2>&1
    echo "dynamic $v exit $?"
    grep -E "^SUMMARY" "$out/dynamic-${v//\//-}.log" | tr ' ' '\n' |
      grep -E "step1_ms|first20|loaded_ms|caller_compiles|no_fallback_from_step|steady_over" | tr '\n' ' '; echo
  done
fi
if has unaligned; then
  TOKITAI_JIT_TUNE=off TOKITAI_JIT_CACHE_DIR=/tmp/tk-un timeout 150 ./build-gpu/bench/sweep \
    --manifest bench/unaligned-check.tkm --count 0 --csv "$out/unaligned.csv" >"$out/unaligned.md" 2>&1 || rc=1
  echo "unaligned sweep exit $?"; grep -E "^\| [0-9]+x|^## gemm|^\| (fwd|grad|all)" "$out/unaligned.md"
fi
if has sweep; then
  for seed in ${SEEDS:-2026 7 31}; do
    TOKITAI_JIT_TUNE=off TOKITAI_JIT_CACHE_DIR=/tmp/tk-sw timeout "${SWEEP_S:-120}" ./build-gpu/bench/sweep \
      --random "${SWEEP_N:-36}" --seed "$seed" --csv "$out/sweep-$seed.csv" >"$out/sweep-$seed.md" 2>&1 || rc=1
    echo "== seed $seed"; sed -n '/^| op /,/^| all/p' "$out/sweep-$seed.md"; grep -E "failed|target" "$out/sweep-$seed.md" | tail -2
  done
fi
if has softmax; then
  timeout 150 ./build-gpu/bench/softmax --odd 4 --seed 9 >"$out/softmax.md" 2>&1 || rc=1
  echo "softmax exit $?"; grep -E "^\|" "$out/softmax.md" | awk -F'|' '{print $2,$3,$7,$11}'
fi
exit $rc
