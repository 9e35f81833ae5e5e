#!/usr/bin/env bash
# GPU speed on an NVIDIA Linux machine through Vulkan (see GPU-BENCH.md in
# the shared docs): builds nothing, runs every case of
# `smelt bench --backend gpu -o json` on synthetic models, prints one table
# last and writes full logs under $OUT (default .device/out).
#
# Brought along in ignored folders (64 MiB in all):
#   .device/smelt                 release binary (built on x86-64 Debian)
#   .device/*.deb                 Vulkan loader and glvnd (scripts/pack-gpu-bench.sh)
#   .whl/*.whl                    the gguf wheel (and numpy's, if the machine lacks it)
# The tokenizer donor (Llama-3 vocabulary) is read from testdata/ or .device/.
#
# Environment: CASES ("shape:type ..."), MODES ("fast exact"), REPS (5),
# PP (512) and TG (128) tokens, CASE_TIMEOUT (100 s per case and mode),
# MODELS (/tmp/smelt-bench-models), BW (bytes/s of a device-to-device
# copy, read + written; default 4.3e12 on H200, 3.0e12 on H100 as an
# estimate to be replaced by a measured figure), ALLOW_SOFTWARE=1 for a
# dry run on lavapipe, PERF=1 to add one `--perf` run per case and mode
# (device time per kernel, in $OUT/*.perf and printed before the table).
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-.device/out}
# Outside .device: a carried .device replaces the remote one, and the
# synthetic models (GBs) should survive between calls on a warm machine.
MODELS=${MODELS:-/tmp/smelt-bench-models}
CASES=${CASES:-"llama-1b:Q4_0 llama-1b:Q8_0 llama-8b:Q4_0"}
REPS=${REPS:-5}
# fast: the GPU's default mode (hardware arithmetic, f32 activations);
# exact: --exact (activations rounded as ggml does, bit for bit llama.cpp).
MODES=${MODES:-"fast exact"}
SMELT=${SMELT:-.device/smelt}
mkdir -p "$OUT" "$MODELS"
log=$OUT/bench-gpu.log
: >"$log"
say() { echo "== $*" | tee -a "$log" >&2; }

[ -x "$SMELT" ] || { echo "error: no release binary at $SMELT" >&2; exit 1; }

