#!/usr/bin/env bash
# Prepares, on this (x86-64 Debian) machine, what scripts/bench-gpu.sh needs
# on the GPU machine, in ignored folders: the stripped release binary and the
# Vulkan loader .deb in .device/, the gguf (and numpy) wheels in .whl/.
# Then run there: bash scripts/bench-gpu.sh (carrying .device and .whl).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .device .whl
cargo build --release -p smelt-cli
strip -o .device/smelt target/release/smelt
(cd .device && rm -f libvulkan1_*.deb && apt-get download libvulkan1)
py=${PYTHON:-python3}
# numpy's wheel matches this machine's Python; bench-gpu.sh installs the
# wheels only where the GPU machine lacks gguf or numpy.
"$py" -m pip download -q --no-deps --only-binary=:all: -d .whl gguf==0.19.0 numpy
du -sh .device .whl
