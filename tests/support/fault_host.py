"""A healthy kvtop host for the fault matrix: fake GPUs, a real SGLang-like server, a real log.

Everything is real except the GPU driver: the fake `libnvidia-ml.so.1` (C, tests/support/fake_nvml)
is loaded into this process under its soname before pynvml looks for the library, so the real
nvidia-ml-py bindings talk to it in-process (the state file is re-read on every NVML call).
Loading it is one-way for the process: afterwards pynvml here finds the fake, and with no state
file named the fake answers "driver not loaded". No other in-process test polls NVML (they use
`nvml=False` or a child process), so the rest of the suite is unaffected.

`FaultHost.bump()` moves a number in every source (a GPU's memory, the server's used tokens, a
new batch line in the log) so a test can check that the sources a fault did not touch keep
updating.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import re
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from rich.console import Console

from kvtop.live.app import KvtopApp
from kvtop.model.snapshot import Snapshot
from kvtop.model.status.levels import DEFAULT_THRESHOLDS
from kvtop.report.check import CheckResult, check
from kvtop.report.json_report import snapshot_json
from kvtop.report.text import render_snapshot
from kvtop.session import Options, Session
from kvtop.sources import metrics
from kvtop.sources.log_text import LogUnreadable
from tests.support.fake_nvml import STATE_ENV, build_fake_nvml, eight_gpus, write_state
from tests.support.sglang_http import Deployment, FakeSGLang
from tests.support.tui_support import screen_text

ROOT = Path(__file__).resolve().parents[2]
STORY_LOG = ROOT / "tui" / "kvtop" / "data" / "kimi-k25-tp8-eagle3-hicache-0.5.8.log"
# The key the server wants; no output of any fault may contain it.
API_KEY = "sk-kvtop-fault-matrix-7f3a9c2e51d04b8e"
BATCH_LINE = (
    "[2026-02-27 09:09:{sec:02d} TP0] Decode batch, #running-req: 12, #token: {tokens}, token "
    "usage: 0.30, accept len: 2.81, accept rate: 0.60, cuda graph: True, gen throughput "
    "(token/s): 512.34, #queue-req: 0, \n"
)
INTERVAL_S = 0.1


_preloaded: Path | None = None


def preload_fake_nvml(directory: Path) -> Path:
    """Build the fake and load it under its soname (once per process); returns the library."""
    global _preloaded
    if _preloaded is None:
        lib = build_fake_nvml(directory)
        ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)
        _preloaded = lib
    return _preloaded


def healthy_gpus() -> dict[int, dict[str, object]]:
    """Eight H200s in use as the story's ranks leave them (NVML agrees with the log)."""
    return eight_gpus(used_mib=135_700)


@dataclass
class NvmlState:
    """What the fake driver answers; `FaultHost.nvml(...)` rewrites the file from it."""

    gpus: dict[int, dict[str, object]] = field(default_factory=healthy_gpus)
    errors: list[tuple[str, int | None, int]] = field(default_factory=list)
    absent: list[str] = field(default_factory=list)
    delays: list[tuple[str, int]] = field(default_factory=list)
    init_error: int | None = None
    procs: list[tuple[int, int, int | None]] = field(
        default_factory=lambda: [(i, 4_000_000 + i, 135_000) for i in range(8)]
    )


class FaultServer(FakeSGLang):
    """FakeSGLang that can also go away (its port closed: connection refused) and come back on
    the same port, and serve a given /server_info body."""

    server_info_override: object = None
    down = False

    def pause(self) -> None:
        """The server process is gone: open keep-alive connections drop, the port refuses."""
        self.down = True
        self._port = self._server.server_address[1]
        self._server.shutdown()
        self._server.server_close()

    def resume(self) -> None:
        if getattr(self, "_port", None) is None:
            return
        old = self._server
        self._server = type(old)(("127.0.0.1", self._port), old.RequestHandlerClass)
        self._port = None
        self.down = False
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def _handle(self, req) -> None:  # type: ignore[no-untyped-def]
        if self.down:  # a connection kept alive from before: the peer hangs up
            req.close_connection = True
            with contextlib.suppress(OSError):
                req.connection.shutdown(socket.SHUT_RDWR)
            return
        path = req.path.split("?", 1)[0]
        body = self.server_info_override
        if body is not None and path in ("/server_info", "/get_server_info"):
            self.requests.append((path, {k.lower(): v for k, v in req.headers.items()}))
            self._send(req, 200, json.dumps(body).encode(), "application/json")
            return
        super()._handle(req)


