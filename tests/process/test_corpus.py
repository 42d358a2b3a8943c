"""The hostile-input corpus (tests/corpus) through the real parsers, the reports and the readers.

Each log line in corpus/log_lines.jsonl says what parse_line must make of it: the event kind and
key values, "not an event" (null), and which numbers it must refuse (`rejected`). Each body in
corpus/bodies is a /metrics exposition or a /server_info JSON with its expectation in
manifest.json. Whole-log cases (mem_fraction_static 0/1/7, duplicate ranks, lines out of order,
a startup that never finishes, 1 MB and 100 MB lines) are built here from the real formats.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import math
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rich.console import Console

from kvtop.model.analysis import Analysis, analyse
from kvtop.model.build_snapshot import SnapshotInputs, build_snapshot
from kvtop.report.json_report import snapshot_json, to_json
from kvtop.report.text import print_snapshot
from kvtop.session import Options, Session
from kvtop.sglang.log_line import parse_line
from kvtop.sglang.metrics import MetricsSample, ServerInfo, parse_exposition, parse_server_info
from kvtop.sglang.start_state import READY, STARTING
from kvtop.sglang.story import fold_lines
from tests.support.parser_checks import check_event
from tests.support.paths import ROOT
from tests.support.tui_support import analysis_snapshot

CORPUS = ROOT / "tests" / "corpus"
BODIES = CORPUS / "bodies"
# Any C0/C1 control character but the line breaks the report itself writes.
RAW_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def _load_lines() -> list[dict[str, object]]:
    with (CORPUS / "log_lines.jsonl").open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


LINES = _load_lines()
MANIFEST: dict[str, dict[str, object]] = json.loads((BODIES / "manifest.json").read_text())


def _raw(entry: dict[str, object]) -> str | bytes:
    if "line_b64" in entry:
        return base64.b64decode(str(entry["line_b64"]))
    return str(entry["line"])


def _get(obj: object, path: str) -> object:
    """`prefix.rank`, `args.rejected.mem_fraction_static`, `memory_by_dp.0.weight_gib`."""
    for part in path.split("."):
        if obj is None:
            return None
        if isinstance(obj, (list, tuple)):
            obj = obj[int(part)] if int(part) < len(obj) else None
        elif hasattr(obj, "get") and not dataclasses.is_dataclass(obj):
            obj = obj.get(part)  # type: ignore[union-attr]
        else:
            obj = getattr(obj, part)
    return obj


def _same(actual: object, expected: object) -> bool:
    if isinstance(expected, float) and isinstance(actual, (int, float)):
        return math.isclose(actual, expected, rel_tol=1e-9)
    return actual == expected


def _render(report: Analysis) -> str:
    out = io.StringIO()
    # A real terminal: Rich writes its own styles as escapes, so count the log's separately.
    console = Console(file=out, width=160, force_terminal=True, color_system="standard")
    print_snapshot(analysis_snapshot(report), console)
    return out.getvalue()


def _plain(text: str) -> str:
    """The rendered report without Rich's own SGR styling (`ESC [ ... m`)."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


# --------------------------------------------------------------------------- the corpus itself


def test_corpus_has_the_promised_size() -> None:
    assert len(LINES) >= 100
    assert len({entry["id"] for entry in LINES}) == len(LINES)
    bodies = [name for name in MANIFEST if (BODIES / name).is_file()]
    assert len(bodies) == len(MANIFEST) >= 20
    categories = {entry["category"] for entry in LINES}
    assert {"markup", "ansi", "invalid_utf8", "nul", "nonfinite", "negative", "huge"} <= categories


@pytest.mark.parametrize("entry", LINES, ids=[str(e["id"]) for e in LINES])
def test_log_line(entry: dict[str, object]) -> None:
    expect = entry["expect"]
    assert isinstance(expect, dict)
    event = parse_line(_raw(entry))
    if expect["event"] is None:
        assert event is None
        return
    assert event is not None and type(event).__name__ == expect["event"]
    for path, value in expect.get("fields", {}).items():
        assert _same(_get(event, path), value), (path, _get(event, path), value)
    # Every refused number is named, in order; nothing else is refused.
    wanted = expect["rejected"]
    assert len(event.rejected) == len(wanted), event.rejected
    for got, prefix in zip(event.rejected, wanted, strict=True):
        assert got.startswith(prefix), (got, prefix)
    for text in expect.get("message_shows", []):
        assert text in event.message
    for text in expect.get("message_hides", []):
        assert text not in event.message
    check_event(event)


