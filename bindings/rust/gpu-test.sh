#!/bin/sh
# The Rust crate's device tests on a machine with a GPU and no Rust toolchain.
#
# On a machine with cargo (the CPU machine), from the repository root:
#   bindings/rust/gpu-test.sh build [LIBDIR]
#     builds the device test binary and the GEMM pilot example (release)
#     against LIBDIR (default: build/, the library's build folder) and
#     copies them to bindings/rust/gpu-bin/ (git-ignored: carry that path).
# On the GPU machine, from the repository root:
#   bindings/rust/gpu-test.sh run LIBDIR [CLI]
#     runs them with LD_LIBRARY_PATH=LIBDIR (the GPU build's folder holding
#     libtokitai_jit.so.1) and TK_RUST_REQUIRE_GPU=1 (a missing device fails
#     instead of skipping): the seven operators against the CPU references,
#     a user kernel, then the pilot (cold / warm time to the first result,
#     in-process and through CLI, default LIBDIR/tokitai-jit) at two shapes.
#     Output also in $OUT/rust-gpu.log when OUT is set.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin=$here/gpu-bin
mode=${1:-}
case $mode in
build)
    libdir=$(cd "${2:-build}" && pwd)
    cargo=${CARGO:-/usr/bin/cargo}
    [ -x "$cargo" ] || cargo=cargo
    if [ "$cargo" = /usr/bin/cargo ] && [ -z "${RUSTC:-}" ]; then export RUSTC=/usr/bin/rustc; fi
    export TOKITAI_JIT_LIB_DIR="$libdir" TOKITAI_JIT_NO_RPATH=1
    export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$libdir/rust-target}"
    json=$("$cargo" test --offline --release --manifest-path "$here/Cargo.toml" --test gpu --no-run --message-format=json)
    exe=$(printf '%s\n' "$json" | sed -n 's/.*"executable":"\([^"]*\/gpu-[0-9a-f]*\)".*/\1/p' | tail -1)
    "$cargo" build --offline --release --manifest-path "$here/Cargo.toml" --example gemm_pilot
    [ -n "$exe" ] && [ -x "$exe" ] || { echo "gpu-test.sh: no test binary found" >&2; exit 1; }
    mkdir -p "$bin"
    cp "$exe" "$bin/tokitai-jit-rust-gpu-tests"
    cp "$CARGO_TARGET_DIR/release/examples/gemm_pilot" "$bin/gemm_pilot"
    strip "$bin/tokitai-jit-rust-gpu-tests" "$bin/gemm_pilot" 2>/dev/null || true
    echo "test binary: $exe"
    echo "copied to:   $bin/tokitai-jit-rust-gpu-tests, $bin/gemm_pilot"
    ;;
run)
    [ $# -ge 2 ] || { echo "usage: gpu-test.sh run LIBDIR [CLI]" >&2; exit 2; }
    libdir=$(cd "$2" && pwd)
    cli=${3:-$libdir/tokitai-jit}
    log=${OUT:-/tmp}/rust-gpu.log
    export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" TK_RUST_REQUIRE_GPU=1
    rc=0
    {
        echo "== device tests"
        "$bin/tokitai-jit-rust-gpu-tests" --test-threads=1 --nocapture || rc=$?
        for shape in "1024 1024 1024" "2048 2816 1024"; do
            echo "== gemm pilot $shape"
            # shellcheck disable=SC2086
            "$bin/gemm_pilot" $shape --cli "$cli" || rc=$?
        done
        echo "== exit status $rc"
    } 2>&1 | tee "$log"
    grep -q '^== exit status 0$' "$log"
    ;;
*)
    echo "usage: gpu-test.sh build [LIBDIR] | run LIBDIR [CLI]" >&2
    exit 2
    ;;
esac