class FaultHost:
    """One healthy deployment in TMP; `session()` builds the real Session kvtop would run."""

    def __init__(self, tmp: Path, lib: Path) -> None:
        self.tmp = tmp
        self.lib = lib
        self.state_path = tmp / "nvml.state"
        self.state = NvmlState()
        self.write_nvml()
        os.environ[STATE_ENV] = str(self.state_path)
        self.story = STORY_LOG
        self.log = tmp / "sglang.log"
        shutil.copyfile(STORY_LOG, self.log)
        self.journal: Path | None = None
        self.journal_at = 0
        self.journal_run = ("sglang-kimi.service", 2)  # (unit, invocation) of the running server
        self.session_ref: Session | None = None
        self.monkeypatch: pytest.MonkeyPatch | None = None
        self._fetch_s = metrics.FETCH_TIMEOUT_S  # kvtop's own limits (see fetch_limit)
        self._nvml_call_s: float | None = None
        self.foreign: subprocess.Popen[bytes] | None = (
            None  # another user's process, if a row starts one
        )
        self.deployment = Deployment(version="0.5.8")
        self.server = FaultServer(self.deployment)
        self.server.switches.api_key = API_KEY
        self.server.restart(self.deployment)
        self._bumps = 0
        self.outputs: list[str] = []  # every screen and report seen: searched for the key

    def __enter__(self) -> FaultHost:
        self.server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.__exit__(*exc)

    # -- sources ---------------------------------------------------------------------------------
    @staticmethod
    def healthy_gpus() -> dict[int, dict[str, object]]:
        return healthy_gpus()

    def write_nvml(self) -> None:
        s = self.state
        write_state(
            self.state_path,
            s.gpus,
            procs=s.procs,
            errors=s.errors,
            absent=s.absent,
            delays=s.delays,
            init_error=s.init_error,
        )

    def command_env(self) -> dict[str, str]:
        """The environment for the installed `kvtop` on this host: the fake driver, its state
        file, the server's API key."""
        return {
            **os.environ,
            "LD_LIBRARY_PATH": str(self.lib.parent),
            STATE_ENV: str(self.state_path),
            "SGLANG_API_KEY": API_KEY,
        }

    def options(self, **overrides: object) -> Options:
        base: dict[str, object] = {
            "log_file": str(self.log),
            "url": self.server.url,
            "api_key": API_KEY,
            "interval_s": INTERVAL_S,
            "process_interval_s": 0.2,
        }
        base.update(overrides)
        return Options(**base)  # type: ignore[arg-type]

    def session(self, **overrides: object) -> Session:
        return Session(self.options(**overrides))

    # -- kvtop's limits, shortened for a fault --------------------------------------------------
    # A hung server or driver call is cut by kvtop after its limit (5 s for a fetch, 2 s for an
    # NVML call). A row proves the cut, what the screen says and the recovery through the same
    # code with a shorter limit, set before the fault comes and put back when it goes (a
    # healthy source on a loaded machine never meets the short one). A fetch or poll keeps the
    # limit it began with, so the fault waits until the one in flight when the limit changed is
    # back: two new readings, the second asked for after the first was in.
    async def shorten_fetch(self, seconds: float) -> None:
        """The limit of one fetch of /metrics or /server_info, for the live session's client
        and every session built from now on (the --once and --check reports)."""
        assert self.monkeypatch is not None and self.session_ref is not None
        self.monkeypatch.setattr(metrics, "FETCH_TIMEOUT_S", seconds)
        server = self.session_ref.server
        assert server.source is not None, "no client yet: the live session has not scraped"
        server.source.timeout_s = seconds
        await _two_new(lambda: server.good_at, "scrapes under the shorter fetch limit")

    def restore_fetch(self) -> None:
        assert self.monkeypatch is not None and self.session_ref is not None
        self.monkeypatch.setattr(metrics, "FETCH_TIMEOUT_S", self._fetch_s)
        source = self.session_ref.server.source
        assert source is not None
        source.timeout_s = self._fetch_s

    async def shorten_nvml_call(self, seconds: float) -> None:
        """The limit of one NVML poll in the live session."""
        session = self.session_ref
        assert session is not None and session.nvml is not None
        if self._nvml_call_s is None:
            self._nvml_call_s = session.nvml.call_timeout_s
        session.nvml.call_timeout_s = seconds
        await _two_new(lambda: session.latest_nvml, "NVML polls under the shorter call limit")

    def restore_nvml_call(self) -> None:
        assert self.session_ref is not None and self.session_ref.nvml is not None
        assert self._nvml_call_s is not None
        self.session_ref.nvml.call_timeout_s = self._nvml_call_s

    def bump(self, sources: Iterable[str] = ("nvml", "metrics", "log")) -> dict[str, int]:
        """Move one number in each of SOURCES (the others keep their fault); returns what each
        now says."""
        sources = set(sources)
        self._bumps += 1
        n = self._bumps
        gpu7_mib = 120000 + 1111 * n
        gpus = self.state.gpus
        if 7 in gpus:
            gpus[7]["used_mib"] = gpu7_mib
        if "nvml" in sources:
            self.write_nvml()
        tokens = 50000 + 1000 * n
        self.deployment = Deployment(
            version=self.deployment.version,
            max_total_num_tokens=self.deployment.max_total_num_tokens,
            num_used_tokens=(tokens,),
        )
        if "metrics" in sources:
            self.server.restart(self.deployment)
        log_tokens = 60000 + 7 * n
        if "log" in sources and self.log.exists():
            with self.log.open("a") as f:
                f.write(BATCH_LINE.format(sec=10 + n % 50, tokens=log_tokens))
        return {"gpu7_mib": gpu7_mib, "metrics_tokens": tokens, "log_tokens": log_tokens}


