"""The formula modal's questions: SGLang's sizing replayed at values the operator picks."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from tui.model import formula
from tui.model.sizing import SAFE_HEADROOM_GIB, SizingInputs

MFS_STEP = 0.01
MFS_LOWEST, MFS_HIGHEST = 0.01, 0.99  # SGLang accepts (0, 1); both ends are never useful
MAX_TOKENS_ASKED = 10**12  # beyond any GPU pool; keeps the arithmetic in range


@dataclass(frozen=True, slots=True)
class WhatIfView:
    """One mem_fraction_static replayed, with the verdict in words."""

    result: formula.WhatIf
    current: bool
    warning: str | None  # under the safe margin, or SGLang would not start


@dataclass(frozen=True, slots=True)
class Answer:
    """A reverse question answered: the mem_fraction_static needed, or why none is."""

    question: str
    mem_fraction_static: float | None
    sentence: str


def clamp_mfs(value: float) -> float:
    """Round to SGLang's useful range and to 3 decimals (what an operator would type)."""
    if not math.isfinite(value):
        raise ValueError(f"mem_fraction_static must be a number, got {value}")
    return round(min(MFS_HIGHEST, max(MFS_LOWEST, value)), 3)


def parse_mfs(text: str) -> float:
    """'0.9', '.92', '90%' -> a fraction; anything else raises ValueError with a sentence."""
    raw = text.strip().rstrip("%")
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(
            f"{text.strip()!r} is not a number: type a fraction such as 0.90"
        ) from None
    if text.strip().endswith("%") or value > 1:
        value /= 100
    if not (0 < value < 1):
        raise ValueError("mem_fraction_static must lie between 0 and 1 (SGLang's range)")
    return round(value, 3)


_COUNT = re.compile(r"^\s*([0-9][0-9_,]*(?:\.[0-9]+)?)\s*([kKmM]?)\s*$")


def parse_count(text: str, what: str = "tokens") -> int:
    """'32k', '262144', '1,000', '1.5M' -> a positive int (k = 1024 as in context lengths)."""
    match = _COUNT.match(text)
    if not match:
        raise ValueError(f"{text.strip()!r} is not a count of {what}: type e.g. 32768 or 32k")
    number = float(match.group(1).replace(",", "").replace("_", ""))
    scale = {"": 1, "k": 1024, "m": 1024 * 1024}[match.group(2).lower()]
    value = int(number * scale)
    if value < 1 or value > MAX_TOKENS_ASKED:
        raise ValueError(f"{what} must be between 1 and {MAX_TOKENS_ASKED:,}")
    return value


def what_if_at(inputs: SizingInputs, mfs: float) -> WhatIfView:
    """SGLang's pool at `mfs`, anchored on the logged token count (see formula.what_if)."""
    result = inputs.what_if(mfs)
    warning = None
    headroom = result.headroom_after_graphs_gib
    if not result.would_start:
        warning = (
            "SGLang would stop at startup with 'Not enough memory': the weights leave no room "
            "for a KV cache at this value."
        )
    elif headroom is not None and headroom < 0:
        warning = (
            f"the CUDA graphs and the draft would not fit ({headroom:.2f} GiB): "
            "startup would fail with out of memory."
        )
    elif headroom is not None and headroom < SAFE_HEADROOM_GIB:
        warning = (
            f"free after startup would be only {headroom:.2f} GiB, under the "
            f"{SAFE_HEADROOM_GIB:g} GiB safe margin: large prefills may run out of memory."
        )
    return WhatIfView(
        result, current=math.isclose(mfs, inputs.mem_fraction_static), warning=warning
    )


def _verdict(question: str, need: float, inputs: SizingInputs) -> Answer:
    if need > 1:
        return Answer(
            question,
            None,
            "no mem_fraction_static fits that on these GPUs: it needs more memory than the "
            "weights leave free. Add GPUs (more TP) or shorten the requests.",
        )
    view = what_if_at(inputs, need)
    sentence = f"mem_fraction_static {need:.3f} ({view.result.tokens:,} tokens)"
    if view.warning:
        sentence += f"; {view.warning}"
    return Answer(question, need, sentence)


def mfs_for_tokens(inputs: SizingInputs, tokens: int) -> Answer:
    question = f"{tokens:,} tokens in the KV cache"
    need = formula.mfs_for_tokens(
        tokens,
        inputs.pre_load_free_gib,
        inputs.post_load_free_gib,
        inputs.cell_size_bytes,
        inputs.page_size,
    )
    return _verdict(question, need, inputs)


def mfs_for_requests(inputs: SizingInputs, count: int, length: int) -> Answer:
    question = f"{count:,} concurrent requests of {length:,} tokens"
    need = inputs.mfs_for_requests(count, length)
    return _verdict(question, need, inputs)
