#!/usr/bin/env python3
"""Reference (de)quantization for smelt's tests, from the `gguf` package.

The Rust tests hand data to this script and compare what comes back with
smelt's own results; nothing here imports or trusts smelt's code.

    quant_ref.py ops OP TYPE IN OUT [OP TYPE IN OUT ...]
        OP is `dequant` (IN: raw blocks, OUT: little-endian f32) or
        `quant` (IN: f32, OUT: raw blocks). TYPE is a ggml type name.
    quant_ref.py stream MODEL.gguf
        Writes, for every tensor in file order, a line
        `name<TAB>type<TAB>n_values` and then its n_values f32 values
        (dequantized by gguf.quants), and finally a line `END`.
    quant_ref.py hashes MODEL.gguf
        Prints, as JSON, the file's sha256 and each tensor's type, shape and
        sha256 as gguf.GGUFReader reads them: the form of
        testdata/quantize/tiny-256.json's entries.
    quant_ref.py ftypes TYPE...
        Prints llama.cpp's general.file_type value for each type (or none).
    quant_ref.py check-requant SRC.gguf OUT.gguf TYPE [OUTPUT_TYPE]
        Checks a file written by `smelt quantize SRC OUT TYPE`: metadata,
        tensor types, and tensor bytes equal to gguf.quants.quantize of the
        source's dequantized values. Exit status 1 and a message on failure.

gguf-py (0.19) has no Q8_1 or Q8_K code, and its Q8_1 size (40 bytes) is that
of an old layout; the two functions below follow ggml's current block_q8_1
(f16 d, f16 s, 32 x i8: 36 bytes) and block_q8_K (f32 d, 256 x i8, 16 x i16)
and the rounding of quantize_row_q8_1_ref / quantize_row_q8_K_ref.
"""

import re
import sys

try:
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as T
except ImportError as e:  # pragma: no cover
    sys.exit(f"quant_ref.py needs the `gguf` and `numpy` Python packages "
             f"(pip install -r scripts/requirements-test.txt): {e}")

QK_K = 256
# Values per chunk handed to gguf.quants at once: big enough to amortise its
# per-call overhead, small enough to stream a 270M-parameter model.
CHUNK_VALUES = 1 << 20


# ---- Q8_1 and Q8_K, which gguf-py lacks ---------------------------------

def q8_1_dequant(raw):
    b = raw.reshape(-1, 36)
    d = b[:, 0:2].copy().view(np.float16).astype(np.float32)
    qs = b[:, 4:].view(np.int8).astype(np.float32)
    return (qs * d).reshape(-1)


def q8_1_quant(x):
    blocks = x.reshape(-1, 32).astype(np.float32)
    d = np.abs(blocks).max(axis=1, keepdims=True) / np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(d == 0, np.float32(0), np.float32(1) / d).astype(np.float32)
    # roundf: half away from zero, as gguf's Q8_0 quantizer does it.
    qs = gguf.quants.np_roundf(blocks * inv).astype(np.int8)
    s = qs.astype(np.int32).sum(axis=1, keepdims=True).astype(np.float32) * d
    return np.concatenate([d.astype(np.float16).view(np.uint8),
                           s.astype(np.float16).view(np.uint8),
                           qs.view(np.uint8)], axis=1).reshape(-1)


def q8_k_dequant(raw):
    b = raw.reshape(-1, 292)
    d = b[:, 0:4].copy().view(np.float32)
    qs = b[:, 4:260].view(np.int8).astype(np.float32)
    return (d * qs).reshape(-1)


