#!/usr/bin/env bash
# Runs on a GPU machine (the device tool's copy of the tree, with .devdeps):
# build, `tokitai-jit --tune` of the MoE expert shapes (every class of M up
# to 8192) and of the default manifest's GEMM lines (their own classes) into
# a fresh cache, then bench/sweep against cuBLAS with the tuning records and
# with the heuristics alone (TOKITAI_JIT_TUNE=off). Logs and CSVs to $OUT.
# PARTS (default "build tune sweep heur") picks the steps; TUNE_DEFAULT=0
# tunes the expert shapes only.
. "$(dirname "$0")/gpu-lib.sh" /tmp/tk-sweep-out
parts=${PARTS:-build tune sweep heur}
cache=${TUNE_CACHE:-/tmp/tk-sweep-cache}
rc=0

has build && gpu_build
if has tune; then
  echo "== tune"
  rm -rf "$cache"
  t0=$(date +%s)
  $cli --tune -v --manifest manifests/moe-experts.tkm --cache-dir "$cache" >"$out/tune-experts.log" 2>&1 || rc=1
  tail -1 "$out/tune-experts.log"
  if [ "${TUNE_DEFAULT:-1}" = 1 ]; then
    $cli --tune -v --classes manifest --cache-dir "$cache" >"$out/tune-default.log" 2>&1 || rc=1
    tail -1 "$out/tune-default.log"
  fi
  echo "tune wall: $(( $(date +%s) - t0 )) s; records: $($cli --list --cache-dir "$cache" | grep -c tuning)"
fi
if has sweep; then
  echo "== sweep, tuning records"
  TOKITAI_JIT_CACHE_DIR=$cache ./build-gpu/bench/sweep --csv "$out/sweep-tuned.csv" >"$out/sweep-tuned.md" 2>&1 || rc=1
  sed -n '/^## summary/,$p' "$out/sweep-tuned.md"
fi
if has heur; then
  echo "== sweep, heuristics (TOKITAI_JIT_TUNE=off)"
  TOKITAI_JIT_TUNE=off TOKITAI_JIT_CACHE_DIR=$cache ./build-gpu/bench/sweep --csv "$out/sweep-heur.csv" >"$out/sweep-heur.md" 2>&1 || rc=1
  sed -n '/^## summary/,$p' "$out/sweep-heur.md"
fi
exit $rc
