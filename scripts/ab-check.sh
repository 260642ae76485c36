#!/usr/bin/env bash
# GPU machine (device tool, .devdeps carried): one plan.c build switch
# measured both ways in one call. AB_FLAG (e.g. TK_GEMM_SWAP128_WIDE; or
# several, space-separated, all set alike) is built as 0 and 1 (build-ab0,
# build-ab1); the sweep of AB_MANIFEST (its shapes, every build, interleaved
# runs) and the random sweep of each of SEEDS (AB_N shapes per op; the last
# build, and the first too with AB_BOTH=1).
# AB_VALUES (default "0 1"): the values the switch is built with, one build
# each (build-ab<value>); the first is the baseline, the last the change.
# AB_EXTRA: more targets to build in the last build; AB_RUNS: manifest
# runs per build (default 2). test_gpu_gemm is built only for AB_TEST_*. Tables to $OUT.
. "$(dirname "$0")/gpu-lib.sh" /tmp/tk-ab-out
flag=${AB_FLAG:?AB_FLAG names the build switch}
rc=0
values=${AB_VALUES:-0 1}
base=${values%% *}
last=${values##* }
tests=$([ -n "${AB_TEST_CONFIGS:-}${AB_TEST_CASES:-}" ] && echo test_gpu_gemm)
for v in $values; do
  cmake -S . -B build-ab$v -DCMAKE_PREFIX_PATH="$PWD/.devdeps/root/usr" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_FLAGS="$(for f in $flag; do printf ' -D%s=%s' "$f" "$v"; done)" \
    -DTK_SHIP_FALLBACKS=OFF >/dev/null || exit 1
  # the sweep and the GEMM suite only (both builds alike: no shipped tier)
  cmake --build build-ab$v -j16 --target bench_sweep $tests $([ "$v" = "$last" ] && echo "${AB_EXTRA:-}") \
    >"$out/build-ab$v.log" 2>&1 ||
    { tail -30 "$out/build-ab$v.log"; exit 1; }
done
# AB_TEST_CONFIGS (a test_gpu_gemm configuration substring): those
# configurations checked on the last build first; AB_TEST_CASES: those cases too.
if [ -n "${AB_TEST_CONFIGS:-}" ]; then
  TK_TEST_CONFIGS=$AB_TEST_CONFIGS CK_RUN_CASE=configurations timeout "${AB_TEST_S:-200}" \
    ./build-ab$last/tests/test_gpu_gemm >"$out/gemm-configs.log" 2>&1
  echo "== configurations '$AB_TEST_CONFIGS': exit $?"
  grep -E "^[0-9]+%|Assert|:F:|:E:" "$out/gemm-configs.log" | head -8
fi
for c in ${AB_TEST_CASES:-}; do
  CK_RUN_CASE=$c timeout "${AB_TEST_S:-200}" ./build-ab$last/tests/test_gpu_gemm >"$out/gemm-$c.log" 2>&1
  echo "== test_gpu_gemm $c: exit $?"; grep -E "^[0-9]+%|Assert|:F:|:E:" "$out/gemm-$c.log" | head -4
done
sweep() { # build tag args...
  local b=$1 tag=$2; shift 2
  TOKITAI_JIT_TUNE=off TOKITAI_JIT_CACHE_DIR=/tmp/tk-ab$b timeout "${AB_S:-120}" ./build-ab$b/bench/sweep "$@" \
    --csv "$out/$tag-ab$b.csv" >"$out/$tag-ab$b.md" 2>&1 || rc=1
  echo "== $tag, $flag=$b"; sed -n '/^| op /,/^| all/p' "$out/$tag-ab$b.md"
}
if [ -n "${AB_MANIFEST:-}" ]; then
  for r in $(seq 1 "${AB_RUNS:-2}"); do for b in $values; do sweep $b "man$r" --manifest "$AB_MANIFEST" --count 0; done; done
fi
for seed in ${SEEDS:-}; do
  sweep "$last" "s$seed" --random "${AB_N:-36}" --seed "$seed"
  [ "${AB_BOTH:-0}" = 1 ] && sweep "$base" "s$seed" --random "${AB_N:-36}" --seed "$seed"
done
exit $rc