say "Vulkan loader"
# The loader and glvnd (NVIDIA's Vulkan ICD is libGLX_nvidia.so.0, which
# needs libGLdispatch): unpacked where the machine lacks them.
if ! ldconfig -p | grep -q 'libvulkan.so.1' || ! ldconfig -p | grep -q 'libGLdispatch.so.0'; then
    debs=$(ls .device/*.deb 2>/dev/null || true)
    [ -n "$debs" ] || { echo "error: no libvulkan.so.1/libGLdispatch.so.0 and no .device/*.deb" >&2; exit 1; }
    for deb in $debs; do dpkg -x "$deb" /; done
    ldconfig
fi
if [ -z "${VK_DRIVER_FILES:-}" ]; then
    for f in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json \
             /etc/vulkan/icd.d/nvidia_icd.json; do
        [ -f "$f" ] && export VK_DRIVER_FILES=$f && break
    done
fi
# As the device notes say for these machines (harmless for compute).
egl=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
[ -z "${__EGL_VENDOR_LIBRARY_FILENAMES:-}" ] && [ -f "$egl" ] && export __EGL_VENDOR_LIBRARY_FILENAMES=$egl
echo "VK_DRIVER_FILES=${VK_DRIVER_FILES:-}" >>"$log"

say "devices"
"$SMELT" devices 2>&1 | tee -a "$log"
"$SMELT" devices --json >"$OUT/devices.json"
if [ -z "${ALLOW_SOFTWARE:-}" ] && ! grep -q '"software": *false' "$OUT/devices.json"; then
    echo "error: no hardware GPU adapter (see $log; VK_LOADER_DEBUG=error shows why)" >&2
    VK_LOADER_DEBUG=error "$SMELT" devices >>"$log" 2>&1 || true
    exit 1
fi

say "python gguf"
py=${PYTHON:-python3}
# Only what is missing: the machine's own numpy is kept when it has one.
if ! "$py" -c 'import gguf' 2>/dev/null; then
    want=gguf
    "$py" -c 'import numpy' 2>/dev/null || want="gguf numpy"
    "$py" -m pip install -q --no-index --no-deps --find-links .whl --target .device/py $want >>"$log" 2>&1
    export PYTHONPATH=$PWD/.device/py${PYTHONPATH:+:$PYTHONPATH}
    "$py" -c 'import gguf, numpy' || { echo "error: gguf/numpy not importable (see $log)" >&2; exit 1; }
fi

say "tokenizer donor"
donor=$MODELS/ggml-vocab-llama-bpe.gguf
if [ ! -f "$donor" ]; then
    for src in testdata/tokenizer/ggml-vocab-llama-bpe.gguf testdata/tokenizer/ggml-vocab-llama-bpe.gguf.gz \
               .device/ggml-vocab-llama-bpe.gguf .device/ggml-vocab-llama-bpe.gguf.gz; do
        case $src in
            *.gz) [ -f "$src" ] && gunzip -c "$src" >"$donor" && break ;;
            *) [ -f "$src" ] && cp "$src" "$donor" && break ;;
        esac
    done
fi
[ -f "$donor" ] || { echo "error: no ggml-vocab-llama-bpe.gguf donor found" >&2; exit 1; }

for case in $CASES; do
    shape=${case%%:*}; qt=${case##*:}
    model=$MODELS/$shape-${qt,,}.gguf
    if [ ! -f "$model" ]; then
        say "writing $model"
        "$py" scripts/synth_gguf.py "$donor" "$model" "$shape" "$qt" >>"$log" 2>&1
    fi
    for mode in $MODES; do
        say "bench $model ($mode)"
        flags=()
        [ "$mode" = exact ] && flags=(--exact)
        # Warm-up and repeats are smelt bench's (-r); a case that fails or
        # runs past CASE_TIMEOUT seconds leaves its row empty, not the table.
        timeout "${CASE_TIMEOUT:-100}" "$SMELT" bench -m "$model" --backend gpu "${flags[@]}" \
            -p "${PP:-512}" -n "${TG:-128}" -r "$REPS" -o json --verbose \
            >"$OUT/$shape-$qt-$mode.json" 2>>"$log" || say "bench $model ($mode) failed (rc $?)"
        if [ -n "${PERF:-}" ]; then
            # Timed kernels wait after each submission: separate from the
            # figures above.
            timeout "${CASE_TIMEOUT:-100}" "$SMELT" bench -m "$model" --backend gpu "${flags[@]}" \
                -p "${PP:-512}" -n "${TG:-128}" -r 1 --perf >/dev/null 2>"$OUT/$shape-$qt-$mode.perf" \
                || say "perf run $model ($mode) failed (rc $?)"
        fi
    done
done

if [ -n "${PERF:-}" ]; then
    for f in "$OUT"/*.perf; do
        say "device time per kernel: $(basename "$f" .perf)"
        # The first PERF_ROWS kernels of each test.
        awk -v rows="${PERF_ROWS:-8}" '/^smelt: (pp|tg)/ { n = 0; print; next }
            /^\| / { if (n++ < rows + 2) print }' "$f" | tee -a "$log"
    done
fi

say "table"
export MODELS MODES
BW=${BW:-} "$py" - "$OUT" $CASES <<'PY' | tee -a "$log"
import json, os, statistics, sys
out, cases = sys.argv[1], sys.argv[2:]
from gguf import GGUFReader
devs = json.load(open(os.path.join(out, "devices.json")))
name = next((d["name"] for d in devs if not d["software"]), devs[0]["name"] if devs else "?")
bw = float(os.environ["BW"]) if os.environ.get("BW") else (4.3e12 if "H200" in name else 3.0e12)
print(f"device: {name}; roofline bandwidth {bw/1e12:.2f} TB/s (BW=...)")
print("| model | acts | test | t/s median | spread (min-max) | subm/token | disp/token | roofline |")
print("|---|---|---|---:|---:|---:|---:|---:|")
for case in cases:
    shape, qt = case.split(":")
    model = os.path.join(os.environ["MODELS"], f"{shape}-{qt.lower()}.gguf")
    # Bytes one decoded token reads: every weight but the embedding table
    # (get_rows reads one row of it; output.weight is its own tensor).
    r = GGUFReader(model)
    wbytes = sum(int(t.n_bytes) for t in r.tensors if t.name != "token_embd.weight")
    for mode in os.environ["MODES"].split():
        try:
            rows = json.load(open(os.path.join(out, f"{shape}-{qt}-{mode}.json")))
        except (OSError, ValueError):
            print(f"| {shape} {qt} | {mode} | (failed: see bench-gpu.log) | | | | | |")
            continue
        for row in rows:
            test, ts = row["test"], row["samples_ts"]
            med = statistics.median(ts)
            roof = f"{med * wbytes / bw:.1%}" if test.startswith("tg") else ""
            sub = row.get("submissions_per_token")
            disp = row.get("dispatches_per_token")
            fmt = lambda v, d: "?" if v is None else f"{v:.{d}f}"
            print(f"| {shape} {qt} | {mode} | {test} | {med:.1f} | {min(ts):.1f}-{max(ts):.1f} | "
                  f"{fmt(sub, 3)} | {fmt(disp, 1)} | {roof} |")
PY
