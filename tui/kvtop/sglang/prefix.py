"""Find and decode SGLang's `[YYYY-MM-DD HH:MM:SS(.mmm) TAGS]` log prefix, however the line
reached the reader: at the line's start, its leading bracket lost, glued after a progress bar,
with a mode word before the rank tags, or with a time that has no date.

One grammar for every form: `[` TIME WORDS? TAGS `]`, where
- TIME is `YYYY-MM-DD HH:MM:SS`, the diffusion runtime's `MM-DD HH:MM:SS` or a bare `HH:MM:SS`
  (a custom log format, or a copy trimmed by its writer), with optional fractions of a second;
- WORDS are up to four words a wrapper or fork puts before the tags (`Prefill`,
  `DisaggregationMode.DECODE`), accepted only when a rank tag follows;
- TAGS are rank tags in any order (`DP1 PP1 TP1 EP1`, `ATTN_CP0 MOE_DP0`).

Where it may begin, and nowhere else (a bracketed time inside a message is the message's): at
the line's start; at the start without its `[` when the time carries a full date (the first
character lost in a paste); right after a tqdm bar's `[elapsed<left, rate]`, which a bar
written without a newline leaves in front of the next line; right after another prefix (a line
re-logged through a second logger: the inner one is the scheduler's).
"""

from __future__ import annotations

import re
from datetime import datetime

from kvtop.sglang.events import NO_PREFIX, LinePrefix

# Rank tags appear in any order and combination across versions (DP PP TP EP in 0.5.8,
# DP PP ATTN_CP MOE_DP TP EP from 0.5.9), so they are matched as a free sequence.
_TAG = r"(?:ATTN_CP|MOE_DP|DP|PP|TP|EP)\d+"
# Words a wrapper or fork may put before the tags ("[2025-08-01 10:00:00 Prefill TP0]", an
# enum's `DisaggregationMode.DECODE`): only when a rank tag follows, and never a tag itself,
# so "[... DP0 TP0]" keeps both tags.
_WORD = r"(?!" + _TAG + r"\b)[A-Za-z][\w-]{0,31}(?:\.[A-Za-z_][\w-]{0,31})?"
_TAG_AHEAD = r"(?= " + _TAG + r"[ \]])"
_DATED = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
_UNDATED = r"(?:\d\d-\d\d )?\d\d:\d\d:\d\d"
_BODY = (
    r"(?P<ms>[.,]\d{1,6})?"
    r"(?P<words>(?: " + _WORD + r"){1,4}" + _TAG_AHEAD + r")?"
    r"(?P<tags>(?: " + _TAG + r")*)\] ?"
)
PREFIX_RE = re.compile(r"\[(?P<time>" + _DATED + r"|" + _UNDATED + r")" + _BODY)
# The leading bracket lost: with a full date, or a bare time followed by a rank tag, so
# `12:00:00] ...` in a message stays text.
_BARE_RE = re.compile(r"(?P<time>" + _DATED + r")" + _BODY)
_BARE_TIME_RE = re.compile(r"(?P<time>" + _UNDATED + r")" + _BODY.replace(")*)\\]", ")+)\\]"))
# The end of a tqdm bar (`[00:02<00:02, 23.49it/s]`, `[00:00<?, ?it/s]`) with a `[` right after.
_BAR_END_RE = re.compile(r"\[(?:\d{1,4}:)?\d\d:\d\d<[^\[\]]{0,80}\](?=\[)")
_TAG_RE = re.compile(r"(ATTN_CP|MOE_DP|DP|PP|TP|EP)(\d+)")
_FIELD = {"DP": "dp", "PP": "pp", "ATTN_CP": "attn_cp", "MOE_DP": "moe_dp", "TP": "tp", "EP": "ep"}
# How far into a line a glued prefix is looked for: a bar is one terminal line wide or so.
_GLUE_SCAN_CHARS = 1024

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


def find_prefix(line: str) -> re.Match[str] | None:
    """SGLang's prefix where one may begin in LINE (the module's docstring says where), the
    innermost when prefixes follow each other; None when the line has none."""
    match = PREFIX_RE.match(line) or _BARE_RE.match(line) or _BARE_TIME_RE.match(line)
    if match is None:
        if line.find("][", 0, _GLUE_SCAN_CHARS) < 0:
            return None  # nothing glued: the common line without a prefix costs only this
        for bar in _BAR_END_RE.finditer(line, 0, _GLUE_SCAN_CHARS):
            match = PREFIX_RE.match(line, bar.end())
            if match is not None:
                break
        if match is None:
            return None
    while (inner := PREFIX_RE.match(line, match.end())) is not None:
        match = inner
    return match