def q8_k_quant(x):
    blocks = x.reshape(-1, QK_K).astype(np.float32)
    out = np.zeros((blocks.shape[0], 292), dtype=np.uint8)
    # The first value of largest magnitude, with its sign.
    imax = np.abs(blocks).argmax(axis=1)
    mx = blocks[np.arange(blocks.shape[0]), imax].reshape(-1, 1)
    nonzero = (mx != 0).reshape(-1)
    with np.errstate(divide="ignore"):
        iscale = np.where(mx != 0, np.float32(-127) / mx, np.float32(0)).astype(np.float32)
    # nearest_int rounds half to even, as np.rint does.
    q = np.minimum(np.rint(iscale * blocks), 127).astype(np.int8)
    bsums = q.astype(np.int16).reshape(-1, 16, 16).sum(axis=2, dtype=np.int16)
    with np.errstate(divide="ignore"):
        d = np.where(nonzero.reshape(-1, 1), np.float32(1) / iscale, np.float32(0)).astype(np.float32)
    out[:, 0:4] = d.view(np.uint8)
    out[:, 4:260] = q.view(np.uint8)
    out[:, 260:] = bsums.view(np.uint8)
    return out.reshape(-1)


LOCAL = {"Q8_1": (q8_1_dequant, q8_1_quant), "Q8_K": (q8_k_dequant, q8_k_quant)}


def dequant(raw, name):
    if name in LOCAL:
        return LOCAL[name][0](raw)
    return gguf.quants.dequantize(raw.reshape(1, -1), T[name]).reshape(-1)


def quant(x, name):
    if name in LOCAL:
        return LOCAL[name][1](x)
    if name == "F16":
        return x.astype(np.float16).view(np.uint8).reshape(-1)
    return gguf.quants.quantize(x.reshape(1, -1), T[name]).reshape(-1).view(np.uint8)


def block_sizes(name):
    if name == "Q8_1":
        return 32, 36
    return gguf.GGML_QUANT_SIZES[T[name]]


