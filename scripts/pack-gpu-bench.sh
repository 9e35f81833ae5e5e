#!/usr/bin/env bash
# Prepares, on this (x86-64 Debian) machine, what scripts/bench-gpu.sh needs
# on the GPU machine, in ignored folders: the stripped release binary and the
# Vulkan loader and glvnd .debs in .device/, the gguf (and numpy) wheels in .whl/.
# Then run there: bash scripts/bench-gpu.sh (carrying .device and .whl).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .device .whl
cargo build --release -p smelt-cli
strip -o .device/smelt target/release/smelt
# The Vulkan loader, and glvnd's libraries that NVIDIA's ICD
# (libGLX_nvidia.so.0) needs to load: without libGLdispatch the loader
# finds no vkCreateInstance in it and reports no drivers.
(cd .device && rm -f ./*.deb && apt-get download libvulkan1 libglvnd0 libglx0 libegl1 libgl1 libopengl0)
py=${PYTHON:-python3}
# gguf is pure Python; numpy's wheels for the Pythons a GPU machine may
# have. bench-gpu.sh installs only what that machine lacks.
rm -f .whl/*.whl
"$py" -m pip download -q --no-deps --only-binary=:all: -d .whl gguf==0.19.0
for v in 3.12; do
    "$py" -m pip download -q --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
        --python-version "$v" -d .whl 'numpy<2.3' || echo "no numpy wheel for Python $v" >&2
done
du -sh .device .whl
