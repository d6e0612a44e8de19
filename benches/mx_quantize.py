"""MX quantization of a safetensors model, for measuring how Strata stores sub-byte floats
(ADR 0021).

    python3 benches/mx_quantize.py MODEL.safetensors OUT_DIR

Quantizes every 2-D f32 weight whose last dimension is a multiple of 32 to MXFP4 (E2M1) and
MXFP6 (E3M2): blocks of 32 values along the last axis, one E8M0 scale per block (saved as the
tensor `<name>.scale`). Writes `fp4_step1`, `fp6_step1` and a second step of each
(`*_step2`: the same weights plus 1e-3 of their mean magnitude in Gaussian noise, quantized
again) as safetensors files in OUT_DIR. Needs NumPy.
"""

import json
import struct
import sys
from pathlib import Path

import numpy as np


def read_f32_matrices(path):
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header, data = json.loads(raw[8 : 8 + n]), raw[8 + n :]
    out = {}
    for name, v in header.items():
        if name == "__metadata__" or v["dtype"] != "F32" or len(v["shape"]) != 2:
            continue
        if v["shape"][1] % 32 == 0:
            out[name] = np.frombuffer(data[slice(*v["data_offsets"])], "<f4").reshape(v["shape"])
    return out


def grid(m_bits, e_bits, bias):
    """The non-negative values of a sign-magnitude float with subnormals and no specials."""
    vals = []
    for e in range(2**e_bits):
        for m in range(2**m_bits):
            frac = m / 2**m_bits
            vals.append(frac * 2.0 ** (1 - bias) if e == 0 else (1 + frac) * 2.0 ** (e - bias))
    return np.array(vals)


def quantize(a, m_bits, e_bits, bias):
    """(codes, E8M0 scales): each block of 32 scaled so its largest magnitude fits the grid."""
    g = grid(m_bits, e_bits, bias)
    blocks = a.reshape(-1, 32)
    amax = np.abs(blocks).max(1, keepdims=True) + 1e-30
    e = np.clip(np.ceil(np.log2(amax / g[-1])), -127, 127)
    x = np.abs(blocks) / 2.0**e
    idx = np.abs(x[..., None] - g[None, None, :]).argmin(-1)
    codes = idx | ((blocks < 0) << (m_bits + e_bits))
    scales = (e + 127).astype(np.uint8).reshape(a.shape[0], -1)
    return codes.astype(np.uint32).reshape(a.shape), scales


def pack4(c):
    """Two FP4 codes per byte, the first in the low nibble."""
    c = c.reshape(-1, 2)
    return (c[:, 0] | (c[:, 1] << 4)).astype(np.uint8).tobytes()


def pack6(c):
    """Four FP6 codes per 3 bytes: code i in bits 6i..6i+6 of the little-endian word."""
    c = c.reshape(-1, 4)
    w = c[:, 0] | c[:, 1] << 6 | c[:, 2] << 12 | c[:, 3] << 18
    return np.stack([w & 255, (w >> 8) & 255, (w >> 16) & 255], 1).astype(np.uint8).tobytes()


def write_safetensors(path, tensors):
    header, offset = {}, 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((-len(text)) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(t[3] for t in tensors))


FORMATS = {"fp4": (1, 2, 1, pack4, "F4"), "fp6": (2, 3, 3, pack6, "F6_E3M2")}


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    weights = read_f32_matrices(sys.argv[1])
    out = Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for step, noise in [(1, 0.0), (2, 1e-3)]:
        for fmt, (m_bits, e_bits, bias, pack, dtype) in FORMATS.items():
            tensors = []
            for name, a in weights.items():
                jitter = rng.standard_normal(a.shape).astype(np.float32) * np.abs(a).mean()
                codes, scales = quantize(a + noise * jitter, m_bits, e_bits, bias)
                tensors.append((name, dtype, a.shape, pack(codes)))
                tensors.append((name + ".scale", "F8_E8M0", scales.shape, scales.tobytes()))
            write_safetensors(out / f"{fmt}_step{step}.safetensors", tensors)


if __name__ == "__main__":
    main()
