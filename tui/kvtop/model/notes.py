"""Notes with a kind: several of one kind collapse into one line, advisories can be dismissed.

`Snapshot.notes` keeps the plain sentences (JSON `notes`); `Snapshot.note_items` carries the
same notes as `Note`s, so the overview can collapse ("GPU 0–7: lost") and hide what the
operator dismissed (an advisory such as the rank-by-order mapping).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# Kinds of the model's notes; a sentence added by the session without a kind is OTHER.
LOG_VS_NVML = "log-vs-nvml"  # the log itemises more than NVML sees in use
UNPLACED = "unplaced"  # ranks of the log without a GPU here
RANK_ORDER = "rank-order"  # ranks mapped to GPUs by order (advisory)
SHAPE = "shape"  # rank tags that do not fit the deployment's shape (tui/kvtop/model/deployment_shape.py)
NOT_UNDERSTOOD = "not-understood"  # lines in SGLang's shape kvtop read nothing from
UNDATED = "undated"  # times logged without a date, and how they were dated (advisory)
OTHER = "other"


@dataclass(frozen=True, slots=True)
class Note:
    """One note. `gpus`: the GPUs it is about; `gist`: what notes of its kind share, said once
    after "GPU 0–7: " when several collapse; `advisory`: permanent advice the operator may
    dismiss (then it is only in the help view)."""

    kind: str
    text: str
    gpus: tuple[int, ...] = ()
    gist: str = ""
    advisory: bool = False


def gpu_span(indices: Iterable[int]) -> str:
    """ "0–7" for a run, "0, 3, 5–7" otherwise (sorted, no duplicates)."""
    numbers = sorted(set(indices))
    parts: list[str] = []
    start = prev = None
    for n in [*numbers, None]:
        if n is not None and prev is not None and n == prev + 1:
            prev = n
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}–{prev}")
        start = prev = n
    return ", ".join(parts)


def collapse(notes: Sequence[Note]) -> tuple[Note, ...]:
    """Notes of one kind about several GPUs become one ("GPU 0, 3: <gist>"), in first-seen
    order; notes without GPUs or a gist stay as they are (the same sentence only once)."""
    groups: dict[str, list[Note]] = {}
    order: list[tuple[str, Note | None]] = []
    seen: set[str] = set()
    for note in notes:
        if note.gpus and note.gist:
            if note.kind not in groups:
                groups[note.kind] = []
                order.append((note.kind, None))
            groups[note.kind].append(note)
        elif note.text not in seen:
            seen.add(note.text)
            order.append((note.kind, note))
    out: list[Note] = []
    for kind, single in order:
        if single is not None:
            out.append(single)
            continue
        group = groups[kind]
        if len(group) == 1:
            out.append(group[0])
            continue
        gpus = tuple(sorted({g for n in group for g in n.gpus}))
        first = group[0]
        text = f"GPU {gpu_span(gpus)}: {first.gist}"
        out.append(Note(kind, text, gpus, first.gist, first.advisory))
    return tuple(out)


def shown_notes(notes: Sequence[Note], dismissed: Iterable[str]) -> tuple[Note, ...]:
    """The notes for the overview: advisories of a dismissed kind are left out (the help view
    still lists them)."""
    gone = set(dismissed)
    return tuple(n for n in notes if not (n.advisory and n.kind in gone))
