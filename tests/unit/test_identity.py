"""Is every source about the same server? The comparison rules of tui/kvtop/model/status/identity.py, on
real parsers: log lines through the StartupTracker, expositions from a real prometheus_client
registry (tests/support/sglang_http.py) through parse_exposition, /server_info bodies through
parse_server_info."""

from __future__ import annotations

import json

import pytest

from kvtop.model.status.identity import (
    CONTEXT_LENGTH,
    DP_SIZE,
    MAX_TOTAL_NUM_TOKENS,
    PORT,
    PP_SIZE,
    SGLANG_VERSION,
    TP_SIZE,
    Mismatch,
    find_mismatches,
    metrics_mismatches,
    mismatch_text,
    server_info_mismatches,
)
from kvtop.model.status.identity import (
    MODEL as MODEL_FIELD,
)
from kvtop.sglang.metrics import MetricsSample, ServerInfo, parse_exposition, parse_server_info
from kvtop.sglang.start_state import Startup
from kvtop.sglang.startup import StartupTracker
from kvtop.sglang.story import fold_lines
from tests.support.paths import STORY_LOG
from tests.support.sglang_http import MODEL, Deployment, build_exposition, build_server_info

SUMMARY = (
    "[2026-02-27 09:06:12 TP0] max_total_num_tokens={tokens}, chunked_prefill_size=8192, "
    "max_prefill_tokens=16384, max_running_requests=48, context_len={context}, "
    "available_gpu_mem=7.40 GB"
)


def story() -> Startup:
    """The Kimi-K2.5 TP8 story log (SGLang 0.5.3–0.5.8 formats, pool 159,277, port 30000)."""
    tracker = StartupTracker()
    fold_lines(STORY_LOG.read_text().splitlines(), tracker)
    return tracker.current


def logged(
    *,
    args: str | None = "model_path='moonshotai/Kimi-K2.5', tp_size=8, dp_size=1, pp_size=1",
    tokens: int | None = 159277,
    context: int = 262144,
) -> Startup:
    """A start as SGLang logs it: a server_args line and the summary line (either optional)."""
    lines = []
    if args is not None:
        lines.append(f"[2026-02-27 09:02:05] server_args=ServerArgs({args})")
    if tokens is not None:
        lines.append(SUMMARY.format(tokens=tokens, context=context))
    tracker = StartupTracker()
    fold_lines(lines, tracker)
    return tracker.current


def scrape(dep: Deployment, model: str = MODEL) -> MetricsSample:
    return parse_exposition(build_exposition(dep).replace(MODEL, model))


def info(dep: Deployment, **args: object) -> ServerInfo:
    body = build_server_info(dep)
    body.update(args)
    return parse_server_info(body)


def fields(found: tuple[Mismatch, ...]) -> list[tuple[str, str]]:
    return [(m.source, m.field) for m in found]


# -- agreement: nothing invented ----------------------------------------------------------------


def test_the_story_and_its_own_server_agree() -> None:
    dep = Deployment(version="0.5.8.post1")
    assert find_mismatches(story(), scrape(dep), info(dep, port=30000)) == ()


def test_dp_groups_summed_in_metrics_agree_with_the_pool_of_one_group() -> None:
    start = logged(args="model_path='Qwen/Qwen3-30B-A3B', tp_size=4, dp_size=4, pp_size=1")
    dep = Deployment(version="0.5.12", tp_size=4, dp_size=4, max_total_num_tokens=159277)
    sample = scrape(dep, "Qwen/Qwen3-30B-A3B")
    assert sample.max_total_num_tokens == 4 * 159277  # the deployment's pool: summed
    assert sample.max_total_num_tokens_by_dp == (159277,) * 4
    assert sample.highest_dp_rank == 3
    assert find_mismatches(start, sample, info(dep, model_path="Qwen/Qwen3-30B-A3B")) == ()


def test_dp_groups_with_pools_a_little_apart_agree_with_any_of_them() -> None:
    """Each DP group sizes its own pool; the log's summary line may come from any of them."""
    text = "\n".join(
        f'sglang:max_total_num_tokens{{dp_rank="{dp}",model_name="m",tp_rank="{dp}"}} {pool}'
        for dp, pool in enumerate((159277, 159301, 159264, 159290))
    )
    start = logged(args="model_path='m', tp_size=4, dp_size=4", tokens=159264)
    assert metrics_mismatches(start, parse_exposition(text)) == ()
    found = metrics_mismatches(logged(args=None, tokens=150000), parse_exposition(text))
    assert found == (Mismatch(MAX_TOTAL_NUM_TOKENS, 150000, 159277, "metrics"),)


