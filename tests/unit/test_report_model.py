"""The story's acceptance numbers through the report model: reserve, formula, what-if, JSON."""

from __future__ import annotations

import dataclasses
import io
import json
import math
from pathlib import Path

import pytest
from rich.console import Console

from kvtop.model.analysis import analyse
from kvtop.model.kv_usage import load_from_batch, load_line
from kvtop.report.json_report import to_json
from kvtop.report.text import print_snapshot
from kvtop.sglang.story import fold_lines
from kvtop.sources.model_config_file import read_model_config
from tests.support.paths import STORY_LOG
from tests.support.tui_support import analysis_snapshot

KIMI_CONFIG = {
    "architectures": ["KimiK25ForConditionalGeneration"],
    "model_type": "kimi_k25",
    "text_config": {
        "num_hidden_layers": 61,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "num_attention_heads": 64,
        "num_key_value_heads": 64,
        "hidden_size": 7168,
        "torch_dtype": "bfloat16",
        "num_nextn_predict_layers": 0,
    },
}


def story(**kwargs: object):  # type: ignore[no-untyped-def]
    with STORY_LOG.open(encoding="utf-8") as handle:
        tracker = fold_lines(handle)
    return analyse(tracker, "story", **kwargs)  # type: ignore[arg-type]


def hf_cache(tmp_path: Path) -> Path:
    """A Hugging Face cache layout holding Kimi-K2.5's config.json, as on a real GPU host."""
    repo = tmp_path / "hub" / "models--moonshotai--Kimi-K2.5"
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(KIMI_CONFIG))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    return tmp_path


def test_reserve_explains_the_11_gib(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    report = story()
    steps = {s.label: s for s in report.explanation.steps}  # type: ignore[union-attr]
    assert steps["reserve"].result == "11.18 GiB"
    assert "93.17 × (1 − 0.88)" in steps["reserve"].arithmetic
    assert steps["rest for KV cache"].result == "10.42 GiB"
    assert report.cell.cell is not None and report.cell.cell.source == "inferred"
    assert any("SGLang's reserve" in line and "11.18" in line for line in report.insights)
    spent = dict(report.explanation.reserve_spent)  # type: ignore[union-attr]
    assert spent["free after the KV cache"] == 11.18
    assert spent["draft weights"] == 0.95
    assert spent["draft KV"] == 0.60
    assert spent["target CUDA graphs"] == 1.71
    assert spent["draft CUDA graphs"] == pytest.approx(0.45)
    assert spent["free after startup"] == 7.40
    assert report.explanation.draft_rule is not None  # type: ignore[union-attr]
    assert report.explanation.draft_rule.budgeted is False  # type: ignore[union-attr]


def test_what_if_090_and_092(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HOME", str(hf_cache(tmp_path)))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    # The session reads the cache's config.json (tui/kvtop/sources/model_config_file.py) and hands
    # the text to the analysis.
    config = read_model_config(None, "moonshotai/Kimi-K2.5")
    report = story(what_if_mfs=[0.92], model_config=config)
    assert report.cell.cell is not None and report.cell.cell.source == "config"
    assert report.cell.cell.bytes == 70_272
    by_mfs = {w.mem_fraction_static: w for w in report.explanation.what_ifs}  # type: ignore[union-attr]
    assert by_mfs[0.88].delta_tokens == 0
    w90 = by_mfs[0.9]
    assert 27_000 <= w90.delta_tokens <= 29_000  # "about 28,000 tokens (+18%)"
    assert w90.delta_pct == pytest.approx(18, abs=0.5)
    # The engine's free memory after startup, as `kvtop plan --from-log` gives it: the draft's
    # pool grows with the target's and the tightest rank counts (the write-up's TP0 alone said
    # 5.5 and 3.67).
    assert w90.headroom_after_graphs_gib == pytest.approx(5.43, abs=0.01)
    w92 = by_mfs[0.92]
    assert w92.headroom_after_graphs_gib == pytest.approx(3.46, abs=0.01)
    steps = {s.label: s for s in report.explanation.steps}  # type: ignore[union-attr]
    # ratio 4: 159,277 × 4 + 1 page = 637,109 tokens × 70,272 B = 44.77 GB per rank, as logged
    assert steps["host KV cache"].result == "44.77 GB per rank · 44.77 logged"
    assert "637,109 tokens" in steps["host KV cache"].arithmetic
    sizing = {s.rank: s for s in report.sizings}
    assert sizing["TP0"].cell_size_source == "config"
    assert abs(sizing["TP0"].predicted_tokens - 159_277) <= 100  # within the 0.01 GiB rounding


def test_json_shape(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty"))
    data = to_json(story())
    text = json.dumps(data, allow_nan=False)
    assert json.loads(text)["schema"] == "kvtop/1"
    assert data["startup"] == data["startup"] | {"state": "ready", "failure": None, "restarts": 0}
    assert data["summary"]["max_total_num_tokens"] == 159_277  # type: ignore[index]
    ranks = data["ranks"]
    assert [r["rank"] for r in ranks] == [f"TP{i}" for i in range(8)]  # type: ignore[index]
    tp0 = ranks[0]  # type: ignore[index]
    assert tp0["target"]["kv_gib"] == 10.42 and tp0["draft"]["kv_gib"] == 0.6
    assert tp0["target"]["graph_gib"] == 1.71 and tp0["draft"]["graph_gib"] == pytest.approx(0.45)
    assert tp0["host_kv_gb"] == 44.77
    sizing = data["sizing"][0]  # type: ignore[index]
    assert sizing["rank"] == "TP0" and sizing["cell_size_source"] == "inferred"
    assert sizing["reserve_gib"] == pytest.approx(11.18, abs=0.01)
    assert data["host_kv"] == {"per_rank_gb": 44.77, "total_gb": 358.16, "ranks": 8}


def test_text_report_shows_a_dash_for_a_nan_or_inf_figure() -> None:
    """The report and the widgets share tui/kvtop/fmt.py: a non-finite number is unknown, not 'nan'."""
    report = story()
    first = report.breakdowns[0]
    assert first.weights_gib is not None and math.isfinite(first.weights_gib)
    broken = dataclasses.replace(first, weights_gib=math.nan, kv_cache_gib=math.inf)
    report = dataclasses.replace(report, breakdowns=(broken, *report.breakdowns[1:]))
    out = io.StringIO()
    console = Console(file=out, width=200, highlight=False, soft_wrap=False)
    print_snapshot(analysis_snapshot(report), console)
    text = out.getvalue()
    row = next(line for line in text.splitlines() if line.startswith(first.rank + " "))
    assert "nan" not in text.lower() and "inf" not in row
    assert row.split()[2:4] == ["—", "—"]  # weights and KV columns


def test_report_and_kv_panel_say_the_load_in_the_same_words() -> None:
    """One load line (kv_usage.load_line) for the report's batch line and the live KV panel."""
    report = story()
    line = load_line(load_from_batch(report.startup.latest_batch["TP0"]))
    assert line == "12 running · 0 queued · 512 tok/s · accept 2.81"
    out = io.StringIO()
    console = Console(file=out, width=400, highlight=False, soft_wrap=False)
    print_snapshot(analysis_snapshot(report), console)
    assert f"KV usage 30.27% · {line} · 64 batch lines" in out.getvalue()  # 48,211 / 159,277
