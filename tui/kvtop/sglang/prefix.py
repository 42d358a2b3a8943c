"""Find and decode SGLang's `[YYYY-MM-DD HH:MM:SS(.mmm) TAGS]` log prefix anywhere in a line."""

from __future__ import annotations

import re
from datetime import datetime

from kvtop.sglang.events import NO_PREFIX, LinePrefix

# Rank tags appear in any order and combination across versions (DP PP TP EP in 0.5.8,
# DP PP ATTN_CP MOE_DP TP EP from 0.5.9), so they are matched as a free sequence.
_TAG = r"(?:ATTN_CP|MOE_DP|DP|PP|TP|EP)\d+"
# Words a wrapper or fork may put before the tags ("[2025-08-01 10:00:00 Prefill TP0]"): only
# when a rank tag follows, and never a tag itself, so "[... DP0 TP0]" keeps both tags.
_WORD = r"(?!" + _TAG + r"\b)[A-Za-z][\w-]{0,31}"
_TAG_AHEAD = r"(?= " + _TAG + r"[ \]])"
PREFIX_RE = re.compile(
    r"\[(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?P<ms>\.\d{1,6})?"
    r"(?P<words>(?: " + _WORD + r"){1,4}" + _TAG_AHEAD + r")?"
    r"(?P<tags>(?: " + _TAG + r")*)\] ?"
)
_TAG_RE = re.compile(r"(ATTN_CP|MOE_DP|DP|PP|TP|EP)(\d+)")
_FIELD = {"DP": "dp", "PP": "pp", "ATTN_CP": "attn_cp", "MOE_DP": "moe_dp", "TP": "tp", "EP": "ep"}

# A handful of distinct tag strings exist per server; decoding each once keeps the hot path cheap.
_tag_cache: dict[str, dict[str, int]] = {}


def decode_tags(tags: str) -> dict[str, int]:
    """`"DP1 TP1 EP1"` -> `{"dp": 1, "tp": 1, "ep": 1}`."""
    cached = _tag_cache.get(tags)
    if cached is None:
        cached = {_FIELD[name]: int(num) for name, num in _TAG_RE.findall(tags)}
        if len(_tag_cache) < 4096:
            _tag_cache[tags] = cached
    return cached


def parse_timestamp(time_text: str, ms: str | None) -> datetime | None:
    try:
        stamp = datetime.fromisoformat(time_text)
    except ValueError:
        return None
    if ms:
        stamp = stamp.replace(microsecond=int(ms[1:].ljust(6, "0")[:6]))
    return stamp


def split_prefix(line: str) -> tuple[LinePrefix, str]:
    """Return the prefix (NO_PREFIX if none) and the message after it.

    The prefix may not start the line: a tqdm bar written without a newline, or a journalctl
    `host python[pid]:` header, can precede it.
    """
    match = PREFIX_RE.search(line)
    if match is None:
        return NO_PREFIX, line
    # A prefix directly followed by another (a line re-logged through a second logger): the
    # inner one is the scheduler's.
    while (inner := PREFIX_RE.match(line, match.end())) is not None:
        match = inner
    key = match.group(0)
    prefix = _prefix_cache.get(key)
    if prefix is None:
        prefix = _decode(match)
        if len(_prefix_cache) >= 4096:  # consecutive lines share a second and a rank
            _prefix_cache.clear()
        _prefix_cache[key] = prefix
    return prefix, line[match.end() :]


_prefix_cache: dict[str, LinePrefix] = {}


def _decode(match: re.Match[str]) -> LinePrefix:
    tags = match.group("tags").strip()
    time_text = match.group("time")
    ms = match.group("ms")
    return LinePrefix(
        time_text=time_text + (ms or ""),
        timestamp=parse_timestamp(time_text, ms),
        rank=tags,
        **decode_tags(tags),
    )


# What a log shipper or a viewer puts before every line it passes on, the server's own lines
# and the bare traceback lines alike (each one alternative, anchored at the line's start):
# the journal's short and short-iso headers (`journalctl -u UNIT > log`: `Dec 01 10:00:00 host
# python3[1234]: `, `2026-12-01T10:00:00+0000 host sglang[1]: `), CRI's (`2026-01-05T10:00:00.1Z
# stdout F `), a shipper's epoch and ISO time between tabs (`1767607200.123\t2026-01-05T10:00:00Z\t`),
# Docker's and Loki's time (`docker logs -t`, `logcli`: the time, then `{labels}`), Compose's
# service column (`sglang-1  | `) and kubectl's `--prefix` (`[pod/name/container] `).
_ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?"
_SHIPPER_RE = re.compile(
    r"(?:(?P<journal>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d{1,6})? [^ ]{1,255} "
    r"(?P<ident>[^ :\[]{1,255}(?:\[\d{1,10}\])?): )"
    # short-iso: the identifier's [pid] is required, so `<time> ValueError: a: b` stays whole
    r"|(?P<journal_iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[^ ]{0,12} [^ ]{1,255} "
    r"(?P<ident_iso>[^ :\[]{1,255}\[\d{1,10}\]): )"
    r"|" + _ISO + r" (?:stdout|stderr) [FP] "
    r"|\d{9,11}(?:\.\d{1,9})?\t(?:[^\t]{1,64}\t)?"
    r"|" + _ISO + r" (?:\{[^{}]{0,4000}\} )?"
    r"|[\w.-]{1,128} {1,32}\| "
    r"|\[pod/[^\]\s]{1,253}\] )"
)


def strip_shipper(text: str) -> tuple[str, str | None]:
    """TEXT without a log shipper's or viewer's header (at most three, one inside another: a
    Compose column before Docker's time), and the journal identifier when the header was the
    journal's (`systemd[1]` for systemd's own lines about the unit), else None."""
    ident = None
    for _ in range(3):
        match = _SHIPPER_RE.match(text)
        if match is None or match.end() == 0:
            break
        if match.group("journal") or match.group("journal_iso"):
            ident = match.group("ident") or match.group("ident_iso")
        text = text[match.end() :]
    return text, ident
