"""Measure a terminal program in a real tmux pane: first frame, CPU of its process tree, RSS.

Shared by bench_tui.py (kvtop against its budgets) and bench_vs_nvitop.py (kvtop against
nvitop on the same fake GPUs), with the fake GPUs' state writer: numbers that move every second.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.fake_nvml.build import STATE_ENV, build_fake_nvml, write_state  # noqa: E402
from tests.support.sglang_http import FakeSGLang  # noqa: E402
from tests.support.tmux_tools import Tmux  # noqa: E402

KVTOP = Path(sys.executable).with_name("kvtop")
STORY_LOG = ROOT / "tui" / "kvtop" / "data" / "kimi-k25-tp8-eagle3-hicache-0.5.8.log"
# An overview row: `▶ 0   TP0  ▚███▓▓▒…   88.2/95.6    7.3  35%  45C  300W` (rank `—` if none).
KVTOP_ROW = re.compile(r"^\S?\s*(?P<gpu>\d+)\s+\S+\s.*?\d+\.\d/\d+\.\d")

WIDTH, HEIGHT = 120, 40
POLL_S = 0.02
FIRST_FRAME_TIMEOUT_S = 30.0
SETTLE_S = 2.0
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class Figures:
    label: str
    first_frame_s: float | None
    cpu_pct: float | None
    rss_mb: float | None
    note: str = ""


def gpu_state(count: int, tick: int) -> dict[int, dict[str, object]]:
    """The story log's host (8 × RTX PRO 6000 Blackwell and more), numbers moving per tick."""
    return {
        i: {
            "name": "NVIDIA RTX PRO 6000 Blackwell",
            "uuid": f"GPU-{i:08x}-0000-0000-0000-000000000000",
            "bus": f"00000000:{i // 8:02X}:{i % 8:02X}.0",
            "total_mib": 97887,
            "used_mib": 89800 + (tick * 37 + i * 11) % 300,
            "reserved_mib": 512,
            "util": (40 + tick * 7 + i * 3) % 100,
            "mem_util": (20 + tick * 5 + i) % 100,
            "temp": 45 + (tick + i) % 20,
            "power_mw": 250000 + ((tick * 13 + i * 7) % 300) * 1000,
            "limit_mw": 600000,
        }
        for i in range(count)
    }


class StateWriter(threading.Thread):
    """Rewrites the fake NVML state file once a second until stopped."""

    def __init__(
        self,
        path: Path,
        count: int,
        procs: tuple[tuple[int, int, int | None], ...] = (),
        delays: tuple[tuple[str, int], ...] = (),
    ) -> None:
        super().__init__(daemon=True)
        self.path, self.count, self.procs, self.delays = path, count, procs, delays
        self.stop = threading.Event()
        self._write(0)

    def _write(self, tick: int) -> None:
        write_state(
            self.path, gpus=gpu_state(self.count, tick), procs=self.procs, delays=self.delays
        )

    def run(self) -> None:
        tick = 0
        while not self.stop.wait(1.0):
            tick += 1
            self._write(tick)


def rows_seen(pattern: re.Pattern[str], count: int, limit: int) -> Callable[[str], bool]:
    """A first-frame test: the rows of GPUs 0..min(count, limit)-1 are all on screen."""
    want = set(range(min(count, limit)))

    def seen(screen: str) -> bool:
        found = {int(m["gpu"]) for line in screen.splitlines() if (m := pattern.match(line))}
        return want <= found

    return seen


def compile_bytecode(*folders: Path) -> None:
    """Write the bytecode of every module under FOLDERS, as pip does when it installs a
    package: a checkout run with PYTHONDONTWRITEBYTECODE set (CI and this project's shells set
    it) would otherwise compile its changed modules from source at every start, and the first
    frame would measure the compiler."""
    import compileall

    for folder in folders:
        compileall.compile_dir(str(folder), quiet=1)


def missing_tools() -> str | None:
    if shutil.which("tmux") is None:
        return "tmux not found: install tmux to run this benchmark"
    if not KVTOP.exists():
        return f"no kvtop console script next to {sys.executable} (./scripts/test.sh sets it up)"
    return None


class FakeHost:
    """A simulated GPU host for the panes: scratch folder, the fake NVML library, a copy of
    the story log, a loopback SGLang /metrics server and a private tmux server, all removed
    on exit (Ctrl-C included)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._stack = contextlib.ExitStack()

    def __enter__(self) -> FakeHost:
        stack = self._stack
        self.work = Path(tempfile.mkdtemp(prefix=f"{self.prefix}-"))
        stack.callback(shutil.rmtree, self.work, ignore_errors=True)
        self.lib = build_fake_nvml(self.work / "lib")
        self.log = self.work / STORY_LOG.name
        shutil.copyfile(STORY_LOG, self.log)
        tmux_path = shutil.which("tmux")
        assert tmux_path is not None
        self.tmux = Tmux(tmux_path, f"{self.prefix}-{os.getpid()}", self.work)
        stack.callback(self.tmux.kill_server)
        self.server = stack.enter_context(FakeSGLang())
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def kvtop_argv(self) -> list[str]:
        """kvtop's full live view: the log followed, /metrics scraped, a 1 s refresh."""
        return [
            str(KVTOP),
            "--log-file",
            str(self.log),
            "--url",
            self.server.url,
            "--interval",
            "1",
        ]

    @contextlib.contextmanager
    def gpus(
        self,
        count: int,
        procs: tuple[tuple[int, int, int | None], ...] = (),
        delays: tuple[tuple[str, int], ...] = (),
    ) -> Iterator[dict[str, str]]:
        """`count` fake GPUs whose numbers move every second, with `procs` ((gpu, pid, MiB)) as
        their processes and `delays` ((NVML function, ms)) as the driver's slow calls; yields
        the panes' environment."""
        state = self.work / f"state-{count}"
        writer = StateWriter(state, count, procs, delays)
        writer.start()
        try:
            yield {"LD_LIBRARY_PATH": str(self.lib.parent), STATE_ENV: str(state)}
        finally:
            writer.stop.set()
            writer.join()


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()  # fields from 3 (state) on


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields:
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def tree_cpu_s(pid: int) -> float:
    """utime+stime+cutime+cstime of PID and its live descendants, in seconds."""
    ticks = 0
    for p in [pid, *descendants(pid)]:
        fields = _stat_fields(p)
        if fields:  # fields[11..14] are utime, stime, cutime, cstime (stat fields 14..17)
            ticks += sum(int(f) for f in fields[11:15])
    return ticks / CLK_TCK


