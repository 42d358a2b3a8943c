"""One verdict in four views: each row sets up a fault on a real host, then asks the live view,
`kvtop --once --json`, `kvtop --check` and the exporter for their judgement; all four must give
the same level and the same alerts.

The host is the fault matrix's (tests/support/fault_host.py): fake GPUs through the real
nvidia-ml-py, a real SGLang-like server on loopback that wants an API key, the story log. The
live view is the real KvtopApp under Pilot; the other three are the installed `kvtop` command
in a child process (`--once --json`, `--check`, `--once --export`), on the same sources.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from kvtop.live.app import KvtopApp
from kvtop.model.snapshot import Snapshot
from tests.support.fake_nvml import eight_gpus, gcc_path
from tests.support.fault_host import API_KEY, FaultHost, wait_screen
from tests.support.sglang_http import Deployment

pytestmark = pytest.mark.skipif(gcc_path() is None, reason="gcc not found: no fake NVML")

KVTOP = Path(sys.executable).with_name("kvtop")
EXIT_LEVEL = {0: "ok", 1: "warning", 2: "critical", 3: "unknown"}
GLYPH = {"ok": "", "warning": "▲", "critical": "✖"}


@dataclass(frozen=True)
class Row:
    id: str
    setup: Callable[[FaultHost], None]
    level: str
    alerts: tuple[str, ...]  # the verdict's alert kinds, worst first
    check: str  # a regex `kvtop --check`'s line must match
    no_metrics: bool = False  # kvtop run with --no-metrics (the log and NVML only)


def _status(path: str, code: int) -> Callable[[FaultHost], None]:
    def setup(host: FaultHost) -> None:
        host.server.switches.status[path] = code

    return setup


def _unreachable(host: FaultHost) -> None:
    host.server.pause()


def _gone(host: FaultHost) -> None:
    """Killed without a word in its log: no process on any GPU, the memory released."""
    host.server.pause()
    host.state.procs = []
    host.state.gpus = eight_gpus(used_mib=520)
    host.write_nvml()


def _slow_metrics(host: FaultHost) -> None:
    host.server.switches.delay_by_path = {"/metrics": 8.0}


def _memory_above_total(host: FaultHost) -> None:
    host.state.gpus[6]["used_mib"] = 143_772  # one MiB above the H200's 143,771
    host.state.absent = [
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
    ]
    host.write_nvml()


def _deployment(**changes: object) -> Callable[[FaultHost], None]:
    def setup(host: FaultHost) -> None:
        host.deployment = Deployment(version="0.5.8", **changes)  # type: ignore[arg-type]
        host.server.restart(host.deployment)

    return setup


ROWS = (
    Row("healthy", lambda host: None, "ok", (), r"^KVTOP OK - ready .*8 GPUs fine"),
    # /metrics answers 404 while the log's server_args say enable_metrics=True: --url reaches
    # another server or service (a server without --enable-metrics, SGLang's default, is no
    # alert: tests/unit/test_alert_rule.py).
    Row(
        "metrics-404-against-the-log",
        _status("/metrics", 404),
        "warning",
        ("source_down",),
        r"^KVTOP WARNING - metrics degraded: http://127\.0\.0\.1:\d+/metrics answers 404, but "
        r"the log's server_args say enable_metrics=True",
    ),
    # GPU 6's used memory above its total, on a driver without the clocks event reasons (a
    # missing feature, tolerated on every GPU): the memory is the cause named.
    Row(
        "memory-above-total",
        _memory_above_total,
        "critical",
        ("gpu_lost",),
        r"^KVTOP CRITICAL - GPU 6 \(TP6\): its memory cannot be read \(NVML gave impossible "
        r"numbers: memory_used",
    ),
    # The server answers, but not with numbers: a warning, never "unreachable".
    Row(
        "metrics-unauthorised",
        _status("/metrics", 401),
        "warning",
        ("source_down",),
        r"^KVTOP WARNING - metrics off: .*API key",
    ),
    Row(
        "metrics-server-error",
        _status("/metrics", 503),
        "warning",
        ("source_down",),
        r"^KVTOP WARNING - metrics degraded",
    ),
    # Connected, but /metrics answers after 8 s (the limit is 5 s) while the ranks' processes
    # run on every GPU: slow, a warning, never "server stopped or unreachable".
    Row(
        "metrics-slow",
        _slow_metrics,
        "warning",
        ("source_down",),
        r"^KVTOP WARNING - metrics degraded: http://127\.0\.0\.1:\d+/metrics did not answer "
        r"within 5 s",
    ),
    # No answer at all after the log said ready: critical everywhere.
    Row(
        "server-unreachable",
        _unreachable,
        "critical",
        ("server_down",),
        r"^KVTOP CRITICAL - server stopped or unreachable after the log said ready",
    ),
    # The log still says ready; NVML says its processes are gone and the memory released
    # (kvtop without /metrics: only NVML can tell).
    Row(
        "server-gone",
        _gone,
        "critical",
        ("server_stopped",),
        r"^KVTOP CRITICAL - server stopped: its processes are gone from GPUs 0–7",
        no_metrics=True,
    ),
    # 94.9999 % is a warning, and no view writes it as the 95 % it is under.
    Row(
        "kv-just-under-critical",
        _deployment(num_used_tokens=(151_313,)),
        "warning",
        ("kv_usage",),
        r"^KVTOP WARNING - KV cache >94\.99% full .*kv_usage=94\.99\d*%;85;95",
    ),
    # Another server's /metrics: the sources disagree.
    Row(
        "another-server",
        _deployment(max_total_num_tokens=655_360),
        "warning",
        ("mismatch", "mismatch"),  # /metrics and /server_info each say another pool
        r"^KVTOP WARNING - metrics say 655,360 tokens.*; /server_info says 655,360",
    ),
)


def kvtop(host: FaultHost, row: Row, *args: str) -> subprocess.Popen[str]:
    """The installed command on the host's sources (the fake GPUs, the log, the server),
    started; `done()` waits for it."""
    return subprocess.Popen(
        [
            str(KVTOP),
            "--log-file",
            str(host.log),
            *(["--no-metrics"] if row.no_metrics else ["--url", host.server.url]),
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=host.command_env(),
    )


def done(run: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    try:
        out, err = run.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        run.kill()
        run.communicate()
        raise
    return subprocess.CompletedProcess(run.args, run.returncode, out, err)


def exported(body: str) -> tuple[str, list[str]]:
    """The exporter's verdict level and its alert kinds."""
    levels = re.findall(r'^kvtop_verdict\{level="(\w+)"\} 1(?:\.0)?$', body, re.M)
    kinds = re.findall(r'^kvtop_alert\{alert="(\w+)",severity="(\w+)"', body, re.M)
    assert len(levels) == 1, body
    return levels[0], [kind for kind, _ in kinds]