async def _two_new(read: Callable[[], object], what: str, timeout_s: float = 10.0) -> None:
    """Until what READ returns has changed twice (each reading is a new object)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    seen, changes = read(), 0
    while changes < 2:
        if loop.time() > deadline:
            raise AssertionError(f"no two {what} within {timeout_s:g} s")
        await asyncio.sleep(0.01)
        now = read()
        if now is not seen:
            seen, changes = now, changes + 1


# -- what a snapshot says ---------------------------------------------------------------------
def source_state(snapshot: Snapshot, name: str) -> tuple[str, str | None]:
    for health in snapshot.sources:
        if health.name == name:
            return health.state, health.detail
    raise KeyError(name)


def gpu7_used_mib(snapshot: Snapshot) -> int | None:
    for gpu in snapshot.gpus:
        if gpu.sample.index == 7 and gpu.sample.status == "ok":
            return round(gpu.sample.used_gib * 1024)
    return None


def metrics_tokens(snapshot: Snapshot) -> int | None:
    m = snapshot.metrics
    return None if m is None else m.used_tokens


def log_tokens(snapshot: Snapshot) -> int | None:
    batch = snapshot.analysis.startup.latest_batch
    stats = next(iter(batch.values()), None)
    return None if stats is None else stats.tokens


FRESH: Mapping[str, Callable[[Snapshot, dict[str, int]], bool]] = {
    "nvml": lambda s, b: gpu7_used_mib(s) == b["gpu7_mib"],
    "metrics": lambda s, b: metrics_tokens(s) == b["metrics_tokens"],
    "log": lambda s, b: log_tokens(s) == b["log_tokens"],
}


# -- the app ----------------------------------------------------------------------------------
async def wait_screen(
    app: KvtopApp,
    pilot,
    what: str,
    predicate: Callable[[str, Snapshot | None], bool],
    timeout_s: float = 10.0,
    outputs: list[str] | None = None,
) -> str:
    """Poll the rendered screen (and the app's latest snapshot) until predicate holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    text = ""
    while True:
        await pilot.pause(0.01)
        text = screen_text(app)
        if outputs is not None:
            outputs.append(text)
        if "Traceback" in text:
            raise AssertionError(f"traceback on screen:\n{text}")
        if predicate(text, app.state.latest):
            return text
        if loop.time() > deadline:
            raise AssertionError(f"no {what} within {timeout_s:g} s; screen:\n{text}")


async def check_report(options: Options) -> CheckResult:
    """`kvtop --check` for OPTIONS, as the command builds it (one round, default thresholds)."""
    session = Session(options)
    try:
        snapshot = await session.collect_once()
    finally:
        await session.close()
    return check(snapshot, DEFAULT_THRESHOLDS)


async def once_reports(options: Options) -> tuple[str, dict[str, object]]:
    """The `--once` report (text and JSON) for OPTIONS, as `kvtop --once` builds them."""
    session = Session(options)
    try:
        snapshot = await session.collect_once()
    except LogUnreadable as exc:  # kvtop --once prints this and exits 1
        return f"kvtop: {exc}", {}
    finally:
        await session.close()
    console = Console(width=120, record=True, file=open(os.devnull, "w"), highlight=False)  # noqa: SIM115
    console.print(render_snapshot(snapshot))
    text = console.export_text()
    console.file.close()
    return text, json.loads(json.dumps(snapshot_json(snapshot)))


def mark_count(text: str, mark: str, name: str) -> bool:
    """The status line's marker for a source: ● ok, ◐ degraded, ○ off."""
    return re.search(re.escape(mark) + re.escape(name) + r"\b", text) is not None


def all_text(values: Iterable[object]) -> str:
    return "\n".join(v if isinstance(v, str) else json.dumps(v) for v in values)
