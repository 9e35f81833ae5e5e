#!/usr/bin/env bash
# CPU speed against llama.cpp: pp512 and tg128 on 2 threads for SmolLM2-135M
# as shipped (Q4_1) and requantized to Q8_0 and Q4_0 with `smelt quantize`
# (made here if missing), one table with the ratio to llama.cpp's
# llama-bench figures on the target machine class (2 cores, AVX2+FMA, no
# AVX-512).
#
# Usage: scripts/bench-cpu.sh [extra `smelt bench` arguments]
#   SMELT=path/to/smelt  the binary (default: builds target/release/smelt)
#   REPS=5               repetitions per test
#   LLAMA_BENCH=path     a llama-bench built on this machine (CPU only): it
#                        runs on each file right after smelt, and the table
#                        gains its figures and the ratio to them (the peer
#                        measured in the same run, not the target class)
set -euo pipefail
cd "$(dirname "$0")/.."

models=${SMELT_CACHE:-$HOME/.cache/smelt}/models
reps=${REPS:-5}
if [ -z "${SMELT:-}" ]; then
    cargo build --release -q -p smelt-cli
    SMELT=target/release/smelt
fi

base=$models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$base" ] || { echo "missing $base (scripts/fetch-models.sh fetches it)" >&2; exit 1; }
for t in Q8_0 Q4_0; do
    f=$models/SmolLM2-135M-Instruct.$t.gguf
    # The output matrix (the tied embeddings) becomes Q8_0, as llama-quantize
    # makes it: Q6_K wants rows of 256, SmolLM2's are 576.
    [ -f "$f" ] || "$SMELT" quantize "$base" "$f" "$t" >&2
done

json=$(mktemp)
trap 'rm -f "$json"' EXIT
for t in Q4_1 Q8_0 Q4_0; do
    f=$models/SmolLM2-135M-Instruct.$t.gguf
    "$SMELT" bench -m "$f" -t 2 -r "$reps" -o json "$@" \
        | python3 -c "import json,sys; [print(json.dumps(dict(r, ftype='$t'))) for r in json.load(sys.stdin)]" \
        >>"$json"
    if [ -n "${LLAMA_BENCH:-}" ]; then
        # llama-bench's rows name their test by n_prompt and n_gen.
        "$LLAMA_BENCH" -m "$f" -t 2 -r "$reps" -p 512 -n 128 -o jsonl 2>/dev/null \
            | python3 -c "import json,sys
for l in sys.stdin:
    r = json.loads(l)
    test = f\"pp{r['n_prompt']}\" if r['n_prompt'] else f\"tg{r['n_gen']}\"
    print(json.dumps(dict(test=test, samples_ts=r['samples_ts'], ftype='$t', peer=True)))" \
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
peer = {(r["ftype"], r["test"]): r["samples_ts"] for r in rows if r.get("peer")}
head = f"{'file':<6} {'test':<6} {'smelt t/s (median, min-max)':>30} {'llama.cpp':>10} {'ratio':>6}"
if peer:
    head += f" {'llama.cpp here (median, min-max)':>34} {'ratio here':>10}"
print(head)
for r in rows:
    if r.get("peer"):
        continue
    key = (r["ftype"], r["test"])
    med = statistics.median(r["samples_ts"])
    ref = LLAMA_CPP.get(key)
    ratio = f"{med / ref:.2f}" if ref else "-"
    line = f"{r['ftype']:<6} {r['test']:<6} {spread(r['samples_ts']):>30} {ref or '-':>10} {ratio:>6}"
    if peer:
        here = peer.get(key)
        line += f" {spread(here) if here else '-':>34} {f'{med / statistics.median(here):.2f}' if here else '-':>10}"
    print(line)
EOF
