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
