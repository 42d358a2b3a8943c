"""`kvtop --once` at the widths tickets and terminals have: through the real CLI,
stdout a pipe, with and without COLUMNS and --width. Every per-rank number of the memory table
must come out whole (never cut or replaced by "…"), the title and verdict first, the lines
within the width."""

from __future__ import annotations

import concurrent.futures
import functools
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvtop import fmt
from tests.support.paths import REAL_LOGS, ROOT, STORY_SIDECAR

STORY = Path(
    "tui/kvtop/data/kimi-k25-tp8-eagle3-hicache-0.5.8.log"
)  # relative: no word wider than 80
TIMEOUT = 60
# A number cut by the layout: a digit next to "…" (Rich's mark for a cut cell).
CUT = re.compile(r"\d…|…\d|\d\.…")
# A figure kvtop computed rather than read carries `*` (its footnote says how).
VALUE = re.compile(r"^(—|[−+-]?[\d,]+(\.\d+)?\*?)$")

# The memory table's rows (one-line labels) and the JSON field each shows, in column order.
MEMORY_FIELDS = (
    ("pre-load free", "pre_load_free_gib"),
    ("weights", "weights_gib"),
    ("KV cache", "kv_cache_gib"),
    ("mamba", "mamba_gib"),
    ("other caches", "other_caches_gib"),
    ("draft weights", "draft_weights_gib"),
    ("draft KV", "draft_kv_gib"),
    ("CUDA graphs", "graphs_gib"),
    ("other startup allocations", "startup_other_gib"),
    ("free after startup", "free_after_startup_gib"),
    ("reserve", "reserve_gib"),
    ("host KV cache GB", "host_kv_gb"),
)


def _env(columns: int | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"COLUMNS", "LINES", "FORCE_COLOR"}}
    env["TERM"] = "xterm-256color"
    env["PYTHONIOENCODING"] = "utf-8"
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return env


def kvtop(*args: str | Path, columns: int | None = None) -> subprocess.CompletedProcess[str]:
    """The real command with stdout and stderr as pipes (what `| tee` and CI see)."""
    result = subprocess.run(
        [sys.executable, "-m", "kvtop", *map(str, args)],
        capture_output=True,
        timeout=TIMEOUT,
        env=_env(columns),
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
    out = result.stdout.decode("utf-8")
    return subprocess.CompletedProcess(result.args, result.returncode, out, result.stderr.decode())


def _report(*args: str | Path, columns: int | None = None) -> str:
    result = kvtop("--once", "--no-gpus", "--no-metrics", *args, columns=columns)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


@functools.cache
def _memory_json(log: Path) -> list[dict[str, object]]:
    """The memory table as the JSON report has it, with each rank's host KV cache (one run per
    log: the JSON has no width, and every width's text is held to the same table)."""
    data = json.loads(_report("--json", "--log-file", log))
    hosts = {r["rank"]: r["host_kv_gb"] for r in data["ranks"]}  # type: ignore[index, union-attr]
    rows = []
    for row in data["memory"]:  # type: ignore[union-attr]
        rows.append({**row, "host_kv_gb": hosts.get(row["rank"])})
    return rows


def _expected(memory: list[dict[str, object]]) -> dict[tuple[str, str], str]:
    """(rank, row label) → the cell as the report must print it, whole."""
    fields = [
        (label, name)
        for label, name in MEMORY_FIELDS
        if name not in {"mamba_gib", "other_caches_gib"} or any(m[name] is not None for m in memory)
    ]
    return {
        (str(m["rank"]) or "(single)", label): fmt.number(m[name])  # type: ignore[arg-type]
        + ("*" if m[name] is not None and name in m.get("derived", ()) else "")  # type: ignore[operator]
        for m in memory
        for label, name in fields
    }


def _section(text: str) -> list[str]:
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("Memory per rank"))
    end = next(
        i for i in range(start, len(lines)) if lines[i].startswith("other startup allocations:")
    )
    body = lines[start + 1 : end]
    while body and re.match(r"  \S", body[0]):  # the title's wrapped continuation
        body = body[1:]
    return body


def _split(line: str, labels: set[str]) -> tuple[str, list[str]] | None:
    """A data row: its label (a row label or a rank) and the values after it."""
    tokens = line.split()
    n = len(tokens)
    while n and VALUE.match(tokens[n - 1]):
        n -= 1
    if n == len(tokens):
        return None
    head = " ".join(tokens[:n])
    return (head, tokens[n:]) if head in labels or not labels else None


