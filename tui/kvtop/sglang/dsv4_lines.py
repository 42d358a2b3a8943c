"""DeepSeek-V4's pool lines: its compressed-attention pools are sized by their own configurator,
which logs `DSV4 memory calculation: …` and `DSV4 pool sizes: …` instead of `KV Cache is
allocated` (0.5.14 … 0.5.23, on GPUs and Ascend NPUs alike).

The texts grow between versions (0.5.19 adds `c128_state_fixed=`, 0.5.23 `unified=` and four
more fixed parts); every field is read by its name, so a line of any of them, or one with a
field added later, gives what it says and nothing else. A number that cannot be a real reading
(negative, not finite, too large) is left out and named in the event's `rejected`, as
log_line.py does for the other lines.
"""

from __future__ import annotations

import re

from kvtop.sglang import events as ev
from kvtop.sglang.bounds import MAX_COUNT, MAX_GIB, refusal

# `name=value`, the value up to the next comma; a size carries SGLang's " GB" (GiB) after it.
_FIELD_RE = re.compile(r"\b([a-z][a-z0-9_]*)=([^,\s]+)( GB)?")
_BOOLS = {"True": True, "False": False}


def _fields(message: str) -> dict[str, tuple[str, bool]]:
    """Each `name=value` of the message after its colon: value text, and whether it was in GB."""
    _, _, rest = message.partition(":")
    return {m.group(1): (m.group(2), m.group(3) is not None) for m in _FIELD_RE.finditer(rest)}


class _Reader:
    """Reads numbers out of one line's fields and keeps the refused ones, described."""

    def __init__(self, message: str) -> None:
        self.fields = _fields(message)
        self.rejected: list[str] = []

    def _number(self, name: str, limit: float, whole: bool) -> float | None:
        found = self.fields.get(name)
        if found is None:
            return None
        text = found[0]
        try:
            value: float = int(text) if whole else float(text)
        except ValueError:
            return None
        why = refusal(value, limit, negative="negative memory" if found[1] else "negative count")
        if why is not None:
            self.rejected.append(f"{name}={text[:40]} ({why})")
            return None
        return value

    def count(self, name: str) -> int | None:
        value = self._number(name, MAX_COUNT, whole=True)
        return None if value is None else int(value)

    def gib(self, name: str) -> float | None:
        """A size SGLang printed as `… GB` (available_bytes / 2^30: GiB)."""
        found = self.fields.get(name)
        if found is None or not found[1]:
            return None
        return self._number(name, MAX_GIB, whole=False)

    def real(self, name: str) -> float | None:
        return self._number(name, MAX_COUNT, whole=False)


def dsv4_pool_sizes(prefix: ev.LinePrefix, msg: str) -> ev.Event | None:
    read = _Reader(msg)
    event = ev.Dsv4PoolSizes(
        prefix,
        msg,
        full_tokens=read.count("full"),
        swa_tokens=read.count("swa"),
        c4_tokens=read.count("c4"),
        c128_tokens=read.count("c128"),
        c4_state_rows=read.count("c4_state"),
        c128_state_rows=read.count("c128_state"),
        rejected=tuple(read.rejected),
    )
    if event.full_tokens is None and not read.rejected:
        return None  # not the line it starts like
    return event


def dsv4_memory_calculation(prefix: ev.LinePrefix, msg: str) -> ev.Event | None:
    read = _Reader(msg)
    # The parts set aside before the per-token share, in the line's order (0.5.19+).
    fixed = []
    for name in read.fields:
        if name.endswith("_fixed"):
            gib = read.gib(name)
            if gib is not None:
                fixed.append((name.removesuffix("_fixed"), gib))
    unified = read.fields.get("unified")
    event = ev.Dsv4MemoryCalculation(
        prefix,
        msg,
        bytes_per_full_token=read.real("bytes_per_full_token"),
        available_gib=read.gib("available_bytes"),
        full_tokens=read.count("full_token"),
        fixed_gib=tuple(fixed),
        unified=_BOOLS.get(unified[0]) if unified is not None else None,
        rejected=tuple(read.rejected),
    )
    if event.available_gib is None and event.full_tokens is None and not read.rejected:
        return None
    return event