def test_every_line_through_the_reports() -> None:
    """All corpus lines as one log: the text report shows no raw escape, the JSON is strict."""
    lines = [_raw(entry) for entry in LINES]
    everything = analyse(fold_lines(lines), "corpus.log")
    json.dumps(to_json(everything), allow_nan=False)
    assert RAW_CONTROL.search(_plain(_render(everything)).replace("\n", "")) is None
    # The refused numbers of one startup (server_args and load lines elsewhere start new ones).
    refusing = ["markup", "ansi", "negative", "huge", "nonfinite"]
    lines = [_raw(e) for category in refusing for e in LINES if e["category"] == category]
    report = analyse(fold_lines(lines), "corpus.log")
    data = to_json(report)
    json.dumps(data, allow_nan=False)
    rendered = _render(report)
    assert RAW_CONTROL.search(_plain(rendered).replace("\n", "")) is None
    assert "\x1b]" not in rendered and "\x9b" not in rendered
    # Refused numbers are listed, as logged, in both reports.
    rejected = data["rejected_values"]
    assert isinstance(rejected, dict) and rejected["count"] >= 10
    values = [v["value"] for v in rejected["values"]]
    assert "Rejected values (not used" in rendered
    for value in values:
        assert value in _plain(rendered)
    reasons = " ".join(values)
    for reason in ("not a finite number", "negative memory", "out of range"):
        assert reason in reasons


@pytest.mark.parametrize(
    "raw, shown",
    [
        ("\x1b[2J\x1b[H", "␛[2J␛[H"),
        ("\x1b]0;owned\x07", "␛]0;owned␇"),
        ("\x9b31m", "\\x9b31m"),
        ("[bold]boom[/] [red]x", "[bold]boom[/] [red]x"),
    ],
)
def test_failure_text_is_shown_literally(raw: str, shown: str) -> None:
    lines = [*_story(), f"[2026-02-27 09:06:31 TP0] Scheduler hit an exception: {raw}"]
    report = analyse(fold_lines(lines), "x.log")
    rendered = _render(report)
    # After ready: a crash while serving, never a failed start.
    assert f"CRASHED while serving: Scheduler hit an exception: {shown}" in _plain(rendered)
    assert raw not in rendered or raw == shown
    assert to_json(report)["startup"]["failure"] == f"Scheduler hit an exception: {shown}"  # type: ignore[index]


def test_escape_in_model_path_never_reaches_the_terminal() -> None:
    # Found by the corpus: the cell-size note quoted server_args' model_path with a real ESC.
    lines = _story()
    lines[0] = lines[0].replace("/nonexistent/kimi", "\\x1b[2J[red]evil[/]")
    rendered = _render(analyse(fold_lines(lines), "x.log"))
    assert "\x1b[2J" not in rendered
    assert "␛[2J[red]evil[/]" in rendered


# --------------------------------------------------------------------------- bodies


BODY_NAMES = sorted(MANIFEST)


def _body(name: str) -> str:
    with (BODIES / name).open(encoding="utf-8", errors="replace", newline="") as handle:
        return handle.read()


def _server_info(text: str) -> ServerInfo:
    try:
        data = json.loads(text)
    except ValueError:
        data = None  # the source reports a body that is not JSON; the parser sees nothing
    return parse_server_info(data)


@pytest.mark.parametrize("name", BODY_NAMES)
def test_body(name: str) -> None:
    entry = MANIFEST[name]
    expect = entry["expect"]
    assert isinstance(expect, dict)
    text = _body(name)
    if entry["kind"] == "metrics":
        sample = parse_exposition(text)
        _check_metrics(sample, expect)
    else:
        info = _server_info(text)
        for path, value in expect["fields"].items():
            assert _same(_get(info, path), value), (path, _get(info, path), value)
        assert list(info.rejected) == expect["rejected"]
        for value in (info.version, info.status):
            assert value is None or RAW_CONTROL.search(value) is None


