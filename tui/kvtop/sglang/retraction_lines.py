"""SGLang's retraction lines: the scheduler took running requests back to the queue because the
KV pool could not hold the next decode step.

Texts, by version (scheduler.py):
- 0.4.6 and before (INFO): `Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio:
  0.1474 -> 0.1845`. Despite its words, no memory ran out: the logical pool was full, and the
  requests run again later (never a failure: log_line.py keeps it out of the failure texts).
- 0.4.7 … 0.5.x (WARNING): `KV cache pool is full. Retract requests. #retracted_reqs: 1,
  #new_tokens_gained: 646, #new_token_ratio: 0.0980 -> 0.3487`; some builds log no
  `#new_tokens_gained`, 0.5.14+ adds `#mamba_num_gained: K` for hybrid models.

Every field is read by its name, so a field added or left out gives what the line says and
nothing else; a number that cannot be a real reading is named in the event's `rejected`.
"""

from __future__ import annotations

import math
import re

from kvtop.sglang import events as ev
from kvtop.sglang.bounds import MAX_COUNT, refusal

_FIELD_RE = re.compile(r"#(retracted_reqs|new_tokens_gained|mamba_num_gained): ([-+]?\d+)\b")
_RATIO_RE = re.compile(r"#new_token_ratio: (\S+) -> (\S+?),?(?:\s|$)")


def _ratio(text: str, rejected: list[str]) -> float | None:
    """SGLang's new_token_ratio: a share of max_new_tokens it reserves, 0..1."""
    try:
        value = float(text)
    except ValueError:
        rejected.append(f"#new_token_ratio {text[:40]} (not a number)")
        return None
    if not math.isfinite(value) or value < 0 or value > 1:
        rejected.append(f"#new_token_ratio {text[:40]} (not a ratio from 0 to 1)")
        return None
    return value


def retraction(prefix: ev.LinePrefix, msg: str) -> ev.Event | None:
    counts: dict[str, int | None] = {}
    rejected: list[str] = []
    for match in _FIELD_RE.finditer(msg):
        name, value = match.group(1), int(match.group(2))
        # What a retraction gained is a difference SGLang computes: kept with its sign.
        why = refusal(value, MAX_COUNT, signed=name != "retracted_reqs", negative="negative count")
        if why is not None:
            rejected.append(f"#{name}: {match.group(2)[:40]} ({why})")
            counts[name] = None
        else:
            counts.setdefault(name, value)
    if "retracted_reqs" not in counts:
        return None  # not the line it starts like
    before = after = None
    ratio = _RATIO_RE.search(msg)
    if ratio is not None:
        before, after = _ratio(ratio.group(1), rejected), _ratio(ratio.group(2), rejected)
    return ev.Retraction(
        prefix,
        msg,
        retracted_reqs=counts["retracted_reqs"],
        new_tokens_gained=counts.get("new_tokens_gained"),
        mamba_num_gained=counts.get("mamba_num_gained"),
        ratio_before=before,
        ratio_after=after,
        rejected=tuple(rejected),
    )
