#!/usr/bin/env bash
# GPU speed on an NVIDIA Linux machine through Vulkan (see GPU-BENCH.md in
# the shared docs): builds nothing, runs every case of
# `smelt bench --backend gpu -o json` on synthetic models, prints one table
# last and writes full logs under $OUT (default .device/out).
#
# Brought along in ignored folders (64 MiB in all):
#   .device/smelt                 release binary (built on x86-64 Debian)
#   .gl/*.deb                     Vulkan loader and libglvnd (libvulkan1 libegl1
#                                 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
#   .whl/*.whl                    the gguf wheel (and numpy's, if the machine lacks it)
# The tokenizer donor (Llama-3 vocabulary) is read from testdata/ or .device/.
#
# Environment: CASES ("shape:type ..."), REPS (5), BW (bytes/s of a
# device-to-device copy, read + written; default 4.3e12 on H200, 3.0e12 on
# H100 as an estimate to be replaced by a measured figure).
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-.device/out}
MODELS=${MODELS:-.device/models}
CASES=${CASES:-"llama-1b:Q4_0 llama-1b:Q8_0 llama-8b:Q4_0"}
REPS=${REPS:-5}
SMELT=${SMELT:-.device/smelt}
mkdir -p "$OUT" "$MODELS"
log=$OUT/bench-gpu.log
: >"$log"
say() { echo "== $*" | tee -a "$log" >&2; }

[ -x "$SMELT" ] || { echo "error: no release binary at $SMELT" >&2; exit 1; }

say "Vulkan loader"
# The NVIDIA ICD needs libglvnd's libraries besides the loader; the .debs are
# unpacked over / (they hold only shared libraries).
if ! ldconfig -p | grep -q 'libvulkan.so.1' || ! ldconfig -p | grep -q 'libGLdispatch.so.0'; then
    ls .gl/*.deb >/dev/null 2>&1 || { echo "error: no libvulkan.so.1 and no .gl/*.deb (run scripts/pack-gpu-bench.sh)" >&2; exit 1; }
    for deb in .gl/*.deb; do dpkg -x "$deb" /; done
    ldconfig
fi
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
if [ -z "${__EGL_VENDOR_LIBRARY_FILENAMES:-}" ] && [ -f /usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json ]; then
    export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi

say "devices"
"$SMELT" devices 2>&1 | tee -a "$log"
"$SMELT" devices --json >"$OUT/devices.json"

say "python gguf"
py=${PYTHON:-python3}
if ! "$py" -c 'import gguf, numpy' 2>/dev/null; then
    # --no-deps: numpy is usually there; its wheel (if brought) installs too.
    "$py" -m pip install -q --no-deps --no-index --target .device/py .whl/*.whl >>"$log" 2>&1
    export PYTHONPATH=$PWD/.device/py${PYTHONPATH:+:$PYTHONPATH}
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
    say "bench $model"
    # Warm-up, repeats and the median/spread are smelt bench's (-r).
    "$SMELT" bench -m "$model" --backend gpu -p 512 -n 128 -r "$REPS" -o json --verbose \
        >"$OUT/$shape-$qt.json" 2>>"$log"
done

say "table"
BW=${BW:-} "$py" - "$OUT" $CASES <<'PY' | tee -a "$log"
import json, os, sys
out, cases = sys.argv[1], sys.argv[2:]
from gguf import GGUFReader
devs = json.load(open(os.path.join(out, "devices.json")))
name = next((d["name"] for d in devs if not d["software"]), devs[0]["name"] if devs else "?")
bw = float(os.environ["BW"]) if os.environ.get("BW") else (4.3e12 if "H200" in name else 3.0e12)
print(f"device: {name}; roofline bandwidth {bw/1e12:.2f} TB/s (BW=...)")
print(f"| model | test | t/s | ± | subm/token | disp/token | roofline |")
print(f"|---|---|---:|---:|---:|---:|---:|")
for case in cases:
    shape, qt = case.split(":")
    model = os.path.join(os.environ.get("MODELS", ".device/models"), f"{shape}-{qt.lower()}.gguf")
    # Bytes one decoded token reads: every weight but the embedding table
    # (get_rows reads one row of it).
    r = GGUFReader(model)
    wbytes = sum(int(t.n_bytes) for t in r.tensors if t.name != "token_embd.weight")
    for row in json.load(open(os.path.join(out, f"{shape}-{qt}.json"))):
        test = row["test"]
        ts = row["avg_ts"]
        roof = ""
        if test.startswith("tg"):
            roof = f"{ts * wbytes / bw:.1%}"
        print(f"| {shape} {qt} | {test} | {ts:.1f} | {row.get('stddev_ts', 0):.1f} | "
              f"{row.get('submissions_per_token', '?')} | {row.get('dispatches_per_token', '?')} | {roof} |")
PY
