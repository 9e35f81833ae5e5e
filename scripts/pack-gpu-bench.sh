#!/usr/bin/env bash
# Prepares, on this (x86-64 Debian) machine, what scripts/bench-gpu.sh needs
# on the GPU machine, in ignored folders: the stripped release binary and the
# Vulkan loader and libglvnd .debs in .gl/, the gguf wheel in .whl/.
# Then run there: bash scripts/bench-gpu.sh (carrying .device, .gl and .whl).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .device .whl
cargo build --release -p smelt-cli
strip -o .device/smelt target/release/smelt
# The Vulkan loader and libglvnd, which the NVIDIA ICD needs, as amd64 .debs.
mkdir -p .gl /tmp/smelt-apt/partial
apt_amd64='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/smelt-apt'
# shellcheck disable=SC2086
apt-get $apt_amd64 update >/dev/null
# shellcheck disable=SC2086
(cd .gl && rm -f ./*.deb && apt-get $apt_amd64 download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
py=${PYTHON:-python3}
# The GPU machines have numpy; bench-gpu.sh installs gguf only where missing.
"$py" -m pip download -q --no-deps -d .whl gguf==0.19.0
du -sh .device .gl .whl