def split_prefix(line: str) -> tuple[LinePrefix, str]:
    """Return the prefix (NO_PREFIX if none) and the message after it."""
    match = find_prefix(line)
    if match is None:
        return NO_PREFIX, line
    return prefix_of(match), line[match.end() :]


def prefix_of(match: re.Match[str]) -> LinePrefix:
    """The prefix a find_prefix match found, decoded once per distinct text."""
    key = match.group(0)
    prefix = _prefix_cache.get(key)
    if prefix is None:
        prefix = _decode(match)
        if len(_prefix_cache) >= 4096:  # consecutive lines share a second and a rank
            _prefix_cache.clear()
        _prefix_cache[key] = prefix
    return prefix


_prefix_cache: dict[str, LinePrefix] = {}


def _decode(match: re.Match[str]) -> LinePrefix:
    tags = match.group("tags").strip()
    time_text = match.group("time")
    ms = match.group("ms")
    if ms:
        ms = "." + ms[1:]  # Python logging's default `,123` is the same fraction
    undated = len(time_text) < 19
    return LinePrefix(
        time_text=time_text + (ms or ""),
        timestamp=None if undated else parse_timestamp(time_text, ms),
        rank=tags,
        undated=undated,
        **decode_tags(tags),
    )


# What a log shipper or a viewer puts before every line it passes on, the server's own lines
# and the bare traceback lines alike (each one alternative, anchored at the line's start):
# the journal's short and short-iso headers (`journalctl -u UNIT > log`: `Dec 01 10:00:00 host
# python3[1234]: `, `2026-12-01T10:00:00+0000 host sglang[1]: `), CRI's (`2026-01-05T10:00:00.1Z
# stdout F `), a shipper's epoch (seconds to Loki's nanoseconds) and ISO time between tabs
# (`1767607200.123\t2026-01-05T10:00:00Z\t`), Kibana's `May 16, 2026 @ 20:46:57.892`,
# Docker's and Loki's time (`docker logs -t`, `logcli`: the time, then `{labels}`), Docker
# Desktop's (`2025-02-04 21:21:33 ` before SGLang's own dated prefix), Compose's
# service column (`sglang-1  | `), Ray's actor column (`(WorkerDict pid=616) `) and kubectl's
# `--prefix` (`[pod/name/container] `).
_ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?"
_SHIPPER_RE = re.compile(
    r"(?:(?P<journal>[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d{1,6})? [^ ]{1,255} "
    r"(?P<ident>[^ :\[]{1,255}(?:\[\d{1,10}\])?): )"
    # short-iso: the identifier's [pid] is required, so `<time> ValueError: a: b` stays whole
    r"|(?P<journal_iso>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[^ ]{0,12} [^ ]{1,255} "
    r"(?P<ident_iso>[^ :\[]{1,255}\[\d{1,10}\]): )"
    # the header without its time (`host python3[123]: `): the [pid] is required here too
    r"|(?P<journal_bare>[^ \[\]]{1,255} (?P<ident_bare>[^ :\[]{1,255}\[\d{1,10}\]): )"
    r"|" + _ISO + r" (?:stdout|stderr) [FP] "
    # an epoch in seconds, milliseconds or Loki's nanoseconds
    r"|\d{9,19}(?:\.\d{1,9})?\t(?:[^\t]{1,64}\t)?"
    # Kibana's Discover table copied: `May 16, 2026 @ 20:46:57.892`, one tab or space (more
    # would be a traceback frame's indent), or the time alone on its line
    r"|[A-Z][a-z]{2} \d{1,2}, \d{4} @ \d\d:\d\d:\d\d(?:\.\d{1,6})?(?:\t| |$)"
    r"|" + _ISO + r" (?:\{[^{}]{0,4000}\} )?"
    # Docker Desktop's log view copied: its own time with a space, before SGLang's `[` prefix
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d{1,9})? (?=\[\d{4}-\d\d-\d\d )"
    r"|[\w.-]{1,128} {1,32}\| "
    # Ray's actor or task column, nested when one actor runs another (`(WorkerDict pid=616, ip=…) `)
    r"|\((?:[\w.:-]{1,128} )?pid=\d{1,10}(?:, ip=[0-9A-Fa-f.:]{1,64})?\) ?"
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
        if match.group("journal") or match.group("journal_iso") or match.group("journal_bare"):
            ident = match.group("ident") or match.group("ident_iso") or match.group("ident_bare")
        text = text[match.end() :]
    return text, ident