def chunks(raw, name):
    """Splits raw tensor bytes into whole-block chunks of about CHUNK_VALUES."""
    bs, ts = block_sizes(name)
    per = max(1, CHUNK_VALUES // bs) * ts
    for s in range(0, raw.size, per):
        yield raw[s:s + per]


# ---- a lean GGUF header walk ---------------------------------------------
# gguf.GGUFReader builds numpy views for every metadata element, which takes
# tens of seconds on a 262k-token vocabulary; the tests only need the tensor
# table (and raw metadata bytes to compare), so walk the header directly.

SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


class Gguf:
    def __init__(self, path):
        self.map = np.memmap(path, dtype=np.uint8, mode="r")
        self.buf = memoryview(self.map)
        self.pos = 0
        if bytes(self.buf[0:4]) != b"GGUF":
            sys.exit(f"{path}: not a GGUF file")
        self.pos = 4
        self.version = self.u32()
        n_tensors, n_kv = self.u64(), self.u64()
        self.kv = {}  # key -> (type id, raw value bytes), in file order
        for _ in range(n_kv):
            key = self.string()
            vtype = self.u32()
            start = self.pos
            self.skip_value(vtype)
            self.kv[key] = (vtype, bytes(self.buf[start:self.pos]))
        align = 32
        if "general.alignment" in self.kv:
            align = int.from_bytes(self.kv["general.alignment"][1], "little")
        infos = []
        for _ in range(n_tensors):
            name = self.string()
            dims = [self.u64() for _ in range(self.u32())]
            ttype, offset = self.u32(), self.u64()
            infos.append((name, dims, ttype, offset))
        data = (self.pos + align - 1) // align * align
        self.tensors = []
        for name, dims, ttype, offset in infos:
            tname = "Q8_1" if ttype == 9 else T(ttype).name
            bs, ts = block_sizes(tname)
            n = int(np.prod(dims))
            start = data + offset
            self.tensors.append((name, dims, tname, n, self.map[start:start + n // bs * ts]))

    def int(self, n):
        v = int.from_bytes(self.buf[self.pos:self.pos + n], "little")
        self.pos += n
        return v

    def u32(self):
        return self.int(4)

    def u64(self):
        return self.int(8)

    def string(self):
        n = self.u64()
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", "replace")
        self.pos += n
        return s

    def skip_value(self, vtype):
        if vtype == 8:
            n = self.u64()
            self.pos += n
        elif vtype == 9:
            etype, count = self.u32(), self.u64()
            if etype in SCALAR_SIZES:
                self.pos += count * SCALAR_SIZES[etype]
            else:
                for _ in range(count):
                    self.skip_value(etype)
        else:
            self.pos += SCALAR_SIZES[vtype]


# ---- commands -------------------------------------------------------------

def cmd_ops(args):
    if len(args) % 4 != 0:
        sys.exit("ops takes OP TYPE IN OUT groups")
    for i in range(0, len(args), 4):
        op, name, src, dst = args[i:i + 4]
        if op == "dequant":
            raw = np.fromfile(src, dtype=np.uint8)
            out = np.concatenate([dequant(c, name) for c in chunks(raw, name)])
            out.astype("<f4").tofile(dst)
        elif op == "quant":
            x = np.fromfile(src, dtype="<f4")
            quant(x, name).tofile(dst)
        else:
            sys.exit(f"unknown op {op!r}")


def cmd_stream(args):
    (path,) = args
    out = sys.stdout.buffer
    for name, _dims, tname, n, raw in Gguf(path).tensors:
        out.write(f"{name}\t{tname}\t{n}\n".encode())
        for c in chunks(raw, tname):
            out.write(dequant(c, tname).astype("<f4").tobytes())
    out.write(b"END\n")
    out.flush()


# Types that are copied as they are, never converted.
RAW_TYPES = ("I8", "I16", "I32", "I64", "F64")


def is_quantized_weight(dims, name):
    # What llama-quantize quantizes in the plain models these checks use:
    # weights of two or more dimensions (trailing 1s do not count), less
    # the norms. Everything else keeps its type.
    n_dims = max([i + 1 for i, d in enumerate(dims) if d > 1] or [1])
    return n_dims >= 2 and name.endswith("weight") and "_norm.weight" not in name


def llama_order(name):
    # llama.cpp's tensor order: by the layer of `blk.N.` (-1 outside the
    # layers), then by name.
    m = re.match(r"blk\.([+-]?\d+)", name)
    return (int(m.group(1)) if m else -1, name.encode())


def cmd_check_requant(args):
    src_path, out_path, tname = args[:3]
    out_tname = args[3] if len(args) > 3 else tname
    src, out = Gguf(src_path), Gguf(out_path)
    errors = []

    # Metadata: every key copied byte for byte and in order, less the split
    # keys and the two that quantize sets; those come last (as gguf's
    # set_val appends them) and hold llama.cpp's values, as u32.
    ftype = gguf.LlamaFileType["ALL_F32" if tname == "F32" else f"MOSTLY_{tname}"]
    reset = ("general.file_type", "general.quantization_version",
             "split.no", "split.count", "split.tensors.count")
    want = {k: v for k, v in src.kv.items() if k not in reset}
    want["general.quantization_version"] = (4, gguf.GGML_QUANT_VERSION.to_bytes(4, "little"))
    want["general.file_type"] = (4, int(ftype).to_bytes(4, "little"))
    if list(out.kv) != list(want):
        errors.append(f"metadata keys differ: {list(out.kv)} vs {list(want)}")
    for k, v in want.items():
        if k in out.kv and out.kv[k] != v:
            errors.append(f"metadata {k}: {out.kv[k][:2]!r}..., expected {v[:2]!r}...")

    # gguf-py's own reader must accept the file and see the same table.
    reader = gguf.GGUFReader(out_path)
    seen = [(t.name, [int(d) for d in t.shape], t.tensor_type.name) for t in reader.tensors]
    mine = [(name, [int(d) for d in dims], t) for name, dims, t, _n, _raw in out.tensors]
    if seen != mine:
        errors.append("gguf.GGUFReader sees a different tensor table")
    ft = reader.fields.get("general.file_type")
    if ft is None or ft.contents() != int(ftype):
        errors.append(f"gguf.GGUFReader reads general.file_type {ft and ft.contents()}, expected {int(ftype)}")

    names = sorted((t[0] for t in src.tensors), key=llama_order)
    if names != [t[0] for t in out.tensors]:
        errors.append("tensor names or order differ from llama.cpp's order")
    output_name = "output.weight" if "output.weight" in names else "token_embd.weight"
    out_by_name = {t[0]: t for t in out.tensors}
    total = {}
    for name, dims, stype, _n, sraw in src.tensors:
        if name not in out_by_name:
            continue
        _, odims, otype, _, oraw = out_by_name[name]
        if list(dims) != list(odims):
            errors.append(f"{name}: dims {odims}, expected {dims}")
            continue
        if is_quantized_weight(dims, name):
            want_t = out_tname if name == output_name else tname
        else:
            want_t = stype
        if otype != want_t:
            errors.append(f"{name}: type {otype}, expected {want_t}")
            continue
        if stype in RAW_TYPES:
            if not np.array_equal(sraw, oraw):
                errors.append(f"{name}: {stype} data was not copied as is")
            continue
        x = np.concatenate([dequant(c, stype) for c in chunks(sraw, stype)])
        if want_t == stype:
            expect = sraw
        else:
            expect = np.concatenate([quant(x[i:i + CHUNK_VALUES], want_t)
                                     for i in range(0, x.size, CHUNK_VALUES)])
        if expect.size != oraw.size or not np.array_equal(expect, oraw):
            bad = np.flatnonzero(expect != oraw) if expect.size == oraw.size else []
            errors.append(f"{name}: {want_t} bytes differ from gguf.quants.quantize "
                          f"({len(bad)} bytes, first at {bad[0] if len(bad) else '?'})")
        # Closeness of the requantized values to the source, per type.
        y = np.concatenate([dequant(c, want_t) for c in chunks(oraw, want_t)])
        err, ref = total.get(want_t, (0.0, 0.0))
        total[want_t] = (err + float(np.sum((y - x).astype(np.float64) ** 2)),
                         ref + float(np.sum(x.astype(np.float64) ** 2)))
    # Relative RMS error bounds: round-to-nearest with step s leaves s/sqrt(12)
    # RMS; on weight-like data (amax a few sigma) these hold with room.
    bounds = {"F32": 0.0, "F16": 1e-3, "BF16": 1e-2, "Q8_0": 0.01, "Q5_0": 0.06,
              "Q5_1": 0.06, "Q4_0": 0.15, "Q4_1": 0.15}
    for t, (err, ref) in total.items():
        rel = (err / ref) ** 0.5 if ref else 0.0
        print(f"{t}: relative RMS error vs source {rel:.5f}")
        if t in bounds and rel > bounds[t]:
            errors.append(f"{t}: relative RMS error {rel:.5f} above {bounds[t]}")
    if errors:
        print("\n".join(errors[:20]), file=sys.stderr)
        sys.exit(1)
    print(f"ok: {len(names)} tensors, {len(out.kv)} metadata keys")


def cmd_hashes(args):
    import hashlib
    import json
    (path,) = args
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    file_sha = digest.hexdigest()
    tensors = {}
    for t in gguf.GGUFReader(path).tensors:
        tensors[t.name] = {
            "type": t.tensor_type.name,
            "shape": [int(d) for d in t.shape],
            "sha256": hashlib.sha256(t.data.tobytes()).hexdigest(),
        }
    print(json.dumps({"file_sha256": file_sha, "tensors": tensors}))


def cmd_ftypes(args):
    """Prints `TYPE llama_ftype` per type name: the file type llama.cpp
    declares for a model of (mostly) that type, or `none`."""
    members = gguf.LlamaFileType.__members__
    for name in args:
        cands = ["ALL_F32"] if name == "F32" else [f"MOSTLY_{name}", f"MOSTLY_{name}_S", f"MOSTLY_{name}_MOE"]
        found = [int(members[c]) for c in cands if c in members]
        print(name, found[0] if found else "none")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cmd, args = sys.argv[1], sys.argv[2:]
    {"ops": cmd_ops, "stream": cmd_stream, "check-requant": cmd_check_requant,
     "hashes": cmd_hashes, "ftypes": cmd_ftypes}.get(
        cmd, lambda _: sys.exit(f"unknown command {cmd!r}\n{__doc__}"))(args)


if __name__ == "__main__":
    main()
