#!/usr/bin/env bash
# CPU speed against llama.cpp: pp512 and tg128 on 2 threads for
# SmolLM2-135M as shipped (Q4_1) and requantized to Q8_0, Q4_0, Q4_K_M and
# Q6_K (made here if missing), and Gemma 3 270M Q4_K_M as shipped; one
# table with, per file, llama.cpp's llama-bench run right after smelt on
# the same file and the ratio to it (the peer measured in the same run),
# plus the stored figures of llama-bench on the target machine class (2
# cores, AVX2+FMA, no AVX-512) where there are some.
#
# Usage: scripts/bench-cpu.sh [extra `smelt bench` arguments]
#   SMELT=path/to/smelt     the binary (default: builds target/release/smelt)
#   REPS=5                  repetitions per test
#   THREADS=2               threads for both engines
#   LLAMA_BENCH=path        a llama-bench built for this machine (CPU only);
#                           without it the table has smelt's figures only
#   LLAMA_QUANTIZE=path     llama-quantize, which makes the requantized files
#                           (with --allow-requantize); without it they are
#                           made by `smelt quantize`
#   MODELS="Q4_1 ..."       which files, of: Q4_1 Q8_0 Q4_0 Q4_K_M Q6_K gemma3
set -euo pipefail
cd "$(dirname "$0")/.."

models=${SMELT_CACHE:-$HOME/.cache/smelt}/models
reps=${REPS:-5}
threads=${THREADS:-2}
wanted=${MODELS:-Q4_1 Q8_0 Q4_0 Q4_K_M Q6_K gemma3}
if [ -z "${SMELT:-}" ]; then
    cargo build --release -q -p smelt-cli
    SMELT=target/release/smelt
fi

base=$models/SmolLM2-135M-Instruct.Q4_1.gguf
gemma=$models/gemma-3-270m-q4_k_m.gguf
[ -f "$base" ] || { echo "missing $base (scripts/fetch-models.sh fetches it)" >&2; exit 1; }

# The file of each name, made from the shipped Q4_1 where it is missing.
# K-quant rows must be whole super-blocks of 256: where SmolLM2's are not
# (576 wide), llama-quantize falls back to Q5_0 (Q4_K) or Q8_0 (Q6_K).
file_of() {
    case $1 in
        Q4_1) echo "$base" ;;
        gemma3) echo "$gemma" ;;
        *) echo "$models/SmolLM2-135M-Instruct.$1.gguf" ;;
    esac
}
for t in $wanted; do
    f=$(file_of "$t")
    [ -f "$f" ] && continue
    case $t in
        gemma3) echo "missing $gemma (scripts/fetch-models.sh fetches it)" >&2; exit 1 ;;
    esac
    if [ -n "${LLAMA_QUANTIZE:-}" ]; then
        "$LLAMA_QUANTIZE" --allow-requantize "$base" "$f" "$t" >&2
    else
        "$SMELT" quantize "$base" "$f" "$t" >&2
    fi
done

json=$(mktemp)
trap 'rm -f "$json"' EXIT
for t in $wanted; do
    f=$(file_of "$t")
    "$SMELT" bench --backend cpu -m "$f" -t "$threads" -p 512 -n 128 -r "$reps" -o json "$@" \
        | python3 -c "import json,sys; [print(json.dumps(dict(r, file='$t'))) for r in json.load(sys.stdin)]" \
        >>"$json"
    if [ -n "${LLAMA_BENCH:-}" ]; then
        # llama-bench's rows name their test by n_prompt and n_gen.
        "$LLAMA_BENCH" -m "$f" -t "$threads" -r "$reps" -p 512 -n 128 -o jsonl 2>/dev/null \
            | python3 -c "import json,sys
for l in sys.stdin:
    r = json.loads(l)
    test = f\"pp{r['n_prompt']}\" if r['n_prompt'] else f\"tg{r['n_gen']}\"
    print(json.dumps(dict(test=test, samples_ts=r['samples_ts'], file='$t', peer=True)))" \
            >>"$json"
    fi
done

python3 - "$json" <<'EOF'
import json, statistics, sys

# llama-bench -t 2 on the target machine class, tokens/s.
LLAMA_CPP = {
    ("Q4_1", "pp512"): 183, ("Q4_1", "tg128"): 91,
    ("Q8_0", "pp512"): 358, ("Q8_0", "tg128"): 95,
    ("Q4_0", "pp512"): 430, ("Q4_0", "tg128"): 130,
}
def spread(s):
    return f"{statistics.median(s):.1f} ({min(s):.1f}-{max(s):.1f})"

rows = [json.loads(line) for line in open(sys.argv[1])]
peer = {(r["file"], r["test"]): r["samples_ts"] for r in rows if r.get("peer")}
head = f"{'file':<7} {'test':<6} {'smelt t/s (median, min-max)':>30} {'llama.cpp':>10} {'ratio':>6}"
if peer:
    head += f" {'llama.cpp here (median, min-max)':>34} {'ratio here':>10}"
print(head)
for r in rows:
    if r.get("peer"):
        continue
    key = (r["file"], r["test"])
    med = statistics.median(r["samples_ts"])
    ref = LLAMA_CPP.get(key)
    ratio = f"{med / ref:.2f}" if ref else "-"
    line = f"{r['file']:<7} {r['test']:<6} {spread(r['samples_ts']):>30} {ref or '-':>10} {ratio:>6}"
    if peer:
        here = peer.get(key)
        line += f" {spread(here) if here else '-':>34} {f'{med / statistics.median(here):.2f}' if here else '-':>10}"
    print(line)
EOF
