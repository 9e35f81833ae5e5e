#!/usr/bin/env python3
"""Write a small GGUF file with gguf-py's GGUFWriter: every metadata value
type, nested arrays and a few tensor types.

A file from an independent writer, for smelt's reader tests
(crates/smelt/tests/gguf_python.rs) and as fuzzing seeds (fuzz/seeds).

usage: gguf_write_sample.py OUT [--alignment N] [--no-tensors]
"""
import sys

try:
    import numpy as np
    from gguf import GGUFWriter, GGUFValueType as V, GGMLQuantizationType as Q
    from gguf.quants import quantize
except ImportError as e:
    sys.exit(f"gguf_write_sample.py needs the gguf and numpy Python packages "
             f"(pip install -r scripts/requirements-test.txt): {e}")


def main():
    args = sys.argv[1:]
    out = args[0]
    alignment = int(args[args.index("--alignment") + 1]) if "--alignment" in args else None
    with_tensors = "--no-tensors" not in args

    w = GGUFWriter(out, "llama")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    w.add_name("gguf-py sample")
    w.add_block_count(2)
    scalars = [
        ("s.u8", 200, V.UINT8), ("s.i8", -100, V.INT8),
        ("s.u16", 60000, V.UINT16), ("s.i16", -30000, V.INT16),
        ("s.u32", 4000000000, V.UINT32), ("s.i32", -2000000000, V.INT32),
        ("s.f32", 0.1, V.FLOAT32), ("s.bool", True, V.BOOL),
        ("s.string", "tab\there, ünïcode ✓", V.STRING),
        ("s.u64", 2**63 + 5, V.UINT64), ("s.i64", -(2**62), V.INT64),
        ("s.f64", -2.5e-300, V.FLOAT64),
    ]
    for key, value, vtype in scalars:
        w.add_key_value(key, value, vtype)
    for key, value, vtype in scalars:
        if vtype != V.STRING:
            w.add_key_value("a" + key[1:], [value, value], V.ARRAY, sub_type=vtype)
    w.add_array("a.strings", ["<s>", "</s>", "▁hello", ""])
    w.add_array("a.nested", [[1, 2, 3], [4], ["x", "y"], [[True], [False, True]]])

    if with_tensors:
        rng = np.random.default_rng(7)
        w.add_tensor("f32", rng.standard_normal((3, 5), dtype=np.float32))
        w.add_tensor("f16", rng.standard_normal(7).astype(np.float16))
        w.add_tensor("i32", np.arange(6, dtype=np.int32).reshape(2, 3))
        for qtype, cols in [(Q.Q8_0, 64), (Q.Q4_0, 32), (Q.Q5_1, 32), (Q.BF16, 4)]:
            data = rng.standard_normal((2, cols), dtype=np.float32)
            w.add_tensor(qtype.name.lower(), quantize(data, qtype), raw_dtype=qtype)
        # gguf-py cannot quantize to K-quants; raw blocks are given as bytes.
        raw = rng.integers(0, 256, size=(2, 210), dtype=np.uint8)
        w.add_tensor("q6_k", raw, raw_dtype=Q.Q6_K)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
