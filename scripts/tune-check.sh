#!/usr/bin/env bash
# Runs on a GPU machine (the device tool's copy of the tree, with .devdeps):
# build, the GEMM GPU suites, `tokitai-jit --tune` of the MoE expert shapes
# into a fresh cache, then bench/dynamic's warm MoE step with the records and
# without them (TOKITAI_JIT_TUNE=off), GEMMs timed against cuBLAS.
# PARTS (default "build tests tune dynamic") picks the steps.
. "$(dirname "$0")/gpu-lib.sh" /tmp/tk-tune-out
parts=${PARTS:-build tests tune dynamic}
cache=${TUNE_CACHE:-/tmp/tk-tune-cache}
rc=0

has build && gpu_build
if has tests; then
  echo "== GPU suites: ${TESTS:-gpu_gemm|gpu_dynamic}"
  ctest --test-dir build-gpu -R "${TESTS:-gpu_gemm|gpu_dynamic}" --output-on-failure >"$out/ctest.log" 2>&1 || rc=1
  grep -E "tests passed|Passed|Failed|\*\*\*" "$out/ctest.log" | tail -8
  [ $rc -eq 0 ] || grep -E "Assertion|failed|FAIL" "$out/ctest.log" | head -20
fi
if has tune; then
  echo "== tune (${TUNE_MANIFEST:-manifests/moe-experts.tkm})"
  rm -rf "$cache"
  t0=$(date +%s)
  $cli --precompile --manifest "${TUNE_MANIFEST:-manifests/moe-experts.tkm}" --cache-dir "$cache" -j16 2>&1 | tail -1
  $cli --tune --manifest "${TUNE_MANIFEST:-manifests/moe-experts.tkm}" --cache-dir "$cache" 2>&1 | tee "$out/tune.log" | grep -vE "^  " ; rc=$((rc | $?))
  grep -E "^  " "$out/tune.log" | awk '{print}' | head -500 > /dev/null
  echo "tune wall: $(( $(date +%s) - t0 )) s"
  $cli --list --cache-dir "$cache" | grep -c tuning
fi
if has dynamic; then
  echo "== bench/dynamic, warm cache with tuning records"
  $cli --precompile --cache-dir "$cache" -j16 2>&1 | tail -1
  ./build-gpu/bench/dynamic --warm-cache "$cache" --only stable/sync/warm --quiet 2>&1 | tee "$out/dyn-tuned.log" | tail -25
  echo "== bench/dynamic, warm cache, TOKITAI_JIT_TUNE=off (heuristics)"
  TOKITAI_JIT_TUNE=off ./build-gpu/bench/dynamic --warm-cache "$cache" --only stable/sync/warm --quiet 2>&1 | tee "$out/dyn-heur.log" | tail -25
fi
exit $rc
