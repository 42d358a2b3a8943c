"""The rank an SGLang scheduler names in its process title (setproctitle): "sglang::scheduler_TP3"
is TP3, "sglang::scheduler_DP1_TP1_EP1" is "DP1 TP1 EP1". Its own module, with nothing else
imported: the live view's first frame names the ranks before the rest of kvtop is imported."""

from __future__ import annotations

import re

_SCHEDULER = re.compile(r"sglang::scheduler((?:_[A-Za-z]+\d+)+)")


def rank_from_title(title: str) -> str | None:
    """ "sglang::scheduler_DP1_TP1_EP1" -> "DP1 TP1 EP1"; None for any other title."""
    match = _SCHEDULER.search(title)
    if match is None:
        return None
    return " ".join(part for part in match.group(1).split("_") if part)
