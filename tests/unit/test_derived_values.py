"""Values kvtop computed from other logged numbers are marked derived, never shown as read:
in the model, in `--json` (`derived` lists), in the `--once` text and on the formula screen."""

from __future__ import annotations

import io

from rich.console import Console

from kvtop.live.screens.formula import explanation_text
from kvtop.model.analysis import Analysis, analyse
from kvtop.report.json_report import to_json
from kvtop.report.text import render_snapshot
from kvtop.sglang.story import fold_lines
from tests.support.paths import STORY_LOG
from tests.support.tui_support import analysis_snapshot

ARGS = "server_args=ServerArgs(model_path='/models/m', tp_size=1, mem_fraction_static=0.85)"

# SGLang 0.5.10's lines (model_runner.py, memory_pool.py); the graph end line as a real log
# had it, where the excerpt holds no `Capture cuda graph begin` line.
HEAD = [
    f"[2026-06-27 10:00:00] {ARGS}",
    "[2026-06-27 10:00:01 TP0] Load weight begin. avail mem=78.50 GB",
    "[2026-06-27 10:00:31 TP0] Load weight end. elapsed=30.00 s, type=LlamaForCausalLM, "
    "avail mem=63.40 GB, mem usage=15.10 GB.",
]
MLA_KV = "[2026-06-27 10:00:32 TP0] KV Cache is allocated. #tokens: 400000, KV size: 51.00 GB"
MHA_KV = (
    "[2026-06-27 10:00:32 TP0] KV Cache is allocated. #tokens: 400000, "
    "K size: 25.50 GB, V size: 25.50 GB"
)
POOL_END = "[2026-06-27 10:00:33 TP0] Memory pool end. avail mem=12.10 GB"
GRAPH_BEGIN = (
    "[2026-06-27 10:00:34 TP0] Capture cuda graph begin. This can take up to several minutes. "
    "avail mem=11.18 GB"
)
GRAPH_END = (
    "[2026-06-27 10:00:44 TP0] Capture cuda graph end. Time elapsed: 9.81 s. "
    "mem usage=0.79 GB. avail mem=10.39 GB."
)
READY = "[2026-06-27 10:00:50] The server is fired up and ready to roll!"

END_ONLY = [*HEAD, MLA_KV, POOL_END, GRAPH_END, READY]
BOTH = [*HEAD, MLA_KV, POOL_END, GRAPH_BEGIN, GRAPH_END, READY]
FOOTNOTE = "* derived, not in the log:"


def _analysis(lines: list[str]) -> Analysis:
    return analyse(fold_lines(lines), "test.log")


def _plain(renderable: object, width: int = 160) -> str:
    console = Console(width=width, record=True, color_system=None, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def test_graph_end_without_begin_marks_the_free_memory_before_derived() -> None:
    model = fold_lines(END_ONLY).current.ranks["TP0"].target
    # The value stays (scripts read it), computed as after + usage and said to be so.
    assert model.avail_before_graph_gib == 11.18
    assert list(model.derived) == ["avail_before_graph_gib"]
    assert "10.39 + 0.79" in model.derived["avail_before_graph_gib"]
    graph = model.graphs[0]
    assert list(graph.derived) == ["avail_before_gib"]
    # What the end line gives is read.
    assert (graph.avail_after_gib, graph.mem_usage_gib, model.graph_gib) == (10.39, 0.79, 0.79)


def test_both_graph_lines_nothing_is_derived() -> None:
    model = fold_lines(BOTH).current.ranks["TP0"].target
    assert model.avail_before_graph_gib == 11.18
    assert model.derived == {}
    assert model.graphs[0].derived == {}


def test_json_lists_the_derived_fields() -> None:
    target = to_json(_analysis(END_ONLY))["ranks"][0]["target"]  # type: ignore[index]
    assert target["avail_before_graph_gib"] == 11.18
    assert target["derived"] == ["avail_before_graph_gib"]
    assert target["graphs"][0]["derived"] == ["avail_before_gib"]
    assert target["pools"][0]["derived"] == []  # the MLA line's own size

    normal = to_json(_analysis(BOTH))["ranks"][0]["target"]  # type: ignore[index]
    assert normal["avail_before_graph_gib"] == 11.18
    assert normal["derived"] == []
    assert normal["graphs"][0]["derived"] == []


def test_json_k_plus_v_and_the_pool_duration_are_derived() -> None:
    data = to_json(_analysis([*HEAD, MHA_KV, POOL_END, GRAPH_BEGIN, GRAPH_END, READY]))
    rank = data["ranks"][0]  # type: ignore[index]
    assert rank["target"]["kv_gib"] == 51.0
    assert rank["target"]["derived"] == ["kv_gib"]
    assert rank["target"]["pools"][0]["derived"] == ["gib"]
    phases = {p["phase"]: p["derived"] for p in rank["phases"]}
    assert phases["KV cache"] == ["delta_gib"]
    assert phases["memory pool"] == ["duration_s"]
    assert phases["decode graph"] == []
    memory = data["memory"][0]  # type: ignore[index]
    assert "kv_cache_gib" in memory["derived"] and "weights_gib" not in memory["derived"]


def test_text_report_marks_a_derived_figure_with_its_footnote() -> None:
    mha = _plain(render_snapshot(analysis_snapshot(_analysis([*HEAD, MHA_KV, POOL_END, READY]))))
    assert "KV cache: 400,000 tokens, 51.00 GiB* per rank" in mha
    assert f"{FOOTNOTE} KV cache = K size + V size (25.50 + 25.50)" in mha

    mla = _plain(render_snapshot(analysis_snapshot(_analysis(BOTH))))
    assert "KV cache: 400,000 tokens, 51.00 GiB per rank" in mla
    assert f"{FOOTNOTE} KV cache" not in mla


def test_formula_screen_and_report_mark_the_same_rows() -> None:
    with STORY_LOG.open(encoding="utf-8") as handle:
        analysis = analyse(fold_lines(handle), STORY_LOG.name)
    screen = _plain(explanation_text(analysis, "TP0"))
    report = _plain(render_snapshot(analysis_snapshot(analysis)))
    for text in (screen, report):
        rows = [" ".join(line.split()) for line in text.splitlines()]
        # The draft's K + V and its two captures summed; the target's one capture is read.
        assert "draft KV 0.60*" in rows
        assert "draft CUDA graphs 0.45*" in rows
        assert "target CUDA graphs 1.71" in rows
        assert f"{FOOTNOTE} draft KV = K size + V size (0.30 + 0.30); draft CUDA graphs" in text
