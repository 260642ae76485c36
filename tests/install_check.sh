#!/bin/sh
# Installs the build into a temporary prefix, then builds a consumer against it
# with find_package(tokitai_jit) and with pkg-config, and runs both.
# Usage: install_check.sh BUILD_DIR SOURCE_DIR
set -eu
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
test -x "$tmp/prefix/bin/tokitai-jit"
"$tmp/prefix/bin/tokitai-jit" --version
# The shipped tier (cmake/tk_shipped.cmake), when this build made one: installed
# without the user-cache bookkeeping, and found by the installed library from
# its own place (lib/../share/tokitai-jit/cache) with nothing set.
if [ -d "$build/share/tokitai-jit/cache" ]; then
    tier=$tmp/prefix/share/tokitai-jit/cache
    n=$(find "$tier" -name '*.tkc' | wc -l)
    [ "$n" -gt 0 ] || { echo "install check: no entries in $tier" >&2; exit 1; }
    if [ -e "$tier/3/locks" ] || [ -e "$tier/3/stats" ]; then
        echo "install check: $tier holds the build's locks or statistics" >&2
        exit 1
    fi
    real=$(cd "$tier" && pwd -P)
    info=$(env -u TOKITAI_JIT_CACHE_PATH "$tmp/prefix/bin/tokitai-jit" --cache-dir "$tmp/user" --info)
    printf '%s\n' "$info" | grep -qxF "shipped tier: $real" ||
        { printf 'install check: the installed tool does not find %s:\n%s\n' "$real" "$info" >&2; exit 1; }
    printf '%s\n' "$info" | grep -qxF "read-only caches: $real (the default: the shipped tier)" ||
        { printf 'install check: %s is not searched by default:\n%s\n' "$real" "$info" >&2; exit 1; }
    echo "install check: the shipped tier ($n entries) installed and found"
fi
cmake -S "$src/tests/install" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
    -DCMAKE_BUILD_RPATH="$tmp/prefix/lib" >/dev/null
cmake --build "$tmp/consumer" >/dev/null
"$tmp/consumer/use"
pcdir=$(dirname "$(find "$tmp/prefix" -name tokitai_jit.pc)")
# shellcheck disable=SC2046
cc "$src/tests/install/main.c" -o "$tmp/use-pc" $(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs tokitai_jit) \
    -Wl,-rpath,"$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=libdir tokitai_jit)"
"$tmp/use-pc"
echo "install check passed: find_package and pkg-config consumers built and ran"
