"""The installed `kvtop` console script, driven for real in a tmux pane.

Each test starts `kvtop --demo --demo-speed 20` in a detached session on the module's private
tmux server (`tmux -L kvtop-test_tui_tmux-<pid>`, tests/conftest.py), types keys with
`send-keys` and reads the screen with `capture-pane -p`, polling against a deadline instead of
sleeping. The exit status travels through a file: the pane runs
`sh -c 'kvtop ...; echo $? > STATUS'`.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
import time
from pathlib import Path

import pytest

from tests.support.tmux_tools import (  # POLL_S: wait_for_file and the exit checks poll alike
    POLL_S,
    SGR,
    Tmux,
    alive,
    descendants,
    foreground_colours,
    is_grey,
)

TMUX = shutil.which("tmux")
KVTOP_SCRIPT = Path(sys.executable).with_name("kvtop")
DEADLINE_S = 20.0
GONE_LIMIT_S = 10.0  # how long processes may take to end once their terminal is gone

pytestmark = [
    pytest.mark.skipif(TMUX is None, reason="tmux is not installed: cannot drive the terminal UI"),
    pytest.mark.skipif(
        not KVTOP_SCRIPT.exists(), reason=f"no kvtop console script next to {sys.executable}"
    ),
]

# An overview row: `▶ 0   TP0  ▚███▓▓▒…   88.2/95.6    7.3  35%  45C  300W`.
GPU_ROW = re.compile(r"^\S?\s*(?P<gpu>\d+)\s+TP(?P<rank>\d+)\s.*?\d+\.\d/\d+\.\d")
READY = re.compile(r"(^\s*|·\s+)ready\b")  # not "not ready yet" while starting


def kvtop_command(
    *args: str,
    env: dict[str, str] | None = None,
    status_file: Path | None = None,
    pid_file: Path | None = None,
    program: list[str] | None = None,
    linger_s: float = 0.0,
) -> str:
    """`sh -c` line running the installed script (or `program`) with a clean colour
    environment; `linger_s`: the pane stays that long after kvtop ends (what it printed on
    leaving can be read)."""
    settings = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
    argv = program or [str(KVTOP_SCRIPT)]
    core = f"env -u NO_COLOR -u FORCE_COLOR -u COLUMNS -u LINES {settings} {shlex.join(argv)}"
    core += " " + " ".join(shlex.quote(a) for a in args)
    if pid_file is not None:
        script = f"echo $$ > {shlex.quote(str(pid_file))}; exec {core}"
    else:
        assert status_file is not None
        script = f"{core}; echo $? > {shlex.quote(str(status_file))}"
        if linger_s:
            script += f"; sleep {linger_s:g}"
    return f"sh -c {shlex.quote(script)}"


DEMO = ("--demo", "--demo-speed", "20")


def gpu_rows(screen: str) -> list[tuple[int, int]]:
    """(gpu index, TP rank) of each overview row, top to bottom."""
    rows = []
    for line in screen.splitlines():
        match = GPU_ROW.match(line)
        if match:
            rows.append((int(match["gpu"]), int(match["rank"])))
    return rows


def eight_rows(screen: str) -> bool:
    return gpu_rows(screen) == [(i, i) for i in range(8)]


def status_line_ready(screen: str) -> bool:
    lines = screen.splitlines()
    return bool(lines) and READY.search(lines[0]) is not None


def wait_for_file(path: Path, what: str) -> str:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(POLL_S)
    pytest.fail(f"no {what} within {DEADLINE_S:g} s ({path} not written)")


def formula_interior(screen: str) -> list[str]:
    """Lines inside the formula modal's box: from its title down, those with a left border."""
    lines = screen.splitlines()
    start = next(i for i, line in enumerate(lines) if "SGLang's KV sizing" in line)
    return [line for line in lines[start:] if "│" in line[:3]]


