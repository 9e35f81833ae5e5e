#!/usr/bin/env bash
# The CPU kernels on aarch64 (NEON with `dotprod`, and the portable ones)
# under qemu's user-mode emulation: smelt's kernel unit tests
# (`backend::cpu`) built for aarch64-unknown-linux-gnu and run on an
# emulated CPU with every extension (`-cpu max`), so `Isa::NeonDot` is
# tested against the portable kernels as AVX2 and AVX-512 are on x86-64.
#
# Installs Debian's gcc-aarch64-linux-gnu (the linker) and qemu-user, and
# rustup's standard library for the target. Where one of them cannot be
# had (no rustup, no network to its servers), it says so and skips: the
# x86-64 tests do not depend on it.
set -euo pipefail
cd "$(dirname "$0")/.."

target=aarch64-unknown-linux-gnu
if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
    sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
    { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
        $sudo apt-get install -y -qq gcc-aarch64-linux-gnu qemu-user >/dev/null; } \
        || { echo "aarch64 kernels: SKIPPED (apt could not install gcc-aarch64-linux-gnu and qemu-user)"; exit 0; }
fi
if ! rustup target list --installed 2>/dev/null | grep -qx "$target"; then
    rustup target add "$target" >/dev/null 2>&1 \
        || { echo "aarch64 kernels: SKIPPED (rustup could not add the $target standard library)"; exit 0; }
fi

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu -cpu max"
cargo test --release --locked -p smelt --lib --target "$target" backend::cpu
