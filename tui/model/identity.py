"""Is every source about the same server? What the log, /server_info and /metrics say it is."""

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


def _shown(value: object) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


def mismatch_text(mismatches: tuple[Mismatch, ...] | list[Mismatch]) -> tuple[str, ...]:
    """One sentence per server source that disagrees with the log, naming each difference:
    "metrics say glm-5.3-flash, 655,360 tokens; the log says Kimi-K2.5, 158,616"."""
    sentences = []
    for source in ("metrics", "server_info"):
        mine = [m for m in mismatches if m.source == source]
        if not mine:
            continue
        says = "metrics say" if source == "metrics" else "/server_info says"
        theirs = ", ".join(f"{m.field} {_shown(m.server)}" for m in mine)
        logged = ", ".join(f"{m.field} {_shown(m.log)}" for m in mine)
        sentences.append(
            f"{says} {theirs}; the log says {logged}: not the same server. Its numbers are not "
            "shown as this server's; check --url (or the log you gave)."
        )
    return tuple(sentences)
