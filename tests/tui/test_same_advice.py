"""The one-shot report carries every caveat the live view gives for the same numbers: each
warning `kvtop --once` prints for a what-if or a "needed for" answer is, word for word, what the
formula modal answers when the operator asks the same question there. Both come from one model
function (tui/kvtop/model/sizing/tuning.py); this test holds the two views to it. `--once` runs as the
installed program on the story's log; the live view is the real app on the same log's snapshot."""

from __future__ import annotations

import re

import pytest
from textual.widgets import Input

from kvtop.live.screens.formula import FormulaScreen
from tests.support.offline import offline
from tests.support.paths import STORY_LOG
from tests.support.tui_support import log_snapshot, make_app, until

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("utc_zone")]

WHAT_IF = re.compile(r"^⚠ (\d\.\d{3}): (.+)$")
NEEDED = re.compile(r"^⚠ (\d+) × ([\d,]+)-token requests \((.+?)\): (.+)$")


def _once_warnings() -> tuple[list[tuple[str, str]], list[tuple[int, int, str]]]:
    done = offline("--once", "--log-file", str(STORY_LOG), "--width", "1000")
    assert done.returncode in (0, 1), done.stderr
    lines = done.stdout.splitlines()
    what_ifs = [(m[1], m[2]) for m in map(WHAT_IF.match, lines) if m]
    needed = [(int(m[1]), int(m[2].replace(",", "")), m[4]) for m in map(NEEDED.match, lines) if m]
    return what_ifs, needed


ANSWER = "requests-answer"


def _flat(text: str) -> str:
    return " ".join(text.split())


def _said(screen: FormulaScreen, answer: str) -> str:
    """The modal's answer in that field, its wrapping undone."""
    return _flat(str(screen.query_one(f"#{answer}").render()))


async def _type(pilot, field: str, text: str) -> None:  # type: ignore[no-untyped-def]
    box = pilot.app.screen.query_one(f"#{field}", Input)
    box.value = text  # as typed: Input.Changed answers it


async def test_once_gives_the_formula_modals_caveats_for_the_same_log() -> None:
    what_ifs, needed = _once_warnings()
    # The story's log has both kinds: a what-if under the safe margin, and requests that fit
    # only under it (0.54-ish GiB free) or not at all.
    assert any("under the 5 GiB safe margin" in w for _, w in what_ifs), what_ifs
    assert any("under the 5 GiB safe margin" in w for *_, w in needed), needed
    assert any("no mem_fraction_static fits" in w for *_, w in needed), needed
    app = make_app(log_snapshot(STORY_LOG), demo=False, label=str(STORY_LOG))
    async with app.run_test(size=(160, 60)) as pilot:
        await pilot.pause()
        await pilot.press("f")
        await until(pilot, "the formula", lambda: isinstance(app.screen, FormulaScreen))
        screen = app.screen
        await until(pilot, "its fields", lambda: screen.query_one("#mfs", Input).value != "")
        for mfs, warning in what_ifs:
            await _type(pilot, "mfs", mfs)
            await until(
                pilot, f"the what-if at {mfs}", lambda m=mfs: m[:4] in _said(screen, "what-if")
            )
            assert _flat(warning) in _said(screen, "what-if"), mfs
        for count, length, warning in needed:
            await _type(pilot, "requests", str(count))
            await _type(pilot, "length", str(length))
            asked = f"{count:,} concurrent requests of {length:,} tokens"
            await until(
                pilot, f"the answer for {asked}", lambda a=asked: a in _said(screen, ANSWER)
            )
            assert _flat(warning) in _said(screen, ANSWER), asked