def memory_cells(text: str, ranks: list[str], fields: list[str]) -> dict[tuple[str, str], str]:
    """The memory table read back from the report, in whichever layout it chose: wide (a line
    per rank, `fields` its columns in order) or transposed (a column per rank, in chunks)."""
    body = _section(text)
    labels = {label for label, _ in MEMORY_FIELDS} | {"free so far"}
    cells: dict[tuple[str, str], str] = {}
    wide = [s for line in body if (s := _split(line, set(ranks))) is not None]
    if wide:
        for rank, values in wide:
            for label, value in zip(fields, values, strict=True):
                cells[(rank, label)] = value
        return cells
    done = 0
    for chunk in "\n".join(body).split("\n\n"):
        rows = [s for line in chunk.split("\n") if (s := _split(line, labels)) is not None]
        width = len(rows[0][1])
        header = " ".join(line for line in chunk.split("\n") if _split(line, labels) is None)
        names = ranks[done : done + width]
        for name in names:  # each rank's tags are in its column's header
            for tag in name.split():
                assert tag in header, (tag, header)
        for label, values in rows:
            assert len(values) == width, (label, values)
            label = "free after startup" if label == "free so far" else label
            for name, value in zip(names, values, strict=True):
                cells[(name, label)] = value
        done += width
    assert done == len(ranks), f"{done} of {len(ranks)} ranks in the table"
    return cells


def _check_memory(log: Path, text: str) -> None:
    memory = _memory_json(log)
    if not memory:
        assert "Memory per rank" not in text
        return
    expected = _expected(memory)
    ranks = list(dict.fromkeys(rank for rank, _ in expected))
    fields = list(dict.fromkeys(label for _, label in expected))
    cells = memory_cells(text, ranks, fields)
    assert cells == expected


def _check_layout(text: str, width: int) -> None:
    assert not CUT.search(text), CUT.search(text)
    too_long = [  # a word wider than the line (a path) keeps a line of its own, whole
        line
        for line in text.split("\n")
        if len(line.rstrip()) > width and len(line.replace(" ·", "").split()) > 1
    ]
    assert not too_long, too_long
    verdict, first = text.split("\n\n")[:2]
    assert verdict.startswith("verdict: "), text[:200]  # the verdict opens the report
    assert first.startswith("kvtop report ·"), text[:200]
    assert text.index("kvtop report") < text.index("sources:")
    words = " ".join(first.split())
    assert " · ready" in words  # the state, in the title's paragraph


# --------------------------------------------------------------------------- the story log

WIDTHS = {
    "pipe, no COLUMNS": ((), None, 80),
    "--width 80": (("--width", "80"), None, 80),
    "--width 200": (("--width", "200"), None, 200),
    "COLUMNS=80": ((), 80, 80),
    "COLUMNS=200": ((), 200, 200),
    "--width 120 over COLUMNS=200": (("--width", "120"), 200, 120),
    "--width 40": (("--width", "40"), None, 40),
}


@pytest.mark.parametrize("case", list(WIDTHS), ids=list(WIDTHS))
def test_story_report_keeps_every_per_rank_value(case: str) -> None:
    args, columns, width = WIDTHS[case]
    text = _report(*args, "--log-file", STORY, columns=columns)
    _check_layout(text, width)
    _check_memory(STORY, text)


@pytest.mark.parametrize("width", [80, 200])
def test_story_values_match_the_sidecar(width: int) -> None:
    """The log's own per-rank numbers (the fixture's sidecar), each whole in the report."""
    text = _report("--width", str(width), "--log-file", STORY)
    ranks = json.loads(STORY_SIDECAR.read_text())["ranks"]
    fields = [
        label for label, name in MEMORY_FIELDS if name not in {"mamba_gib", "other_caches_gib"}
    ]
    cells = memory_cells(text, list(ranks), fields)
    for rank, values in ranks.items():
        draft = values["draft"]
        assert cells[(rank, "pre-load free")] == f"{values['avail_before_weight_load_gb']:.2f}"
        assert cells[(rank, "weights")] == f"{values['weight_mem_usage_gb']:.2f}"
        assert cells[(rank, "KV cache")] == f"{values['kv_size_gb']:.2f}"
        assert cells[(rank, "draft weights")] == f"{draft['weight_mem_usage_gb']:.2f}"
        # sums of logged figures, marked as computed
        assert cells[(rank, "draft KV")] == f"{draft['k_size_gb'] + draft['v_size_gb']:.2f}*"
        graphs = values["cuda_graph_mem_usage_gb"] + draft["cuda_graph_mem_usage_gb"]
        assert cells[(rank, "CUDA graphs")] == f"{graphs:.2f}*"
        assert cells[(rank, "free after startup")] == f"{draft['avail_after_cuda_graph_gb']:.2f}"
        assert cells[(rank, "host KV cache GB")] == f"{values['host_kv_gb']:.2f}"
    assert f"{ranks['TP0']['kv_tokens']:,} tokens" in text


