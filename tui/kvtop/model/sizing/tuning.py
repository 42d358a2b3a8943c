"""The formula modal's questions: SGLang's sizing replayed at values the operator picks."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from kvtop.model.sizing import formula
from kvtop.model.sizing.plan import NOT_ENOUGH_MEMORY, OOM_RISK, verdict_kind
from kvtop.model.sizing.replay import SizingExplanation, SizingInputs, Step

MFS_STEP = 0.01
MFS_LOWEST, MFS_HIGHEST = 0.01, 0.99  # SGLang accepts (0, 1); both ends are never useful
MAX_TOKENS_ASKED = 10**12  # beyond any GPU pool; keeps the arithmetic in range


@dataclass(frozen=True, slots=True)
class WhatIfView:
    """One mem_fraction_static replayed, with the verdict in words."""

    result: formula.WhatIf
    current: bool
    warning: str | None  # under the safe margin, or SGLang would not start
    starts: bool = True  # False: SGLang fails at startup at this value (warning says how)


@dataclass(frozen=True, slots=True)
class Answer:
    """A reverse question answered: the mem_fraction_static needed, or why none is."""

    question: str
    mem_fraction_static: float | None
    sentence: str
    # The answer's caveat, also inside the sentence: the value's (what_if_at's warning), or
    # why no value fits. The one-shot report shows it beside the same answer.
    warning: str | None = None


def clamp_mfs(value: float) -> float:
    """Round to SGLang's useful range and to 3 decimals (what an operator would type)."""
    if not math.isfinite(value):
        raise ValueError(f"mem_fraction_static must be a number, got {value}")
    return round(min(MFS_HIGHEST, max(MFS_LOWEST, value)), 3)


def mfs_text(value: float) -> str:
    """A mem_fraction_static as typed: at least two decimals, at most four (0.90, 0.7703)."""
    text = f"{value:.4f}".rstrip("0")
    return text if len(text.split(".")[-1]) >= 2 else f"{value:.2f}"


def parse_mfs(text: str) -> float:
    """The number typed, as SGLang's --mem-fraction-static would take it ('0.9', '.92'; '90%'
    is 0.90). Any number is returned, in range or not: what_if_at says what SGLang would do
    with it. Only text that is not a number raises ValueError, with a sentence."""
    raw = text.strip()
    percent = raw.endswith("%")
    try:
        value = float(raw.rstrip("%").strip())
    except ValueError:
        raise ValueError(f"{raw!r} is not a number: type a fraction such as 0.90") from None
    if not math.isfinite(value):
        raise ValueError(f"{raw!r} is not a number: type a fraction such as 0.90")
    return round(value / 100 if percent else value, 4)


_COUNT = re.compile(r"^\s*([0-9][0-9_,]*(?:\.[0-9]+)?)\s*([kKmM]?)\s*$")
COUNT_SCALE = {"": 1, "k": 1000, "m": 1000 * 1000}  # decimal, as SGLang's token counts


def parse_count(text: str, what: str = "tokens") -> int:
    """'300k' (300,000), '262144', '1,000', '1.5M' (1,500,000) -> a positive int. k and M are
    decimal: SGLang's --max-total-tokens, --context-length and its logs count plain tokens."""
    match = _COUNT.match(text)
    if not match:
        raise ValueError(f"{text.strip()!r} is not a count of {what}: type e.g. 32768 or 300k")
    number = float(match.group(1).replace(",", "").replace("_", ""))
    value = round(number * COUNT_SCALE[match.group(2).lower()])
    if value < 1 or value > MAX_TOKENS_ASKED:
        raise ValueError(f"{what} must be between 1 and {MAX_TOKENS_ASKED:,}")
    return value


def minimum_viable_mfs(inputs: SizingInputs) -> float:
    """SGLang's own minimum (≥0.5.14 prints it): under it the KV cache gets no memory."""
    return formula.min_viable_mfs(inputs.pre_load_free_gib, inputs.post_load_free_gib)


