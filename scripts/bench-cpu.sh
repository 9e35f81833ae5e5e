#!/usr/bin/env bash
# CPU speed against llama.cpp, measured in the same run: pp512 and tg128
# on 2 threads for SmolLM2-135M requantized from the shipped Q4_1 to
# Q4_K_M, Q6_K and Q8_0, and Gemma 3 270M Q4_K_M as shipped. Per file,
# llama.cpp's llama-bench runs right after `smelt bench` on the same file,
# and the table gives both and their ratio (above 1: smelt is faster).
#
# Usage: scripts/bench-cpu.sh [extra `smelt bench` arguments]
#   LLAMA_BENCH=path      llama-bench built for this machine (CPU only); required
#   LLAMA_QUANTIZE=path   llama-quantize, which makes the requantized files
#                         (--allow-requantize, from the Q4_1); needed only
#                         while a file is not yet in BENCH_DIR
#   BENCH_DIR=dir         where the requantized files are kept between runs
#                         (default: $TMPDIR/smelt-bench-cpu, outside the repo)
#   SMELT=path/to/smelt   the binary (default: builds target/release/smelt)
#   REPS=3                repetitions per test, both engines
#   THREADS=2             threads, both engines
#   MODELS="..."          files to run: gemma3, Q4_1 (SmolLM2 as shipped), or
#                         any type llama-quantize makes of SmolLM2 (Q4_K_M,
#                         Q6_K, Q8_0, Q4_0, Q5_K_S, ...); default
#                         "Q4_K_M Q6_K Q8_0 gemma3"
set -euo pipefail
cd "$(dirname "$0")/.."

models=${SMELT_CACHE:-$HOME/.cache/smelt}/models
scratch=${BENCH_DIR:-${TMPDIR:-/tmp}/smelt-bench-cpu}
reps=${REPS:-3}
threads=${THREADS:-2}
wanted=${MODELS:-Q4_K_M Q6_K Q8_0 gemma3}
: "${LLAMA_BENCH:?set LLAMA_BENCH to a llama-bench binary (the peer this script compares with)}"
if [ -z "${SMELT:-}" ]; then
    cargo build --release -q -p smelt-cli
    SMELT=target/release/smelt
fi

base=$models/SmolLM2-135M-Instruct.Q4_1.gguf
gemma=$models/gemma-3-270m-q4_k_m.gguf
for f in "$base" "$gemma"; do
    [ -f "$f" ] || { echo "missing $f (scripts/fetch-models.sh fetches it)" >&2; exit 1; }
done

# The file of each name. K-quant rows must be whole super-blocks of 256:
# where SmolLM2's are not (576 wide), llama-quantize falls back to Q5_0
# (Q4_K) or Q8_0 (Q6_K), as it does for any user.
file_of() {
    case $1 in
        Q4_1) echo "$base" ;;
        gemma3) echo "$gemma" ;;
        *) echo "$scratch/SmolLM2-135M-Instruct.$1.gguf" ;;
    esac
}
mkdir -p "$scratch"
for t in $wanted; do
    f=$(file_of "$t")
    [ -f "$f" ] && continue
    : "${LLAMA_QUANTIZE:?set LLAMA_QUANTIZE to make $f}"
    echo "making $f" >&2
    "$LLAMA_QUANTIZE" --allow-requantize "$base" "$f.part" "$t" >"$f.log" 2>&1 \
        || { echo "llama-quantize failed, see $f.log" >&2; exit 1; }
    mv "$f.part" "$f"
done

json=$(mktemp)
trap 'rm -f "$json"' EXIT
# Timings from a machine others are using are not comparable across runs;
# the load says how busy it was.
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for t in $wanted; do
    f=$(file_of "$t")
    "$SMELT" bench --backend cpu -m "$f" -t "$threads" -p 512 -n 128 -r "$reps" -o json "$@" \
        | python3 -c "import json,sys; [print(json.dumps(dict(r, file='$t'))) for r in json.load(sys.stdin)]" \
        >>"$json"
    # llama-bench's rows name their test by n_prompt and n_gen.
    "$LLAMA_BENCH" -m "$f" -t "$threads" -r "$reps" -p 512 -n 128 -o jsonl 2>/dev/null \
        | python3 -c "import json,sys
for l in sys.stdin:
    r = json.loads(l)
    test = f\"pp{r['n_prompt']}\" if r['n_prompt'] else f\"tg{r['n_gen']}\"
    print(json.dumps(dict(test=test, samples_ts=r['samples_ts'], type=r.get('model_type', ''), file='$t', peer=True)))" \
        >>"$json"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$json" <<'EOF'
import json, statistics, sys

def spread(s):
    return f"{statistics.median(s):.1f} ({min(s):.1f}-{max(s):.1f})"

rows = [json.loads(line) for line in open(sys.argv[1])]
peer = {(r["file"], r["test"]): r for r in rows if r.get("peer")}
print(f"{'file':<7} {'test':<6} {'smelt t/s (median, min-max)':>28} "
      f"{'llama.cpp t/s (median, min-max)':>32} {'ratio':>6}  llama.cpp's type")
for r in rows:
    if r.get("peer"):
        continue
    key = (r["file"], r["test"])
    med = statistics.median(r["samples_ts"])
    p = peer.get(key)
    here = spread(p["samples_ts"]) if p else "-"
    ratio = f"{med / statistics.median(p['samples_ts']):.2f}" if p else "-"
    print(f"{r['file']:<7} {r['test']:<6} {spread(r['samples_ts']):>28} {here:>32} {ratio:>6}  "
          f"{p['type'] if p else ''}")
EOF
