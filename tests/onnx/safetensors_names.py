"""The tensor names of a safetensors file (its JSON header), without a
safetensors package."""
import json
import struct


def names(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return {k for k in header if k != "__metadata__"}
