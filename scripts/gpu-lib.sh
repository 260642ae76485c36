# Sourced by the GPU-machine scripts (tune-check.sh, sweep-check.sh,
# final-check.sh): the tree's root as working folder, $out (default: $OUT,
# else $1), NVRTC's own cache kept apart, `has STEP` for $PARTS, and
# `gpu_build` (Release build into build-gpu with the unpacked .devdeps).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${OUT:-$1}
mkdir -p "$out"
cli=./build-gpu/tokitai-jit
export CUDA_CACHE_PATH=/tmp/tk-nv-cache
has() { case " ${parts:-} " in *" $1 "*) return 0 ;; esac; return 1; }
gpu_build() {
  echo "== build"
  cmake -S . -B build-gpu -DCMAKE_PREFIX_PATH="$PWD/.devdeps/root/usr" -DCMAKE_BUILD_TYPE=Release >/dev/null || exit 1
  cmake --build build-gpu -j16 >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
}