@pytest.mark.parametrize(
    ("log_args", "label"),
    [
        ("model_path='moonshotai/Kimi-K2.5', served_model_name='kimi-k2.5'", "kimi-k2.5"),
        ("model_path='moonshotai/Kimi-K2.5', served_model_name='kimi-k2.5'", MODEL),
        ("model_path='/models/Kimi-K2.5/'", "Kimi-K2.5"),
        ("model_path='/models/Kimi-K2.5/'", "/models/Kimi-K2.5"),
        ("model_path='moonshotai/Kimi-K2.5'", "kimi-k2.5"),
        ("model_path='/models/Kimi-K2.5', served_model_name='default'", "default"),
    ],
)
def test_served_model_name_and_model_path_agree(log_args: str, label: str) -> None:
    sample = scrape(Deployment(version="0.5.12"), label)
    assert sample.model_names == (label,)
    assert metrics_mismatches(logged(args=log_args), sample) == ()


def test_a_fact_missing_on_either_side_is_not_compared() -> None:
    dep = Deployment(version="0.5.12", tp_size=16, max_total_num_tokens=655_360)
    # No server_args line and no summary line: nothing of the log's to compare with.
    assert find_mismatches(logged(args=None, tokens=None), scrape(dep, "glm"), info(dep)) == ()
    # No version in /server_info, no server args in it: nothing of the server's.
    assert server_info_mismatches(story(), parse_server_info({"version": None})) == ()
    # A series without a model_name label (custom collectors) and a gauge not set yet (0).
    bare = parse_exposition("sglang:max_total_num_tokens 0\nsglang:context_len 0\n")
    assert bare.model_names == ()
    assert metrics_mismatches(story(), bare) == ()
    assert find_mismatches(story(), None, None) == ()


def test_a_version_the_log_knows_only_as_a_range_disagrees_only_outside_it() -> None:
    start = story()
    assert start.version.text() == "0.5.3–0.5.8"
    for inside in ("0.5.3", "0.5.8", "0.5.8.post1", "v0.5.5"):
        assert server_info_mismatches(start, parse_server_info({"version": inside})) == ()
    for outside, shown in (("0.5.12", "0.5.12"), ("0.4.10", "0.4.10"), ("0.5.9rc0", "0.5.9rc0")):
        found = server_info_mismatches(start, parse_server_info({"version": outside}))
        assert found == (Mismatch(SGLANG_VERSION, "0.5.3–0.5.8", shown, "server_info"),)
    # Unreadable versions and a log that narrows nothing down are not compared.
    assert server_info_mismatches(start, parse_server_info({"version": "nightly"})) == ()
    unknown = logged(args=None, tokens=None)
    assert server_info_mismatches(unknown, parse_server_info({"version": "0.5.8"})) == ()
    # An open end ("≥0.4.10": the newest formats) bounds nothing.
    assert logged(args=None).version.text() == "≥0.4.10"
    assert server_info_mismatches(logged(args=None), parse_server_info({"version": "1.2"})) == ()


# -- disagreement --------------------------------------------------------------------------------


def test_another_server_behind_the_url() -> None:
    """Another server behind the URL: a GLM server's /metrics and /server_info against the Kimi
    log."""
    other = Deployment(
        version="0.5.12", tp_size=16, all_schedulers=True, max_total_num_tokens=655_360
    )
    sample = scrape(other, "glm-5.3-flash")
    served = info(
        other, model_path="zai-org/glm-5.3-flash", served_model_name="glm-5.3-flash", port=30001
    )
    found = find_mismatches(story(), sample, served)
    assert [(m.source, m.field, m.log, m.server) for m in found] == [
        ("metrics", MODEL_FIELD, "kimi-k2.5", "glm-5.3-flash"),
        ("metrics", TP_SIZE, 8, 16),  # tp_rank labels up to 15: at least 16 ranks
        ("metrics", MAX_TOTAL_NUM_TOKENS, 159277, 655360),
        ("server_info", MODEL_FIELD, "kimi-k2.5", "glm-5.3-flash"),
        ("server_info", TP_SIZE, 8, 16),
        ("server_info", MAX_TOTAL_NUM_TOKENS, 159277, 655360),
        ("server_info", PORT, 30000, 30001),
        ("server_info", SGLANG_VERSION, "0.5.3–0.5.8", "0.5.12"),
    ]
    # JSON-native values, as `mismatches` carries them.
    for m in found:
        assert json.loads(json.dumps([m.log, m.server])) == [m.log, m.server]


