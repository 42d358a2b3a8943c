"""Each tensor's stored bytes from a downloaded checkpoint's safetensors headers.

A safetensors file starts with an 8-byte little-endian length and a JSON header naming every
tensor with its dtype, shape and `data_offsets`; the header is all that is read (kilobytes per
shard, whatever the shard's size). The shards are the index's (`weight_map`) or, without an
index, every `*.safetensors` in the directory. A shard missing or unreadable means the checkpoint
is not all there: None, and the plan keeps the config's estimate of the split.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

# The format caps the header at 100 MB; a larger length is not a safetensors file.
MAX_HEADER_BYTES = 100_000_000
MAX_SHARDS = 4096


def _header_bytes(path: Path) -> dict[str, int] | None:
    try:
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) != 8:
                return None
            (length,) = struct.unpack("<Q", head)
            if not 2 <= length <= MAX_HEADER_BYTES:
                return None
            raw = f.read(length)
    except OSError:
        return None
    if len(raw) != length:
        return None
    try:
        header = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(header, dict):
        return None
    sizes: dict[str, int] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
            or offsets[1] < offsets[0]
        ):
            return None
        sizes[name] = offsets[1] - offsets[0]
    return sizes


def tensor_bytes(directory: Path, weight_map: dict[str, object] | None) -> dict[str, int] | None:
    """Every tensor's stored bytes, or None when a shard is missing or unreadable."""
    if weight_map:
        names = sorted({v for v in weight_map.values() if isinstance(v, str)})
        shards = [directory / n for n in names if "/" not in n and n not in ("", ".", "..")]
        if len(shards) != len(names):
            return None
    else:
        shards = sorted(directory.glob("*.safetensors"))
    if not shards or len(shards) > MAX_SHARDS:
        return None
    sizes: dict[str, int] = {}
    for shard in shards:
        if not shard.is_file():
            return None
        found = _header_bytes(shard)
        if found is None:
            return None
        sizes.update(found)
    return sizes or None