@pytest.mark.parametrize("width", [80, 200])
def test_demo_gpu_table_keeps_its_numbers(width: int) -> None:
    """The GPU table (8 simulated GPUs, 16 columns) at 80 columns: one column per GPU."""
    result = kvtop("--once", "--demo", "--width", str(width))
    assert result.returncode == 0, result.stderr
    text = result.stdout
    _check_layout(text, width)
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("GPUs (GiB"))
    table = "\n".join(lines[start : start + 25])
    assert "NVIDIA RTX PRO 6000 Blackwell Server Edition" in table  # the name, whole
    for row in ("weights", "KV cache", "CUDA graphs"):
        value = {"weights": "71.57", "KV cache": "10.42", "CUDA graphs": "2.16"}[row]
        if width == 80:  # transposed: the row holds all 8 GPUs
            line = next(line for line in table.split("\n") if line.startswith(row + " "))
            assert line.split()[-8:] == [value] * 8
        else:
            assert table.count(f" {value} ") >= 8


# --------------------------------------------------------------------------- fixture logs

LOGS = sorted(REAL_LOGS.glob("*.log"))


class Prefetched:
    """The reports the module's selected fixture-log tests ask for, each a real `kvtop --once`
    run, started two at a time in the tests' order as the first of them begins: each test reads
    its own run's output without waiting for the runs of the tests before it."""

    def __init__(self, pool: concurrent.futures.ThreadPoolExecutor, wanted: list[tuple[Path, int]]):
        self.texts: dict[tuple[Path, int], concurrent.futures.Future[str]] = {}
        self.memory: dict[Path, concurrent.futures.Future[list[dict[str, object]]]] = {}
        for log, width in wanted:
            if log not in self.memory:  # one JSON run per log, before its first text
                self.memory[log] = pool.submit(_memory_json, log)
            self.texts[(log, width)] = pool.submit(_fixture_report, log, width)

    def text(self, log: Path, width: int) -> str:
        if (log, width) not in self.texts:
            return _fixture_report(log, width)
        if log in self.memory:
            self.memory[log].result()  # _memory_json's one run for the log: cached from here
        return self.texts[(log, width)].result()


def _fixture_report(log: Path, width: int) -> str:
    return _report("--width", str(width), "--log-file", log.relative_to(ROOT))


@pytest.fixture(scope="module")
def prefetched(request: pytest.FixtureRequest) -> Iterator[Prefetched]:
    wanted = [
        (item.callspec.params["log"], item.callspec.params["width"])
        for item in request.session.items
        if item.module is request.module
        and getattr(item, "originalname", None) == "test_fixture_logs_keep_the_memory_table"
    ]
    pool = concurrent.futures.ThreadPoolExecutor(2)
    try:
        yield Prefetched(pool, wanted)
    finally:
        pool.shutdown(cancel_futures=True)


@pytest.mark.parametrize("log", LOGS, ids=[p.name[:40] for p in LOGS])
@pytest.mark.parametrize("width", [80, 200])
def test_fixture_logs_keep_the_memory_table(log: Path, width: int, prefetched: Prefetched) -> None:
    """Hybrid pools (mamba), DP/EP/attention-CP rank tags, two-node logs: every number of the
    JSON's memory table appears whole in the text, at its rank."""
    text = prefetched.text(log, width)
    assert not CUT.search(text)
    _check_memory(log, text)


# --------------------------------------------------------------------------- --width


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--once", "--demo", "--width", "39"], "--width takes columns from 40 to 1000"),
        (["--once", "--demo", "--width", "1001"], "--width takes columns from 40 to 1000"),
        (["--once", "--demo", "--width", "wide"], "--width"),
        (["--once", "--json", "--demo", "--width", "80"], "--width goes with --once"),
        (["--demo", "--width", "80"], "--width goes with --once"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else v,
)
def test_width_usage_errors(args: list[str], needle: str) -> None:
    result = kvtop(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    assert needle in result.stderr and "usage: kvtop" in result.stderr
    assert "Traceback" not in result.stderr
