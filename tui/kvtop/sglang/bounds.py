"""Where a logged or scraped number must lie to be a real reading: one rule for log and metrics."""

from __future__ import annotations

import math

# Beyond these no real server reports a value: a larger one is a corrupt line, not a measurement.
MAX_GIB = 1e6  # a GPU (or host) with a million GiB
MAX_COUNT = 10**15  # tokens, requests, pages; also the bound of any other number (rates, seconds)


def refusal(
    value: float, limit: float, *, signed: bool = False, negative: str = "negative"
) -> str | None:
    """Why `value` cannot be a real reading (None when it can): not finite, negative, too large.

    Sizes, counts, rates and durations are never negative; `signed` is for a change (memory a
    step freed), and `negative` lets a caller name what was negative.
    """
    # An int from a log line may be too large for a float: only floats can be nan or inf.
    if isinstance(value, float) and not math.isfinite(value):
        return "not a finite number"
    if value < 0 and not signed:
        return negative
    if abs(value) > limit:
        return "out of range"
    return None