def _check_metrics(sample: MetricsSample, expect: dict[str, object]) -> None:
    for key, value in expect["values"].items():  # type: ignore[attr-defined]
        assert _same(sample.values.get(key), value), (key, sample.values.get(key), value)
    for key in expect["absent"]:  # type: ignore[attr-defined]
        assert key not in sample.values
    rejected = expect["rejected"]
    assert isinstance(rejected, list)
    assert sample.rejected_count == len(sample.rejected) == len(rejected), sample.rejected
    for got, prefix in zip(sample.rejected, rejected, strict=True):
        assert got.startswith(prefix), (got, prefix)
    if "ranks" in expect:
        assert list(sample.per_rank) == expect["ranks"]
    for value in sample.values.values():
        assert math.isfinite(value) and value >= 0
    for rank in sample.per_rank:
        assert RAW_CONTROL.search(rank) is None


def test_rejected_scrape_values_reach_both_reports() -> None:
    sample = parse_exposition(_body("05-nan-inf-gauges.prom"))
    info = _server_info(_body("26-info-out-of-range.json"))
    report = analyse(fold_lines(_story()), "x.log")
    snapshot = build_snapshot(
        SnapshotInputs(
            report,
            taken_at=0.0,
            metrics=sample,
            server_info=info,
        )
    )
    data = snapshot_json(snapshot)
    text = json.dumps(data, allow_nan=False)
    assert "NaN" in text  # the refused text, as scraped, inside a string
    refused = data["rejected_from_server"]
    assert isinstance(refused, dict)
    assert refused["metrics_count"] == 3
    assert refused["server_info"][0] == "max_total_num_tokens: 1e+30 (out of range)"
    assert data["metrics"] == {"num_running_reqs": 3.0}
    out = io.StringIO()
    print_snapshot(snapshot, Console(file=out, width=300))
    assert "rejected from the server (not used): /metrics 3:" in out.getvalue()


# --------------------------------------------------------------------------- whole logs


def _story(mfs: str = "0.88", rank: str = "TP0") -> list[str]:
    p = f"[2026-02-27 09:05:{{:02d}} {rank}] "
    return [
        "[2026-02-27 09:02:05] server_args=ServerArgs(model_path='/nonexistent/kimi', "
        f"tp_size=1, page_size=1, mem_fraction_static={mfs}, context_length=262144)",
        p.format(10) + "Load weight begin. avail mem=93.17 GB",
        p.format(49) + "Load weight end. type=KimiK25ForConditionalGeneration, "
        "dtype=torch.bfloat16, avail mem=21.60 GB, mem usage=71.57 GB.",
        p.format(50) + "KV Cache is allocated. #tokens: 159277, KV size: 10.42 GB",
        p.format(51) + "Memory pool end. avail mem=11.18 GB",
        p.format(52) + "Capture cuda graph begin. This can take up to several minutes. "
        "avail mem=11.12 GB",
        p.format(59) + "Capture cuda graph end. Time elapsed: 6.83 s. mem usage=1.71 GB. "
        "avail mem=9.41 GB.",
        "[2026-02-27 09:06:12 TP0] max_total_num_tokens=159277, chunked_prefill_size=8192, "
        "max_prefill_tokens=16384, max_running_requests=48, context_len=262144, "
        "available_gpu_mem=7.40 GB",
        "[2026-02-27 09:06:31] The server is fired up and ready to roll!",
    ]


def _session_report(tmp_path: Path, lines: list[str]) -> tuple[dict[str, object], str]:
    """Through the real file reader and session, as `kvtop --once --log-file` does."""
    log = tmp_path / "sglang.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    session = Session(Options(log_file=str(log), nvml=False, metrics=False))
    session._read_whole_log()
    snapshot = session.snapshot()
    data = snapshot_json(snapshot)
    json.dumps(data, allow_nan=False)
    out = io.StringIO()
    print_snapshot(snapshot, Console(file=out, width=200))
    return data, out.getvalue()