def startup_failure(inputs: SizingInputs, mfs: float) -> str | None:
    """What SGLang does at startup with `mfs` when it cannot start, in one sentence (the
    range that does start included); None when it would start."""
    lowest = minimum_viable_mfs(inputs)
    shown = mfs_text(mfs)
    if mfs >= 1:
        reserve = f"{inputs.pre_load_free_gib * (1 - mfs):.2f}".replace("-", "−")
        return (
            f"at {shown} SGLang fails at startup: its reserve pre-load free × (1 − "
            f"mem_fraction_static) would be {reserve} GiB, so the KV cache would claim all "
            f"the free memory or more (CUDA out of memory); values from {lowest:.4f} to under 1 "
            "can start" + (f" (did you mean {mfs_text(mfs / 100)}?)" if 10 <= mfs < 100 else "")
        )
    if mfs <= lowest or mfs <= 0:
        return (
            f"at {shown} SGLang fails at startup: the KV cache would be empty (the weights leave "
            f"it no memory); the minimum is {lowest:.4f}, use a value above it"
        )
    return None


def what_if_at(inputs: SizingInputs, mfs: float) -> WhatIfView:
    """SGLang's pool at `mfs`, anchored on the logged token count (see formula.what_if)."""
    result = inputs.what_if(mfs)
    headroom = result.headroom_after_graphs_gib
    warning = startup_failure(inputs, mfs)
    # The same verdict as `kvtop plan` gives (plan.verdict_kind).
    kind = verdict_kind(result.tokens, headroom, inputs.safe_margin_gib)
    if warning is None and kind == NOT_ENOUGH_MEMORY:
        warning = (
            f"at {mfs_text(mfs)} SGLang fails at startup: the KV cache would be empty (the "
            f"weights leave it no memory); the minimum is {minimum_viable_mfs(inputs):.4f}, use "
            "a value above it"
        )
    elif warning is None and kind == OOM_RISK and headroom is not None and headroom < 0:
        warning = (
            f"at {mfs_text(mfs)} SGLang fails at startup: the CUDA graphs and the draft would "
            f"not fit (free after startup {headroom:.2f} GiB; CUDA out of memory)."
        )
    elif warning is None and kind == OOM_RISK and headroom is not None:
        warning = (
            f"free after startup would be only {headroom:.2f} GiB, under the "
            f"{inputs.safe_margin_gib:g} GiB safe margin: large prefills may run out of memory."
        )
    return WhatIfView(
        result,
        current=math.isclose(mfs, inputs.mem_fraction_static),
        warning=warning,
        starts=startup_failure(inputs, mfs) is None and result.would_start,
    )


def _verdict(question: str, need: float, inputs: SizingInputs) -> Answer:
    if need >= 1:
        never = (
            "no mem_fraction_static fits that on these GPUs: it needs more memory than the "
            "weights leave free. Add GPUs (more TP) or shorten the requests."
        )
        return Answer(question, None, never, never)
    view = what_if_at(inputs, need)
    sentence = f"mem_fraction_static {need:.3f} ({view.result.tokens:,} tokens)"
    if view.warning:
        sentence += f"; {view.warning}"
    return Answer(question, need, sentence, view.warning)


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


def with_caveats(
    explanation: SizingExplanation | None, request_len: int | None
) -> SizingExplanation | None:
    """The explanation with the questions every view shows answered as the formula modal
    answers them, caveats included: each what-if's warning, and the mem_fraction_static 1, 4
    and 16 requests of the context length (and of `request_len`) need, with theirs. One
    function for the one-shot report and the live view, so both give the same advice."""
    if explanation is None or explanation.inputs is None:
        return explanation
    inputs = explanation.inputs
    steps = []
    for length in [n for n in (inputs.context_len, request_len) if n]:
        for count in (1, 4, 16):
            answer = mfs_for_requests(inputs, count, length)
            need = answer.mem_fraction_static
            verdict = f"{need:.3f}" if need is not None else "impossible on these GPUs"
            steps.append(
                Step(
                    f"{count} × {length:,}-token requests",
                    f"needs {count * length:,} tokens",
                    f"mem_fraction_static {verdict}",
                    answer.warning,
                )
            )
    warnings = tuple(
        what_if_at(inputs, w.mem_fraction_static).warning for w in explanation.what_ifs
    )
    return replace(explanation, reverse=tuple(steps), what_if_warnings=warnings)