def tree_rss_mb(pid: int) -> float:
    total_kb = 0
    for p in [pid, *descendants(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kb += int(line.split()[1])
        except OSError:
            pass
    return total_kb * 1024 / 1e6


def alive(pid: int) -> bool:
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def thread_states(pid: int) -> str:
    """`state:wchan` of each thread, to see where a process that will not exit sits."""
    out = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
        try:
            state = task.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0]
            out.append(f"{state}:{task.joinpath('wchan').read_text() or '-'}")
        except OSError:
            pass
    return "threads " + " ".join(out)


def ready_to_run() -> str | None:
    """Why the benchmarks cannot run here (None: they can); SIGTERM and SIGHUP then end a run
    like Ctrl-C, so every FakeHost cleans up after itself."""
    why = missing_tools()
    if why is None:
        signal.signal(signal.SIGTERM, _interrupt)
        signal.signal(signal.SIGHUP, _interrupt)
    return why


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def launch(tmux: Tmux, work: Path, name: str, argv: list[str], env: dict[str, str]) -> Path:
    """Start `argv` with `env` in a detached WIDTH×HEIGHT tmux session NAME; returns the file
    the process writes its pid to (exec replaces the shell, so it is the program's pid)."""
    pid_file = work / f"{name}.pid"
    settings = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    core = f"env {settings} {' '.join(map(shlex.quote, argv))}"
    script = f"echo $$ > {shlex.quote(str(pid_file))}; exec {core}"
    size = ["-x", str(WIDTH), "-y", str(HEIGHT)]
    tmux.run("new-session", "-d", "-s", name, *size, f"sh -c {shlex.quote(script)}")
    return pid_file


def wait_first_frame(
    tmux: Tmux, name: str, first_frame: Callable[[str], bool]
) -> tuple[float | None, str]:
    """(time.monotonic() when the pane first showed a screen `first_frame` accepts, or None if
    it never did within FIRST_FRAME_TIMEOUT_S or the program died; the last screen)."""
    start = time.monotonic()
    screen = ""
    while time.monotonic() - start < FIRST_FRAME_TIMEOUT_S:
        screen = tmux.capture(name)
        if first_frame(screen):
            return time.monotonic(), screen
        if "Traceback" in screen or "Pane is dead" in screen:
            break
        time.sleep(POLL_S)
    return None, screen


def measure(
    tmux: Tmux,
    work: Path,
    label: str,
    argv: list[str],
    env: dict[str, str],
    first_frame: Callable[[str], bool],
    secs: float,
) -> Figures:
    """Run `argv` in a WIDTH×HEIGHT pane: time to the first screen `first_frame` accepts, then
    CPU of the process tree over `secs` (after SETTLE_S), and its RSS; then close the pane."""
    name = re.sub(r"\W", "-", label)
    start = time.monotonic()
    pid_file = launch(tmux, work, name, argv, env)
    first, screen = wait_first_frame(tmux, name, first_frame)
    first = None if first is None else first - start
    pid = int(pid_file.read_text()) if pid_file.exists() else None
    try:
        if first is None or pid is None:
            tail = "\n".join(screen.rstrip().splitlines()[-8:])
            return Figures(label, None, None, None, f"no first frame; pane ends:\n{tail}")
        time.sleep(SETTLE_S)
        before_screen = tmux.capture(name)
        cpu0, t0 = tree_cpu_s(pid), time.monotonic()
        time.sleep(secs)
        cpu1, t1 = tree_cpu_s(pid), time.monotonic()
        rss = tree_rss_mb(pid)
        changed = tmux.capture(name) != before_screen
        note = "" if changed else "screen did not change during the window"
        if not alive(pid):
            note = "the program exited during the window"
        return Figures(label, first, 100 * (cpu1 - cpu0) / (t1 - t0), rss, note)
    finally:
        tmux.run("kill-session", "-t", name, check=False)  # the terminal goes away: SIGHUP
        if pid is not None:
            deadline = time.monotonic() + 3
            while alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if alive(pid):
                print(f"  ({label}: outlived its terminal by 3 s: {thread_states(pid)}; killed)")
                os.kill(pid, signal.SIGKILL)
