"""What every parser result must be, whatever it was given: one harness for the fuzz and
hostile-input tests of `parse_line`, /metrics and /server_info, so each property is checked
the same way wherever a parser is fed text from outside.

Properties: a log line gives an event or None, never anything else; every number is finite
(or None) and in range; no raw control character survives in any text field; every refusal
is a non-empty, visible sentence that names its value in parentheses.
"""

from __future__ import annotations

import dataclasses
import math
import re

from kvtop.sglang import events as ev
from kvtop.sglang.server_args import ServerArgs

RAW_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def check_text(value: str) -> None:
    assert RAW_CONTROL.search(value) is None, value


def check_event(event: object) -> None:
    """`parse_line`'s result: None, or an event whose fields a report can show as they are."""
    assert event is None or isinstance(event, ev.Event)
    if event is None:
        return
    assert isinstance(event.message, str)
    assert isinstance(event.prefix, ev.LinePrefix)
    for item in dataclasses.fields(event):
        value = getattr(event, item.name)
        if isinstance(value, float):
            assert math.isfinite(value), (item.name, value)
        elif isinstance(value, int) and not isinstance(value, bool):
            assert abs(value) <= 10**15, (item.name, value)
        elif isinstance(value, str):
            check_text(value)
        elif isinstance(value, ServerArgs):
            check_server_args(value)
    for refusal in event.rejected:
        assert refusal.endswith(")") and "(" in refusal
        check_text(refusal)


def check_server_args(args: ServerArgs) -> None:
    for name, value in args.to_json().items():
        if isinstance(value, float):
            assert math.isfinite(value), (name, value)
    if args.mem_fraction_static is not None:
        assert 0 < args.mem_fraction_static <= 1
    for reason in args.rejected.values():
        check_text(reason)