def test_overview_detail_formula_quit(tmux: Tmux, tmp_path: Path) -> None:
    status = tmp_path / "status"
    tmux.new_session("main", kvtop_command(*DEMO, status_file=status))

    tmux.wait_for(
        "main",
        "eight GPU rows TP0..TP7 and `ready` on the status line",
        lambda s: eight_rows(s) and status_line_ready(s),
    )

    tmux.send("main", "Enter")
    tmux.wait_for(
        "main",
        "GPU detail with its breakdown",
        lambda s: "phase waterfall" in s and "breakdown" in s,
    )

    tmux.send("main", "Escape")
    tmux.wait_for(
        "main", "the overview again", lambda s: "phase waterfall" not in s and eight_rows(s)
    )

    tmux.send("main", "f")
    # mem_fraction_static (0.88) in the modal's sums, not just its title
    tmux.wait_for(
        "main",
        "the formula modal with 0.88 in its sums",
        lambda s: "SGLang's KV sizing" in s and any("0.88" in line for line in formula_interior(s)),
    )

    tmux.send("main", "Escape")
    tmux.wait_for(
        "main", "the modal to close", lambda s: "SGLang's KV sizing" not in s and eight_rows(s)
    )

    tmux.send("main", "q")
    assert wait_for_file(status, "exit status after q") == "0"
    assert "Traceback" not in tmux.capture("main")


def _consecutive_rows(screen: str) -> bool:
    numbers = [i for i, line in enumerate(screen.splitlines()) if GPU_ROW.match(line)]
    return eight_rows(screen) and numbers == list(range(numbers[0], numbers[0] + 8))


def test_small_terminal_shows_all_rows(tmux: Tmux, tmp_path: Path) -> None:
    status = tmp_path / "status"
    tmux.new_session("small", kvtop_command(*DEMO, status_file=status), width=80, height=24)
    # One line per GPU: eight consecutive lines, each with its memory figures.
    screen = tmux.wait_for("small", "eight consecutive GPU rows at 80x24", _consecutive_rows)
    lines = screen.splitlines()
    assert len(lines) <= 24
    assert all(len(line) <= 80 for line in lines), screen
    tmux.send("small", "q")
    assert wait_for_file(status, "exit status after q") == "0"


