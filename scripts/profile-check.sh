#!/usr/bin/env bash
# Runs on a GPU machine (device tool, with .devdeps): builds, then runs
# bench/sweep --check-only under Nsight Compute (ncu), one call per side and
# shape, and pairs each shape's tokitai kernels with cuBLAS's: kernel names
# (cuBLAS's name its tile and schedule), grids and device times
# (scripts/ncu-pairs.py). ncu flushes the caches before each kernel, so both
# sides start from a cold L2. SWEEP_ARGS (e.g. "--only grad_b") narrows the
# sweep; PARTS (default "build profile") picks the steps. Logs to $OUT.
. "$(dirname "$0")/gpu-lib.sh" /tmp/tk-profile-out
parts=${PARTS:-build profile}
rc=0
has build && gpu_build
if has profile; then
  echo "== ncu over sweep --check-only ${SWEEP_ARGS:-}"
  command -v ncu >/dev/null || { echo "ncu not found"; exit 1; }
  t0=$(date +%s)
  # shellcheck disable=SC2086
  ncu --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$out/ncu.csv" \
    ./build-gpu/bench/sweep --check-only ${SWEEP_ARGS:-} >"$out/check.md" 2>&1 || rc=1
  echo "ncu wall: $(( $(date +%s) - t0 )) s; $(tail -1 "$out/check.md")"
  python3 scripts/ncu-pairs.py "$out/check.md" "$out/ncu.csv" >"$out/pairs.md" || rc=1
  head -5 "$out/pairs.md"
fi
exit $rc
