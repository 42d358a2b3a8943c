"""SGLang's lines that lower max_running_requests while it sizes its pools.

`max_running_requests was reduced from the requested 128 to 50 (per dp worker) due to the
available KV cache capacity.` (0.5.14 … 0.5.23: the pool holds too few tokens for as many
requests as asked) and `max_running_requests is capped to 12 by the mamba state cache (…)`
(0.5.23: a hybrid model's state slots run out first). The summary line then logs the lowered
value; these lines say from what and why. A number that cannot be a real count is left out and
named in the event's `rejected`.
"""

from __future__ import annotations

import re

from kvtop.sglang import events as ev
from kvtop.sglang.bounds import MAX_COUNT, refusal

_REDUCED_RE = re.compile(
    r"^max_running_requests was reduced from (?:the )?requested ([-+]?\d+) to ([-+]?\d+)"
    r"(?:.*?\bdue to (?:the )?(.+?)\.?\s*$)?"
)
_CAPPED_RE = re.compile(r"^max_running_requests is capped to ([-+]?\d+) by (?:the )?([^(.]+)")


def _count(text: str, name: str, rejected: list[str]) -> int | None:
    value = int(text)
    why = refusal(value, MAX_COUNT, negative="negative count")
    if why is not None:
        rejected.append(f"{name} {text[:40]} ({why})")
        return None
    return value


def max_running_reduced(prefix: ev.LinePrefix, msg: str) -> ev.Event | None:
    match = _REDUCED_RE.match(msg)
    if match is None:
        return None
    rejected: list[str] = []
    requested = _count(match.group(1), "requested", rejected)
    value = _count(match.group(2), "to", rejected)
    reason = (match.group(3) or "").strip() or "available KV cache capacity"
    return ev.MaxRunningRequestsReduced(
        prefix, msg, requested=requested, value=value, reason=reason, rejected=tuple(rejected)
    )


def max_running_capped(prefix: ev.LinePrefix, msg: str) -> ev.Event | None:
    match = _CAPPED_RE.match(msg)
    if match is None:
        return None
    rejected: list[str] = []
    value = _count(match.group(1), "capped to", rejected)
    return ev.MaxRunningRequestsReduced(
        prefix, msg, value=value, reason=match.group(2).strip(), rejected=tuple(rejected)
    )
