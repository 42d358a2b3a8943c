"""One name for each quantity: the --once report, the formula screen and the JSON
say the same words for the same figure, from every fixture log and the demo (docs/glossary.md)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from kvtop.live.screens.formula import explanation_text
from kvtop.model.analysis import Analysis, analyse
from kvtop.model.sizing.replay import HOST_KV, OTHER_AFTER_POOL, OTHER_STARTUP
from kvtop.report.json_report import to_json
from kvtop.report.text import render_snapshot
from kvtop.sglang.story import fold_lines
from tests.support.paths import REAL_LOGS, ROOT, STORY_LOG
from tests.support.tui_support import analysis_snapshot

LOGS = [STORY_LOG, *sorted(REAL_LOGS.glob("*.log"))]

# Other names the same quantities had, each with the one name that replaced it.
RETIRED = {
    "KV pool": "KV cache",
    "other runtime allocations": OTHER_STARTUP,
    "still free after startup": "free after startup",
    "stays free": "free after startup",
    "draft w ": "draft weights",
    "hierarchical KV pools": f"{HOST_KV} (HiCache)",
}
SPACED_PERCENT = re.compile(r"\d %")  # "17.9 %": percentages come from kvtop.fmt ("17.9%")
# The batch line's usage as a ratio ("usage 0.30 ·"), not the percentage under its own name
# ("KV usage 0.39%": a pool under 1% used).
USAGE_RATIO = re.compile(r"(?<!KV )usage 0\.\d+(?![\d%])")


def _retired(text: str) -> dict[str, str]:
    used = {old: new for old, new in RETIRED.items() if old in text}
    if SPACED_PERCENT.search(text):
        used["NN %"] = "NN% (kvtop.fmt.pct)"
    if USAGE_RATIO.search(text):
        used["usage 0."] = "KV usage NN%"
    return used


def _analysis(log: Path) -> Analysis:
    with log.open(encoding="utf-8", errors="replace") as handle:
        return analyse(fold_lines(handle), log.name)


def _plain(renderable: object, width: int = 100) -> str:
    out = io.StringIO()
    Console(file=out, width=width, highlight=False, soft_wrap=False).print(renderable)
    return out.getvalue()


@pytest.mark.parametrize("log", LOGS, ids=[p.stem[:12] for p in LOGS])
def test_report_uses_one_name_per_quantity(log: Path) -> None:
    analysis = _analysis(log)
    text = _plain(render_snapshot(analysis_snapshot(analysis)), width=400)
    assert _retired(text) == {}, f"{log.name}: retired names in the report (say the right ones)"
    screen = _plain(explanation_text(analysis, None), width=400)
    assert _retired(screen) == {}, f"{log.name}: retired names on the formula screen"


def _has_rank_figures(log: Path) -> bool:
    """Excerpts of a traceback alone (failures) have no memory lines: no formula."""
    sidecar = log.with_suffix(".json")
    if not sidecar.is_file():
        return True
    ranks = json.loads(sidecar.read_text())["ranks"]
    return any(v is not None for rank in ranks.values() for v in rank.values())


FORMULA_LOGS = [log for log in LOGS if _has_rank_figures(log)]


@pytest.mark.parametrize("log", FORMULA_LOGS, ids=[p.stem[:12] for p in FORMULA_LOGS])
def test_formula_names_its_rank_the_same_everywhere(log: Path) -> None:
    """The report, the formula screen and JSON `formula.rank` name the same rank."""
    analysis = _analysis(log)
    e = analysis.explanation
    if e is None and analysis.startup.state == "stopped" and not analysis.startup.ranks:
        return  # a shutdown excerpt (40-49): no startup line, no formula to name a rank in
    if e is None:
        # Only an excerpt without any rank's startup line (61: node 0's allreduce warnings) has none.
        assert not analysis.ranks, f"{log.name}: every fixture log with ranks reaches the formula"
        assert to_json(analysis)["formula"] is None
        return
    words = e.rank_words()
    assert words in _plain(render_snapshot(analysis_snapshot(analysis)), width=400)
    assert words in _plain(explanation_text(analysis, None), width=400)
    formula = to_json(analysis)["formula"]
    assert isinstance(formula, dict) and formula["rank"] == e.rank
    if e.rank:
        assert e.rank in words


def test_the_minimum_rank_is_named_when_it_is_not_the_reference() -> None:
    """DP4 excerpt: the least post-load free is on DP1; the logged tokens come from DP0."""
    log = REAL_LOGS / "02-pr17392-dp4-tp4-ep4-qwen3moe-a.log"
    e = _analysis(log).explanation
    assert e is not None
    assert (e.rank, e.pre_load_rank, e.post_load_rank) == ("DP0 TP0 EP0",) + ("DP1 TP1 EP1",) * 2
    steps = {s.label: s for s in e.steps}
    assert "minimum over 4 ranks (at DP1 TP1 EP1)" in steps["post-load free"].arithmetic
    assert e.rank_words() == (
        "pre-/post-load free: the minimum over ranks, at DP1 TP1 EP1 · "
        "logged tokens and where the reserve went: DP0 TP0 EP0"
    )


def test_story_terms_match_between_tables() -> None:
    """The memory table's column and the formula's row are one quantity with one name; the
    version range is the same in the header, the draft rule and the insights."""
    analysis = _analysis(STORY_LOG)
    text = _plain(render_snapshot(analysis_snapshot(analysis)), width=400)
    assert "SGLang 0.5.3–0.5.8 · ready" in text
    assert "draft model: SGLang 0.5.3–0.5.8 does not budget" in text
    assert "• SGLang 0.5.3–0.5.8 does not budget" in text
    assert "SGLang 0.5.8 " not in text
    spent = dict(analysis.explanation.reserve_spent)  # type: ignore[union-attr]
    table = {b.rank: b for b in analysis.breakdowns}
    # Two quantities, two names: the memory table's counts everything since the pre-load
    # reading, "where the reserve went" only what came after the KV cache (equal here: this
    # log allocates nothing unnamed between its weights and its KV cache).
    assert OTHER_STARTUP not in spent
    assert spent[OTHER_AFTER_POOL] == table["TP0"].startup_other_gib == 0.07
    assert spent["free after startup"] == table["TP0"].free_after_startup_gib == 7.40
    assert f"{OTHER_AFTER_POOL}  0.07*" in text  # a difference: marked derived
    assert f"{OTHER_STARTUP}: what startup took that no log line names" in text
    assert f"{OTHER_AFTER_POOL}: what was taken after the KV cache" in text
    assert "log summary line: max_total_num_tokens 159,277" in text
    assert "free after startup 7.40 GiB" in text
    assert f"{HOST_KV} (HiCache): 44.77 GB per rank × 8 = 358.16 GB host RAM (decimal GB" in text
    assert "KV usage 30.27%" in text  # the batch line's exact 48,211 / 159,277 (its 0.30)
    assert "(+17.9%)" in text and "(−17.9%)" in text and "(±0.0%)" in text


def test_demo_once_names_each_source() -> None:
    """metrics and the log's batch line both give a KV usage and an accept length: each line
    says where its figures come from, in the same words."""
    result = subprocess.run(
        [sys.executable, "-m", "kvtop", "--demo", "--once"],
        capture_output=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONIOENCODING": "utf-8", "COLUMNS": "400"},  # no wrapping
    )
    out = result.stdout.decode("utf-8")
    assert result.returncode == 0, result.stderr.decode("utf-8", "replace")
    metrics = next(line for line in out.splitlines() if line.startswith("metrics (/metrics): "))
    assert "KV usage 70.00%" in metrics
    batch = next(line for line in out.splitlines() if line.startswith("log, latest batch line"))
    assert "KV usage 70.00%" in batch
    assert "CUDA" in out and "graphs" in out and "runtime = NVML used − the items" in out
    assert "host RAM: 412.6 / 1,099.5 GB used, host KV cache (HiCache) 358.16 GB" in out
    assert _retired(out) == {}