def settled(row: Row) -> Callable[[str, Snapshot | None], bool]:
    """The live view's verdict at the row's level with the row's alerts, its header in that
    level's glyph, and every source past its first reading (the first frame judges only what
    arrived)."""
    level = row.level

    def check(text: str, snap: Snapshot | None) -> bool:
        if snap is None or snap.verdict.level != level:
            return False
        if tuple(a.kind for a in snap.verdict.alerts) != row.alerts:
            return False
        if any(s.detail and "waiting for the first" in s.detail for s in snap.sources):
            return False
        glyph = GLYPH[level]
        return (glyph in text) if glyph else ("✖" not in text and "▲ ready" not in text)

    return check


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
async def test_one_verdict_in_four_views(row: Row, host: FaultHost) -> None:
    row.setup(host)
    # The three commands run while the live view does (the sources stand still once set up):
    # each is judged on its own, in the time of one.
    once_run = kvtop(host, row, "--once", "--json")
    check_run = kvtop(host, row, "--check")
    body_run = kvtop(host, row, "--once", "--export")

    # 1. The live view: the real app on the real session.
    try:
        session = host.session(metrics=not row.no_metrics)
        app = KvtopApp(session, source_label="verdict matrix", host_name="gpu-host")
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_screen(app, pilot, f"{row.id} judged {row.level}", settled(row), 20)
            live = app.state.latest
            assert live is not None
            assert tuple(a.kind for a in live.verdict.alerts) == row.alerts
            assert app.state.status is not None and app.state.status.level == row.level
    finally:
        once, check, body = (done(run) for run in (once_run, check_run, body_run))

    # 2. --once --json: the verdict, and the level --check exits with.
    assert once.returncode == 0, once.stderr
    data = json.loads(once.stdout)
    verdict = data["verdict"]
    assert verdict["level"] == row.level
    assert [a["name"] for a in verdict["alerts"]] == list(row.alerts)
    assert all(a["since"] and a["summary"] for a in verdict["alerts"])

    # 3. --check: the plugin's state and exit status.
    assert EXIT_LEVEL[check.returncode] == row.level, check.stdout + check.stderr
    assert re.search(row.check, check.stdout), check.stdout
    assert verdict["summary"] in check.stdout  # the same words

    # 4. The exporter's body.
    assert body.returncode == 0, body.stderr
    assert exported(body.stdout) == (row.level, list(row.alerts))

    # Never a negative memory figure, in the JSON or the exporter.
    for gpu in data["gpus"]:
        for name, value in gpu["breakdown"].items():
            assert value is None or value >= 0, (row.id, gpu["index"], name, value)
    for line in body.stdout.splitlines():
        if line.startswith("kvtop_gpu_memory_bytes"):
            assert float(line.rsplit(" ", 1)[1]) >= 0, line
    assert API_KEY not in once.stdout + check.stdout + body.stdout