def test_full_paths_with_the_same_last_component_are_two_models() -> None:
    start = logged(args="model_path='/data/kimi/model'")
    found = metrics_mismatches(start, scrape(Deployment(version="0.5.12"), "/data/glm/model"))
    assert found == (Mismatch(MODEL_FIELD, "/data/kimi/model", "/data/glm/model", "metrics"),)


def test_rank_labels_disagree_only_beyond_the_logged_size() -> None:
    tp8 = logged(args="model_path='m', tp_size=8, dp_size=2, pp_size=1")
    # All schedulers publishing (TP0..7), or one per DP group: within the sizes.
    for dep in (
        Deployment(version="0.5.12", tp_size=8, all_schedulers=True),
        Deployment(version="0.5.12", tp_size=8, dp_size=2),
    ):
        assert metrics_mismatches(tp8, scrape(dep, "m")) == ()
    beyond = "\n".join(
        f'sglang:num_running_reqs{{dp_rank="{dp}",model_name="m",pp_rank="{pp}",tp_rank="{tp}"}} 1'
        for dp, tp, pp in ((0, 0, 0), (3, 12, 1))
    )
    found = metrics_mismatches(tp8, parse_exposition(beyond))
    assert fields(found) == [("metrics", TP_SIZE), ("metrics", DP_SIZE), ("metrics", PP_SIZE)]
    assert [(m.log, m.server) for m in found] == [(8, 13), (2, 4), (1, 2)]


def test_context_length() -> None:
    start = logged(context=262144)
    short = Deployment(version="0.5.12", context_len=131072)
    assert metrics_mismatches(start, scrape(short, "moonshotai/Kimi-K2.5")) == (
        Mismatch(CONTEXT_LENGTH, 262144, 131072, "metrics"),
    )
    # /server_info's --context-length against the log's flag, else the summary's length.
    assert server_info_mismatches(start, info(short, context_length=None)) == ()
    assert server_info_mismatches(start, info(short, context_length=131072)) == (
        Mismatch(CONTEXT_LENGTH, 262144, 131072, "server_info"),
    )
    flagged = logged(args="model_path='m', context_length=8192", context=8192)
    assert server_info_mismatches(flagged, info(short, model_path="m", context_length=8192)) == ()


def test_pool_from_server_info_rank_0_or_any_dp_group() -> None:
    start = logged(args="model_path='m', dp_size=2", tokens=159290)
    body = build_server_info(Deployment(version="0.5.12", dp_size=2))
    body["model_path"] = "m"
    body["internal_states"][1]["memory_usage"]["token_capacity"] = 159290  # type: ignore[index]
    assert server_info_mismatches(start, parse_server_info(body)) == ()


# -- words ---------------------------------------------------------------------------------------


def test_mismatch_text_names_each_difference_and_both_values() -> None:
    found = (
        Mismatch(MODEL_FIELD, "Kimi-K2.5", "glm-5.3-flash", "metrics"),
        Mismatch(MAX_TOTAL_NUM_TOKENS, 158616, 655360, "metrics"),
        Mismatch(TP_SIZE, 8, 16, "metrics"),
        Mismatch(PORT, 30000, 30001, "server_info"),
        Mismatch(SGLANG_VERSION, "0.5.3–0.5.8", "0.5.12", "server_info"),
        Mismatch(CONTEXT_LENGTH, 262144, 131072, "server_info"),
    )
    metrics, server_info = mismatch_text(found)
    assert metrics.startswith(
        "metrics say glm-5.3-flash, 655,360 tokens, TP ≥16; "
        "the log says Kimi-K2.5, 158,616 tokens, TP 8: "
    )
    assert "Check --url" in metrics
    assert server_info.startswith(
        "/server_info says port 30001, SGLang 0.5.12, context 131,072; "
        "the log says port 30000, SGLang 0.5.3–0.5.8, context 262,144: "
    )
    assert mismatch_text(()) == ()


def test_model_names_from_labels_are_bounded_and_visible() -> None:
    text = "\n".join(
        f'sglang:num_running_reqs{{model_name="m{i}\\n\x1b[2J",tp_rank="{i}"}} 1' for i in range(50)
    )
    text += '\nsglang:num_running_reqs{model_name="' + "x" * 5000 + '",tp_rank="99"} 1'
    sample = parse_exposition(text)
    assert 1 <= len(sample.model_names) <= 8
    assert all("\x1b" not in n and "\n" not in n and len(n) <= 300 for n in sample.model_names)