@pytest.mark.slow  # runs the demo, then watches every process end
def test_terminal_gone_exits_promptly(tmux: Tmux, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    tmux.new_session("hup", kvtop_command(*DEMO, pid_file=pid_file))
    pid = int(wait_for_file(pid_file, "kvtop's pid"))
    tmux.wait_for("hup", "eight GPU rows", eight_rows)
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    assert b"kvtop" in cmdline, cmdline  # exec replaced the shell
    tree = {pid} | descendants(pid)

    tmux.kill_session("hup")  # the pane's terminal goes away: SIGHUP
    # Behaviour, not speed: it ends by itself (measured 0.1-0.5 s; the exit watchdog fires at
    # 2 s). The limit leaves room for a loaded 2-core machine; a hang would run far past it.
    deadline = time.monotonic() + GONE_LIMIT_S
    while time.monotonic() < deadline and any(alive(p) for p in tree):
        time.sleep(0.05)
    left = sorted(p for p in tree if alive(p))
    for p in left:  # do not leak it into the rest of the run
        os.kill(p, 9)
    assert not left, f"still running {GONE_LIMIT_S:g} s after the terminal went away: {left}"


def _row_lines(screen: str) -> list[str]:
    """The overview's GPU rows of a capture taken with escapes (matched on the plain text)."""
    lines = screen.splitlines()
    plain = SGR.sub("", screen).splitlines()
    return [lines[i] for i, line in enumerate(plain) if GPU_ROW.match(line)]


def _bars_drawn(screen: str) -> bool:
    """Eight rows, each with its weights (█) and KV (▓) segments: the demo loads weights and
    allocates the KV pool a few seconds in, so the rows appear before their segments do."""
    plain = SGR.sub("", screen)
    rows = [line for line in plain.splitlines() if GPU_ROW.match(line)]
    return eight_rows(plain) and all("█" in line and "▓" in line for line in rows)


def _chromatic(screen: str) -> set[tuple[int, ...]]:
    return {c for c in foreground_colours("\n".join(_row_lines(screen))) if not is_grey(c)}


def test_no_color_still_draws_bars(tmux: Tmux, tmp_path: Path) -> None:
    tmux.new_session("colour", kvtop_command(*DEMO, status_file=tmp_path / "colour.status"))
    tmux.new_session(
        "mono", kvtop_command(*DEMO, env={"NO_COLOR": "1"}, status_file=tmp_path / "mono.status")
    )
    # Both waits return the screen they matched, and the asserts below are about that screen.
    mono = tmux.wait_for(
        "mono", "eight rows with weights and KV segments, NO_COLOR=1", _bars_drawn, escapes=True
    )
    colour = tmux.wait_for(
        "colour", "eight rows with weights and KV segments, colour", _bars_drawn, escapes=True
    )
    chromatic = _chromatic(colour)
    assert len(chromatic) >= 2, f"the colour run should colour its bar segments: {chromatic}"
    assert not _chromatic(mono), f"NO_COLOR=1 still drew colours {_chromatic(mono)}"


def test_term_dumb_is_refused_with_one_sentence(tmux: Tmux, tmp_path: Path) -> None:
    """A dumb terminal cannot draw the TUI (Textual would send escape codes anyway): kvtop says
    so in one line, points to --once, and exits with status 2 instead of printing garbage."""
    status = tmp_path / "status"
    tmux.new_session("dumb", kvtop_command(*DEMO, env={"TERM": "dumb"}, status_file=status))
    assert wait_for_file(status, "exit status under TERM=dumb") == "2"
    text = [
        line
        for line in tmux.capture("dumb", history=True).splitlines()
        if line.strip() and not line.startswith("Pane is dead")
    ]
    assert len(text) == 1, text
    assert "TERM=dumb" in text[0] and "--once" in text[0]
    assert "\x1b" not in tmux.capture("dumb")


def _thread_waits(pid: int) -> dict[int, tuple[str, int]]:
    """tid -> (kernel wait channel, context switches so far) of each of PID's threads."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            wchan = (task / "wchan").read_text()
            status = (task / "status").read_text()
        except OSError:
            continue
        switches = sum(
            int(line.split()[1]) for line in status.splitlines() if "ctxt_switches" in line
        )
        out[int(task.name)] = (wchan, switches)
    return out


def _input_thread(pid: int) -> int:
    """The input thread: the one thread waiting in select() (the event loop waits in epoll,
    the others on futexes; the kernel shows select's wait as poll_schedule_timeout). Polled,
    since a thread that wakes often may be caught running."""
    deadline = time.monotonic() + DEADLINE_S
    waits: dict[int, tuple[str, int]] = {}
    while time.monotonic() < deadline:
        waits = _thread_waits(pid)
        selecting = [t for t, (w, _) in waits.items() if "select" in w or "poll_schedule" in w]
        if len(selecting) == 1:
            return selecting[0]
        time.sleep(0.01)
    pytest.fail(f"no single thread waiting in select: {waits}")


def _keys_escape_and_quit(tmux: Tmux, name: str, pid: int) -> None:
    tmux.send(name, "?")
    tmux.wait_for(name, "the help screen", lambda s: "this help" in s)
    tmux.send(name, "Escape")  # alone: only the parser's timeout turns it into a key
    tmux.wait_for(name, "the help to close", lambda s: "this help" not in s and eight_rows(s))
    tmux.send(name, "q")
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline and alive(pid):
        time.sleep(POLL_S)
    assert not alive(pid), "kvtop did not exit after q (input thread never woke to leave?)"


def _input_wakes_in_2s(tmux: Tmux, name: str, command: str, pid_file: Path) -> tuple[int, int]:
    """Start COMMAND in session NAME; once its rows are drawn, how often its input thread woke
    in 2 s with nobody typing. Returns (pid, wake-ups)."""
    tmux.new_session(name, command)
    pid = int(wait_for_file(pid_file, "kvtop's pid"))
    tmux.wait_for(name, "eight GPU rows", eight_rows)
    tid = _input_thread(pid)
    before = _thread_waits(pid)[tid][1]
    time.sleep(2.0)
    return pid, _thread_waits(pid)[tid][1] - before


@pytest.mark.slow  # watches the input thread for 2 s
def test_input_thread_sleeps_while_nobody_types(tmux: Tmux, tmp_path: Path) -> None:
    """Textual's stock input thread wakes 10 times a second; kvtop's (tui/kvtop/live/quiet_driver.py)
    blocks until a key comes, and keys, a lone Escape and quitting still work."""
    pid_file = tmp_path / "pid"
    command = kvtop_command(*DEMO, pid_file=pid_file)
    pid, woke = _input_wakes_in_2s(tmux, "quiet", command, pid_file)
    assert woke <= 2, f"the input thread woke {woke} times in 2 s with nobody typing"
    _keys_escape_and_quit(tmux, "quiet", pid)


# Textual 8.2.8 as a later release might ship it: the parser's `_timeout_time`, which the quiet
# driver reads, renamed. Nothing real can move Textual's internals, so a module attribute is
# replaced before kvtop starts (the stock LinuxDriver keeps the class it imported).
INTERNALS_MOVED = """
import runpy, textual.drivers.linux_driver, textual._xterm_parser as xterm
class Moved(xterm.XTermParser):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        del self._timeout_time
xterm.XTermParser = Moved
runpy.run_module("kvtop", run_name="__main__", alter_sys=True)
"""


@pytest.mark.slow  # watches the input thread for 2 s
@pytest.mark.parametrize("why", ["internals moved", "KVTOP_STOCK_DRIVER=1"])
def test_stock_driver_fallback_runs_kvtop(why: str, tmux: Tmux, tmp_path: Path) -> None:
    """When the quiet driver cannot be used (or is turned off), kvtop runs on Textual's stock
    driver: its input thread wakes ten times a second, and keys, Escape and q work."""
    pid_file = tmp_path / "pid"
    if why == "internals moved":
        command = kvtop_command(
            *DEMO, pid_file=pid_file, program=[sys.executable, "-c", INTERNALS_MOVED]
        )
    else:
        command = kvtop_command(*DEMO, pid_file=pid_file, env={"KVTOP_STOCK_DRIVER": "1"})
    pid, woke = _input_wakes_in_2s(tmux, "stock", command, pid_file)
    assert woke >= 10, f"the input thread woke {woke} times in 2 s: not the stock driver's"
    _keys_escape_and_quit(tmux, "stock", pid)


def test_header_at_80x24_keeps_model_parallelism_mfs_flags_and_markers(
    tmux: Tmux, tmp_path: Path
) -> None:
    """The real `kvtop --demo` at 80×24; the status line drops host, source and
    version, never the state, model, TP, mfs, EAGLE3/HiCache or the source markers."""
    status = tmp_path / "status"
    tmux.new_session("head", kvtop_command(*DEMO, status_file=status), width=80, height=24)

    def header_complete(screen: str) -> bool:
        first = screen.splitlines()[0] if screen else ""
        return status_line_ready(screen) and all(
            value in first for value in ("Kimi-K2.5", "TP8", "mfs 0.88", "EAGLE3", "●log")
        )

    screen = tmux.wait_for("head", "the status line with the server ready", header_complete)
    first = screen.splitlines()[0]
    assert re.search(r"\bready \d+(s|m\d\ds)\b", first), first
    assert re.search(r"\bHiC(ache)?\b", first), first
    assert re.search(r"●NV(ML)?\b", first) and re.search(r"[●◐]met(rics)?\b", first), first
    assert len(first.rstrip()) <= 80
    tmux.send("head", "q")
    assert wait_for_file(status, "exit status") == "0"


@pytest.mark.parametrize("keys", ["qe", "ql", "qf", "q?"])
def test_a_key_typed_with_q_leaves_quietly(tmux: Tmux, tmp_path: Path, keys: str) -> None:
    """`q` and another key in one keystroke burst: kvtop leaves with status 0 and nothing
    else happens (the second key once opened a screen on the closing app: a traceback)."""
    status = tmp_path / "status"
    tmux.new_session("main", kvtop_command(*DEMO, status_file=status, linger_s=60))
    tmux.wait_for("main", "eight GPU rows", eight_rows)
    tmux.run("send-keys", "-t", "main", "-l", keys)  # both keys in one write, as typed fast
    assert wait_for_file(status, f"exit status after {keys!r}") == "0"
    left = tmux.capture("main", history=True)
    assert "Traceback" not in left and "NoMatches" not in left, left


BOX_EDGE = set(" ╭│╰╮╯─")  # what a modal's edge column may hold: its border, or nothing
MODALS = {"help": ("question_mark", "kvtop keys"), "formula": ("f", "SGLang's KV sizing")}


def _edges(screen: str, width: int) -> tuple[str, str]:
    """The screen's left and right columns, top to bottom."""
    lines = [line.ljust(width) for line in screen.splitlines()]
    return "".join(line[0] for line in lines), "".join(line[width - 1] for line in lines)


def _drawn_edges(tmux: Tmux, name: str, what: str, ready, width: int) -> tuple[str, str, str]:  # type: ignore[no-untyped-def]
    """The screen once READY holds and its edge columns are the same in two captures in a row:
    a frame is written top to bottom, and a capture in the middle of one shows its upper part
    over the lower part of the frame before."""
    deadline = time.monotonic() + DEADLINE_S
    before = ""
    while time.monotonic() < deadline:
        screen = tmux.wait_for(name, what, ready)
        if before and _edges(screen, width) == _edges(before, width):
            return (*_edges(screen, width), screen)
        before = screen
        time.sleep(POLL_S * 4)
    pytest.fail(f"the edges of {what} never held still within {DEADLINE_S:g} s")


@pytest.mark.parametrize("modal", MODALS)
@pytest.mark.parametrize("size", [(120, 40), (119, 40), (200, 60)], ids=str)
def test_a_modal_leaves_no_characters_of_the_overview_at_its_edges(
    tmux: Tmux, tmp_path: Path, modal: str, size: tuple[int, int]
) -> None:
    """Help and the formula cover the overview whole: while open, the screen's edge columns
    hold the box's border or nothing (no letters of the overview beside the box); closed, the
    overview is back with no piece of the box left."""
    width, height = size
    status = tmp_path / "status"
    tmux.new_session("modal", kvtop_command(*DEMO, status_file=status), width, height)
    tmux.wait_for("modal", "the overview, ready", lambda s: eight_rows(s) and status_line_ready(s))
    key, title = MODALS[modal]
    tmux.send("modal", "?" if key == "question_mark" else key)
    left, right, screen = _drawn_edges(
        tmux, "modal", f"the {modal} box", lambda s: title in s and "╰" in s, width
    )
    assert set(left) <= BOX_EDGE and set(right) <= BOX_EDGE, (left, right, screen)
    tmux.send("modal", "Escape")
    left, right, screen = _drawn_edges(
        tmux, "modal", "the overview again", lambda s: title not in s and eight_rows(s), width
    )
    assert not set(left + right) & set("╭│╰╮╯"), (left, right, screen)
    tmux.send("modal", "q")
    assert wait_for_file(status, "exit status after q") == "0"
