#!/usr/bin/env bash
# README's first quickstart command: fetches the default model if absent,
# builds smelt, and generates text.
#
#   scripts/demo.sh [PROMPT]
set -euo pipefail
cd "$(dirname "$0")/.."
prompt=${1:-"The three most useful things to know about GPUs are"}
bash scripts/fetch-models.sh smollm2
cargo build --release --locked -q -p smelt-cli
exec ./target/release/smelt run -p "$prompt" -n 64
