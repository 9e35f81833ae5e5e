#!/usr/bin/env python3
"""Dump a GGUF file as gguf-py's GGUFReader sees it, as JSON on stdout.

The independent reference for smelt's GGUF reader and writer tests
(crates/smelt/tests/gguf_python.rs).

usage: gguf_dump.py [--data] [--gunzip-to PATH] FILE

  --data            include each tensor's bytes, hex-encoded (small files only)
  --gunzip-to PATH  FILE is gzip-compressed: unpack it to PATH first and dump
                    that (the test then opens PATH too)

Output:
  {"version", "alignment", "data_offset",
   "metadata": [{"key", "value": V}, ...]          in file order
   "tensors": [{"name", "type", "dims", "offset", "n_bytes", ["data"]}, ...]}
  V = {"type": "u32", "value": 7}
    | {"type": "array", "elem": "f32", "items": [...]}
  Floats are written as their bit patterns (u32 or u64) so that NaN, -0.0
  and every last bit compare exactly. Array items of type array are array Vs.
  "dims" are in file (ggml) order; "offset" is the absolute file offset.
"""
import gzip
import json
import shutil
import sys

try:
    import numpy as np
    from gguf import GGUFReader, GGUFValueType
except ImportError as e:
    sys.exit(f"gguf_dump.py needs the gguf and numpy Python packages "
             f"(pip install -r scripts/requirements-test.txt): {e}")

V = GGUFValueType
NAMES = {
    V.UINT8: "u8", V.INT8: "i8", V.UINT16: "u16", V.INT16: "i16",
    V.UINT32: "u32", V.INT32: "i32", V.FLOAT32: "f32", V.BOOL: "bool",
    V.STRING: "string", V.ARRAY: "array", V.UINT64: "u64", V.INT64: "i64",
    V.FLOAT64: "f64",
}


def scalars(vtype, arr):
    """A numpy array of one scalar type as JSON-ready Python values."""
    if vtype == V.FLOAT32:
        return arr.view(np.uint32).tolist()
    if vtype == V.FLOAT64:
        return arr.view(np.uint64).tolist()
    if vtype == V.BOOL:
        return [bool(b) for b in arr.view(np.uint8)]
    return arr.tolist()


def decode(parts, i, vtype):
    """Decodes one value of `vtype` from GGUFReader's flat list of parts,
    starting at parts[i]. Returns (value, index of the next part).

    GGUFReader lays a value out as: a scalar is one part; a string is its
    length and its bytes; an array is its element type, its count, then each
    element's parts in turn (nested arrays recursively)."""
    if vtype == V.STRING:
        return parts[i + 1].tobytes().decode("utf-8", errors="replace"), i + 2
    if vtype == V.ARRAY:
        etype = V(int(parts[i][0]))
        n = int(parts[i + 1][0])
        i += 2
        if etype in (V.STRING, V.ARRAY):
            items = []
            for _ in range(n):
                item, i = decode(parts, i, etype)
                items.append(item)
        else:
            arr = np.concatenate(parts[i:i + n]) if n else np.zeros(0, np.uint8)
            items = scalars(etype, arr) if n else []
            i += n
        return {"type": "array", "elem": NAMES[etype], "items": items}, i
    return scalars(vtype, parts[i])[0], i + 1


def dump(path, with_data):
    r = GGUFReader(path)
    metadata = []
    for key, field in r.fields.items():
        if key.startswith("GGUF."):
            continue  # the reader's pseudo-fields: version and counts
        vtype = V(int(field.parts[2][0]))  # parts: key length, key, type, value...
        value, end = decode(field.parts, 3, vtype)
        assert end == len(field.parts), f"{key}: {len(field.parts) - end} parts left over"
        if vtype != V.ARRAY:
            value = {"type": NAMES[vtype], "value": value}
        metadata.append({"key": key, "value": value})
    tensors = []
    for t in r.tensors:
        d = {
            "name": t.name,
            "type": int(t.tensor_type),
            "dims": [int(x) for x in t.shape],
            "offset": int(t.data_offset),
            "n_bytes": int(t.n_bytes),
        }
        if with_data:
            d["data"] = t.data.tobytes().hex()
        tensors.append(d)
    return {
        "version": int(r.fields["GGUF.version"].parts[0][0]),
        "alignment": int(r.alignment),
        "data_offset": int(r.data_offset),
        "metadata": metadata,
        "tensors": tensors,
    }


def main():
    args = sys.argv[1:]
    with_data = "--data" in args
    args = [a for a in args if a != "--data"]
    path = args[-1]
    if "--gunzip-to" in args:
        out = args[args.index("--gunzip-to") + 1]
        with gzip.open(path, "rb") as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst)
        path = out
    json.dump(dump(path, with_data), sys.stdout, ensure_ascii=True)


if __name__ == "__main__":
    main()
