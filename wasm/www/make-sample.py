#!/usr/bin/env python3
"""Cuts the demo's sample out of a real checkpoint: a few tensors of the dev_ft bf16 series,
written as a safetensors file of a few hundred KB (standard library only).

    python3 wasm/www/make-sample.py [SRC.safetensors] [DEST.safetensors]

Defaults: ../shared/data/series/dev_ft/bf16/step_000430.safetensors and
wasm/www/sample/dev_ft-bf16-step_000430-sample.safetensors.
"""
import json
import os
import struct
import sys

TENSORS = [
    "blocks.0.attn.out_proj.weight",
    "blocks.0.ln1.weight",
    "blocks.0.mlp.0.bias",
    "blocks.1.attn.in_proj_bias",
    "blocks.1.attn.out_proj.weight",
    "head.weight",
    "ln.weight",
    "pos.weight",
]

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    root, "..", "shared", "data", "series", "dev_ft", "bf16", "step_000430.safetensors")
dest = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
    here, "sample", "dev_ft-bf16-step_000430-sample.safetensors")

with open(src, "rb") as f:
    data = f.read()
(n,) = struct.unpack("<Q", data[:8])
header = json.loads(data[8:8 + n])
body = data[8 + n:]

out_header = {"__metadata__": {"source": "dev_ft/bf16/" + os.path.basename(src)}}
chunks = []
offset = 0
for name in TENSORS:
    info = header[name]
    begin, end = info["data_offsets"]
    chunks.append(body[begin:end])
    out_header[name] = {"dtype": info["dtype"], "shape": info["shape"],
                        "data_offsets": [offset, offset + end - begin]}
    offset += end - begin
h = json.dumps(out_header, separators=(",", ":")).encode()
h += b" " * (-len(h) % 8)
with open(dest, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(chunks))
print(f"{dest}: {len(TENSORS)} tensors, {8 + len(h) + offset} bytes")
