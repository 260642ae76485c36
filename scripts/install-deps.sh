#!/bin/sh
# Installs the Debian 12 packages that build and test tokitai-jit (run as
# root). Does nothing, and needs no network, when every one is installed.
#   build:        cmake gcc make pkg-config libxxhash-dev libzstd-dev
#   AMD compiler: libamdhip64-dev libamd-comgr-dev libhiprtc-builtins5 (hipRTC
#                 and comgr compile and inspect AMD code objects with no GPU)
#   remote cache: libhiredis-dev libssl-dev, and redis-server for its tests
#   tests:        check libsubunit-dev zstd python3-pytest
#   Rust crate:   cargo rustc
#   Python:       python3-dev python3-venv python3-setuptools python3-wheel python3-pip
#                 python3-torch (the CPU tests against PyTorch)
#   tool docs:    help2man (the man page) bash-completion
# NVRTC (NVIDIA) is not a Debian package: it comes with the CUDA toolkit,
# found at /usr/local/cuda (or CUDA_PATH / CUDA_HOME).
set -eu
pkgs="cmake gcc make pkg-config libxxhash-dev libzstd-dev
libamdhip64-dev libamd-comgr-dev libhiprtc-builtins5
libhiredis-dev libssl-dev redis-server
check libsubunit-dev zstd python3-pytest
cargo rustc
python3-dev python3-venv python3-setuptools python3-wheel python3-pip python3-torch
help2man bash-completion"
# shellcheck disable=SC2086 # the list is split on purpose
if dpkg -s $pkgs >/dev/null 2>&1; then
    exit 0
fi
apt-get update
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $pkgs
