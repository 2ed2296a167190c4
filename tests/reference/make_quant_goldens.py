#!/usr/bin/env python3
"""Golden blocks for dequantisation: random blocks of every supported ggml type and the
gguf package's own dequantize() of them, so tests/test_quant.cpp can demand bit equality.

Writes tests/data/quant/<TYPE>.in.bin (raw block bytes), <TYPE>.out.bin (float32
little-endian, gguf.quants.dequantize) and manifest.json (format_version 1).
Scales (f16 fields) are random finite values, including subnormals; everything else is
random bytes. Float types (F32/F16/BF16) hold random finite bit patterns.
"""
import json
import os
from importlib import metadata

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

FORMAT_VERSION = 1
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "quant")
rng = np.random.default_rng(20240607)

# type -> (number of blocks, byte offsets of the f16 scale fields inside a block)
TYPES = {
    T.F32: (512, []),
    T.F16: (512, []),
    T.BF16: (512, []),
    T.Q8_0: (64, [0]),
    T.Q4_0: (64, [0]),
    T.Q4_1: (64, [0, 2]),
    T.Q4_K: (16, [0, 2]),
    T.Q6_K: (16, [208]),
    # Appended after the first eight, so their random draws (and goldens) stay as they were.
    T.Q5_0: (64, [0]),
    T.Q5_1: (64, [0, 2]),
    T.Q2_K: (16, [80, 82]),
    T.Q3_K: (16, [108]),
    T.Q5_K: (16, [0, 2]),
}


def random_finite_f16(n):
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint16)
    # Exponent 31 is inf/NaN; redraw those as exponent 0..30.
    bad = (bits & 0x7C00) == 0x7C00
    bits[bad] &= np.uint16(0x83FF) | np.uint16((rng.integers(0, 31) << 10))
    assert np.isfinite(bits.view(np.float16)).all()
    return bits


def random_block_bytes(qtype, n_blocks, scale_offsets):
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    data = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    if qtype == T.F32:
        vals = data.view(np.uint32)
        bad = (vals & 0x7F800000) == 0x7F800000
        vals[bad] &= np.uint32(0xBFFFFFFF)  # exponent 255 -> 127: finite
        assert np.isfinite(vals.view(np.float32)).all()
    elif qtype == T.F16:
        data = random_finite_f16(n_blocks).view(np.uint8).reshape(n_blocks, 2)
    elif qtype == T.BF16:
        vals = data.view(np.uint16)
        bad = (vals & 0x7F80) == 0x7F80
        vals[bad] &= np.uint16(0xBFFF)
    for off in scale_offsets:
        data[:, off:off + 2] = random_finite_f16(n_blocks).view(np.uint8).reshape(n_blocks, 2)
    return data


def main():
    os.makedirs(OUT, exist_ok=True)
    entries = []
    for qtype, (n_blocks, scale_offsets) in TYPES.items():
        block_elems, _ = GGML_QUANT_SIZES[qtype]
        data = random_block_bytes(qtype, n_blocks, scale_offsets)
        # One row of n_blocks blocks, as a GGUF tensor row would be.
        row = data.reshape(1, -1)
        values = np.asarray(dequantize(row, qtype), dtype=np.float32).reshape(-1)
        assert values.size == n_blocks * block_elems
        assert np.isfinite(values).all(), qtype.name
        name = qtype.name
        row.tofile(os.path.join(OUT, f"{name}.in.bin"))
        values.astype("<f4").tofile(os.path.join(OUT, f"{name}.out.bin"))
        entries.append({"type": name, "ggml_type": int(qtype), "elements": int(values.size),
                        "input": f"{name}.in.bin", "input_bytes": int(row.size),
                        "output": f"{name}.out.bin"})
    manifest = {"format_version": FORMAT_VERSION,
                "generator": "tests/reference/make_quant_goldens.py",
                "reference": f"gguf {metadata.version('gguf')} gguf.quants.dequantize",
                "numpy_version": np.__version__, "types": entries}
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