@pytest.mark.parametrize("mfs", ["0", "7"])
def test_mem_fraction_static_out_of_range_is_reported_not_dropped(tmp_path: Path, mfs: str) -> None:
    data, text = _session_report(tmp_path, _story(mfs=mfs))
    args = data["server_args"]
    assert isinstance(args, dict)
    assert args["mem_fraction_static"] is None
    assert args["rejected"] == {"mem_fraction_static": f"{mfs} (not in (0, 1])"}
    assert f"mem_fraction_static {mfs} (not in (0, 1]): rejected" in text
    assert f"server_args mem_fraction_static={mfs} (not in (0, 1])" in text
    assert data["sizing"] == []  # no replay with a refused value, and no made-up reserve
    assert all(m["reserve_gib"] is None for m in data["memory"])  # type: ignore[index, union-attr]


def test_mem_fraction_static_one_is_valid(tmp_path: Path) -> None:
    data, text = _session_report(tmp_path, _story(mfs="1"))
    assert data["server_args"]["mem_fraction_static"] == 1.0  # type: ignore[index]
    assert data["memory"][0]["reserve_gib"] == 0.0  # type: ignore[index]
    assert "mem_fraction_static 1\n" in text and "rejected" not in text


def test_duplicate_rank_lines_keep_one_rank(tmp_path: Path) -> None:
    # The same startup logged twice (a log concatenated with itself): one start then a restart.
    lines = _story()
    data, _ = _session_report(tmp_path, lines + lines)
    assert data["startup"]["restarts"] == 1  # type: ignore[index]
    assert [r["rank"] for r in data["ranks"]] == ["TP0"]  # type: ignore[union-attr]
    assert data["summary"]["max_total_num_tokens"] == 159277  # type: ignore[index]


def test_contradictory_ranks_are_kept_apart(tmp_path: Path) -> None:
    # "TP0" and "DP0 TP0" in one log (two prefix styles): two ranks, each with its own numbers.
    other = [line.replace("TP0]", "DP0 TP0]").replace("93.17", "80.00") for line in _story()[1:7]]
    data, text = _session_report(tmp_path, _story() + other)
    ranks = {r["rank"]: r for r in data["ranks"]}  # type: ignore[union-attr]
    assert set(ranks) == {"TP0", "DP0 TP0"}
    assert ranks["TP0"]["target"]["avail_before_load_gib"] == 93.17
    assert ranks["DP0 TP0"]["target"]["avail_before_load_gib"] == 80.0
    assert "DP0 TP0" in text


def test_lines_out_of_order(tmp_path: Path) -> None:
    # What journald and two processes writing one file do: the main process's ready line before
    # the scheduler's summary, a second rank's lines interleaved with the first's
    # (with older timestamps). Each value stays with its rank; nothing is refused or invented.
    story = _story()
    tp1 = [line.replace(" TP0]", " TP1]").replace("09:05:", "09:04:") for line in story[1:7]]
    lines = [story[0]]
    for mine, other in zip(story[1:7], tp1, strict=True):
        lines += [other, mine] if "Memory pool" in mine else [mine, other]
    lines[-1:-1] = [story[8], story[7]]  # ready, then the summary, before TP1's last graph line
    data, _ = _session_report(tmp_path, lines)
    assert data["startup"]["state"] == READY  # type: ignore[index]
    assert data["startup"]["restarts"] == 0  # type: ignore[index]
    ranks = {r["rank"]: r["target"] for r in data["ranks"]}  # type: ignore[union-attr]
    for rank in ("TP0", "TP1"):
        assert ranks[rank]["kv_tokens"] == 159277
        assert ranks[rank]["avail_before_load_gib"] == 93.17
        assert ranks[rank]["avail_after_pool_gib"] == 11.18
    assert data["summary"]["max_total_num_tokens"] == 159277  # type: ignore[index]
    assert data["rejected_values"]["count"] == 0  # type: ignore[index]


def test_lines_reversed_never_invent_a_value(tmp_path: Path) -> None:
    # The whole log backwards: a load end before its begin reads as a new start (SGLang loads
    # once per start), so the report shows a restart and only what the last start logged.
    data, text = _session_report(tmp_path, _story()[::-1])
    assert data["startup"]["restarts"] >= 1  # type: ignore[index]
    assert "restarted" in text
    assert data["rejected_values"]["count"] == 0  # type: ignore[index]
    assert data["sizing"] == [] or data["sizing"][0]["pre_load_free_gib"] == 93.17  # type: ignore[index]


