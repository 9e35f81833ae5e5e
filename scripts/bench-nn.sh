#!/usr/bin/env bash
# Training speed of smelt-nn beside PyTorch, measured in the same run: the
# same model and batch (smelt train cnn|rnn against
# scripts/nn_torch_bench.py), alternating, ROUNDS rounds; prints each
# steps/s and the median ratio smelt / PyTorch.
#
#   scripts/bench-nn.sh cpu            # CPU: smelt --backend cpu vs torch CPU
#   scripts/bench-nn.sh gpu            # GPU: smelt --backend gpu vs torch CUDA
#
# Environment: SMELT (the smelt binary, default target/release/smelt),
# PYTHON, PYTHONPATH (where torch is), MODELS ("cnn rnn"), CNN_BATCH
# (default 32 on cpu, 256 on gpu), RNN_BATCH (32), STEPS (300 cnn, 30
# rnn), ROUNDS (3), THREADS (CPU threads for both, default: all cores).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-cpu}
smelt=${SMELT:-target/release/smelt}
py=${PYTHON:-python3}
rounds=${ROUNDS:-3}
threads=${THREADS:-$(nproc)}
case $mode in
    cpu) backend=cpu; torch_dev=cpu; cnn_batch=${CNN_BATCH:-32} ;;
    gpu) backend=gpu; torch_dev=cuda; cnn_batch=${CNN_BATCH:-256} ;;
    *) echo "usage: $0 cpu|gpu" >&2; exit 2 ;;
esac
rnn_batch=${RNN_BATCH:-32}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

for model in ${MODELS:-cnn rnn}; do
    if [ "$model" = cnn ]; then
        batch=$cnn_batch; steps=${STEPS:-300}
        smelt_args=(train cnn --batch "$batch")
    else
        batch=$rnn_batch; steps=${STEPS:-30}
        smelt_args=(train rnn --batch "$batch")
    fi
    : > "$out/ratios"
    for r in $(seq "$rounds"); do
        s=$("$smelt" "${smelt_args[@]}" --steps "$steps" --backend "$backend" --threads "$threads" --out "$out/run" \
            | sed -n 's/.*(\([0-9.]*\) steps\/s).*/\1/p')
        t=$("$py" scripts/nn_torch_bench.py --model "$model" --batch "$batch" --steps "$steps" \
            --device "$torch_dev" --threads "$threads" | sed -n 's/.*: \([0-9.]*\) steps\/s/\1/p')
        ratio=$(awk -v s="$s" -v t="$t" 'BEGIN {printf "%.3f", s / t}')
        echo "$model $mode batch $batch round $r: smelt $s steps/s, torch $t steps/s, ratio $ratio"
        echo "$ratio" >> "$out/ratios"
    done
    echo "$model $mode batch $batch: median ratio smelt/torch $(median < "$out/ratios")"
done
