#!/bin/sh
# CTest driver of the Rust crate's tests against the library just built.
#   ctest-cargo.sh cpu|gpu LIBDIR TARGETDIR [sanitize]
# cpu: the layout and stub suites, the examples built and the doc examples
#      compiled, on the stub backend; gpu: the device suite, exit 77 (CTest: Skipped) when every
#      test skipped for want of a device.
# cargo: $CARGO, else Debian's /usr/bin/cargo (with /usr/bin/rustc), else
# the first on PATH; none: exit 77 with the reason.
set -u
mode=$1 libdir=$2 target=$3 sanitize=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
if [ -n "$sanitize" ]; then
    echo "SKIPPED: sanitizer build (the Rust tests load the library without the ASan runtime; run them against a normal build)"
    exit 77
fi
cargo=${CARGO:-}
if [ -z "$cargo" ]; then
    if [ -x /usr/bin/cargo ]; then
        cargo=/usr/bin/cargo
        [ -z "${RUSTC:-}" ] && [ -x /usr/bin/rustc ] && RUSTC=/usr/bin/rustc && export RUSTC
    else
        cargo=$(command -v cargo || true)
    fi
fi
if [ -z "$cargo" ] || ! command -v "$cargo" >/dev/null 2>&1; then
    echo "SKIPPED: cargo not found${cargo:+ (CARGO=$cargo)} (Debian: apt-get install cargo)"
    exit 77
fi
export TOKITAI_JIT_LIB_DIR="$libdir" CARGO_TARGET_DIR="$target"
unset TOKITAI_JIT_CACHE_DIR
echo "cargo: $cargo ($("$cargo" --version)), rustc: ${RUSTC:-rustc} ($("${RUSTC:-rustc}" --version)), library: $libdir"
case $mode in
cpu)
    export TOKITAI_JIT_BACKEND=stub
    "$cargo" test --offline --manifest-path "$here/Cargo.toml" --lib --test layout --test stub --examples || exit $?
    [ -n "${RUSTC:-}" ] && [ -z "${RUSTDOC:-}" ] && [ -x "${RUSTC%rustc}rustdoc" ] && export RUSTDOC="${RUSTC%rustc}rustdoc"
    exec "$cargo" test --offline --manifest-path "$here/Cargo.toml" --doc
    ;;
gpu)
    log=$target/gpu-test.log
    mkdir -p "$target"
    "$cargo" test --offline --manifest-path "$here/Cargo.toml" --test gpu -- --test-threads=1 --nocapture >"$log" 2>&1
    rc=$?
    cat "$log"
    [ $rc -ne 0 ] && exit $rc
    ran=$(sed -n 's/^test result: ok\. \([0-9]*\) passed.*/\1/p' "$log" | head -1)
    ran=${ran:-0}
    skipped=$(grep -c 'tokitai-jit-rust: SKIPPED' "$log")
    if [ "$ran" -gt 0 ] && [ "$skipped" -ge "$ran" ]; then
        echo "SKIPPED: all $ran device tests skipped (no device)"
        exit 77
    fi
    exit 0
    ;;
*)
    echo "usage: ctest-cargo.sh cpu|gpu LIBDIR TARGETDIR [sanitize]" >&2
    exit 2
    ;;
esac