def test_startup_that_never_finishes(tmp_path: Path) -> None:
    data, text = _session_report(tmp_path, _story()[:6])  # stops inside graph capture
    startup = data["startup"]
    assert isinstance(startup, dict)
    assert startup["state"] == STARTING
    assert startup["ready_at"] is None and startup["failure"] is None
    assert "· starting" in text and "ready" not in text.split("\n", 3)[2]
    assert data["summary"]["max_total_num_tokens"] is None  # type: ignore[index]


def test_real_fixture_logs_refuse_nothing() -> None:
    """No false alarms: every real SGLang log in the fixtures parses without a refused value."""
    real = sorted((ROOT / "tests" / "fixtures" / "sglang-logs").glob("*.log"))
    for log in [*real, ROOT / "tui" / "kvtop" / "data" / "kimi-k25-tp8-eagle3-hicache-0.5.8.log"]:
        with log.open(encoding="utf-8", errors="replace") as handle:
            tracker = fold_lines(handle)
        for startup in (tracker.current, tracker.previous):
            if startup is not None:
                assert startup.rejected_values == [], (log.name, startup.rejected_values[:3])
                assert startup.server_args is None or not startup.server_args.rejected, log.name


# --------------------------------------------------------------------------- huge lines


_MEASURE = textwrap.dedent(
    """
    import asyncio, json, sys, tracemalloc
    mode, path = sys.argv[1], sys.argv[2]
    from kvtop.sglang.startup import StartupTracker
    from kvtop.sglang.story import fold_lines
    from kvtop.sources.log_follow import LogFollower
    from kvtop.sources.log_text import log_lines
    tracker = StartupTracker()
    tracemalloc.start()
    if mode == "file":
        with log_lines(path) as lines:
            fold_lines(lines, tracker)
    else:
        async def follow():
            follower = LogFollower(path, poll_interval_s=0.01)
            async for line in follower.lines():
                fold_lines([line], tracker)
                if "ready to roll" in line:
                    follower.close()
        asyncio.run(follow())
    peak = tracemalloc.get_traced_memory()[1]
    s = tracker.current
    print(json.dumps({"peak_mib": peak / 2**20, "state": s.state,
                      "failure": (s.failure.message[:60] if s.failure else None),
                      "avail": s.ranks["TP0"].target.avail_before_load_gib}))
    """
)


def _huge_line_log(path: Path, megabytes: int) -> None:
    chunk = "x" * (1 << 20)
    with path.open("w", encoding="utf-8") as handle:
        handle.write("[2026-02-27 09:02:10 TP0] Load weight begin. avail mem=93.17 GB\n")
        handle.write("[2026-02-27 09:02:11 TP0] Scheduler hit an exception: ")
        for _ in range(megabytes):
            handle.write(chunk)
        handle.write("\n[2026-02-27 09:06:31] The server is fired up and ready to roll!\n")


@pytest.mark.parametrize("megabytes, bound_mib", [(1, 20), (100, 50)])
@pytest.mark.parametrize("reader", ["file", "follow"])
def test_huge_line_memory_stays_bounded(
    tmp_path: Path, megabytes: int, bound_mib: int, reader: str
) -> None:
    log = tmp_path / "huge.log"
    _huge_line_log(log, megabytes)
    try:
        result = subprocess.run(
            [sys.executable, "-c", _MEASURE, reader, str(log)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            check=True,
        )
    finally:
        log.unlink()
    measured = json.loads(result.stdout)
    assert measured["peak_mib"] < bound_mib, measured
    assert measured["avail"] == 93.17  # the line before it was read
    assert measured["failure"].startswith("Scheduler hit an exception: xxx")  # its head is kept
    # The line after it is read too: a failed start stays failed even when "ready" follows.
    assert measured["state"] == "failed"


def test_info_gauge_labels_are_checked_like_values() -> None:
    # Found by the fuzz test: 0.5.10's cache_config_info carried page_size="-1" into the sample.
    sample = parse_exposition(
        'sglang:cache_config_info{page_size="-1",num_pages="x",tp_rank="0"} 1'
    )
    assert sample.page_size is None and sample.num_pages is None
    assert sample.rejected == (
        'sglang:cache_config_info{page_size="-1"} (negative)',
        'sglang:cache_config_info{num_pages="x"} (not a number)',
    )
