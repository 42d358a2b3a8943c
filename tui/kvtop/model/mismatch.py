"""A fact on which the log and a server source disagree: the plain type a Snapshot carries.

The comparison that finds them is the judgement's (tui/kvtop/model/status/identity.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Mismatch:
    """One fact about the server on which the log and a server source disagree.

    `source` is "metrics" or "server_info"; `log` and `server` are the two values as read
    (str, int or float; JSON `mismatches`).
    """

    field: str
    log: object
    server: object
    source: str
