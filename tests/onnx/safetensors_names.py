"""The tensor names of a safetensors file (its JSON header), without a
safetensors package."""
import json
import struct


def names(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return {k for k in header if k != "__metadata__"}


def subset(src, dst, keep):
    """Writes to dst the tensors of src whose names are in keep (the
    original program of a round trip has no var for an exported constant)."""
    with open(src, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    out_header, chunks, offset = {}, [], 0
    for name, info in header.items():
        if name == "__metadata__" or name not in keep:
            continue
        begin, end = info["data_offsets"]
        chunks.append(data[begin:end])
        out_header[name] = {**info, "data_offsets": [offset, offset + end - begin]}
        offset += end - begin
    raw = json.dumps(out_header).encode()
    raw += b" " * (-len(raw) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + b"".join(chunks))
