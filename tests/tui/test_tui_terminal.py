"""The terminal's habits, on the installed `kvtop` in a real tmux pane: Ctrl-Z suspends to the
shell and `fg` comes back with the whole screen, Ctrl-C quits with status 0, and the layout
after a resize is the one a fresh start at that size draws, row by row.

The screens compared come from a finished log (the embedded story) and eight GPUs of the fake
`libnvidia-ml.so.1` (tests/support/fake_nvml, through the real nvidia-ml-py) that always answer
the same: nothing on them moves except the clock's words (uptime, ages, the sparkline's span),
which `masked` replaces. The demo would not do: its load changes every second.
"""

from __future__ import annotations

import re
import shlex
import shutil
import sys
import time
from pathlib import Path

import pytest

from tests.support.fake_nvml import STATE_ENV, eight_gpus, gcc_path, write_state
from tests.support.paths import STORY_LOG
from tests.support.tmux_tools import Tmux

TMUX = shutil.which("tmux")
KVTOP_SCRIPT = Path(sys.executable).with_name("kvtop")
DEADLINE_S = 20.0
PROMPT = "KVTOP-TEST$ "

pytestmark = [
    pytest.mark.skipif(TMUX is None, reason="tmux is not installed: cannot drive the terminal UI"),
    pytest.mark.skipif(gcc_path() is None, reason="gcc is needed to build the fake NVML library"),
    pytest.mark.skipif(
        not KVTOP_SCRIPT.exists(), reason=f"no kvtop console script next to {sys.executable}"
    ),
]

GPU_ROW = re.compile(r"^\S?\s*\d+\s+TP\d+\s.*?\d+\.\d/\d+\.\d")
# The words that follow the clock: "ready 278d5h", "278d5h ago", "usage, last 12s".
DURATION = re.compile(r"\b\d+(?:d\d*h?|h\d*m?|m\d*s?|s)\b")
SPARK = re.compile(r"[▁▂▃▄▅▆▇█]+(?=.*\blast\b)")


@pytest.fixture(scope="module")
def kvtop_line(lib_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The command line of a kvtop whose screen stands still: the story's log, eight fake GPUs,
    no server."""
    where = tmp_path_factory.mktemp("nvml")
    state = where / "state"
    write_state(state, eight_gpus(used_mib=135_700))
    settings = {"LD_LIBRARY_PATH": str(lib_dir), STATE_ENV: str(state)}
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in settings.items())
    argv = [str(KVTOP_SCRIPT), "--no-metrics", "--log-file", str(STORY_LOG)]
    return f"env -u NO_COLOR -u COLUMNS -u LINES {env} {shlex.join(argv)}"


def masked(screen: str) -> str:
    """The screen without what moves with the clock alone."""
    lines = [DURATION.sub("T", SPARK.sub("~", line)).rstrip() for line in screen.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def eight_rows(screen: str) -> bool:
    return sum(1 for line in screen.splitlines() if GPU_ROW.match(line)) == 8


def drawn(screen: str) -> bool:
    """The overview complete: eight rows and the key bar on the last line."""
    lines = screen.rstrip("\n").splitlines()
    return eight_rows(screen) and bool(lines) and "quit" in lines[-1]


SETTLE_S = 1.2  # longer than the refresh interval: a screen this old has had a reading


def settled(tmux: Tmux, name: str, what: str) -> str:
    """The overview once drawn and unchanged (masked) across a refresh interval: the first
    readings fill panels one after another, so the first complete screen is not the last."""
    return settled_all(tmux, {name: what})[name]


def settled_all(tmux: Tmux, whats: dict[str, str]) -> dict[str, str]:
    """settled() for several sessions running at once, each screen compared with its own a
    refresh interval before (one wait of SETTLE_S serves them all)."""
    deadline = time.monotonic() + DEADLINE_S
    screens = {name: tmux.wait_for(name, what, drawn) for name, what in whats.items()}
    done: dict[str, str] = {}
    while time.monotonic() < deadline:
        time.sleep(SETTLE_S)
        for name in [n for n in whats if n not in done]:
            later = tmux.wait_for(name, whats[name], drawn)
            if masked(later) == masked(screens[name]):
                done[name] = later
            screens[name] = later
        if len(done) == len(whats):
            return done
    changing = {whats[n]: screens[n] for n in whats if n not in done}
    pytest.fail(f"the screens of {list(changing)} kept changing for {DEADLINE_S:g} s:\n{changing}")


def shell_session(tmux: Tmux, name: str, width: int = 120, height: int = 40) -> None:
    """An interactive bash with job control and a prompt the test can find."""
    env = f"env -u COLUMNS -u LINES PS1={shlex.quote(PROMPT)}"
    tmux.new_session(name, f"{env} bash --norc --noprofile -i", width, height)
    tmux.wait_for(name, "the shell's prompt", lambda s: PROMPT.rstrip() in s)


def pane(tmux: Tmux, name: str, field: str) -> str:
    return tmux.run("display-message", "-p", "-t", name, f"#{{{field}}}").stdout.strip()


def last_line(screen: str) -> str:
    lines = [line for line in screen.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def test_ctrl_z_suspends_to_the_shell_and_fg_repaints_everything(
    tmux: Tmux, kvtop_line: str
) -> None:
    shell_session(tmux, "job")
    tmux.send("job", kvtop_line, "Enter")
    before = settled(tmux, "job", "the overview")

    tmux.send("job", "C-z")
    stopped = tmux.wait_for(
        "job", "the shell's prompt after Ctrl-Z", lambda s: last_line(s) == PROMPT.rstrip()
    )
    assert "Stopped" in stopped
    # The terminal as the shell needs it: the alternate screen left, the cursor shown.
    assert pane(tmux, "job", "alternate_on") == "0"
    assert pane(tmux, "job", "cursor_flag") == "1"
    tmux.send("job", "jobs", "Enter")
    jobs = tmux.wait_for(
        "job", "`jobs` listing kvtop", lambda s: "jobs\n" in s and s.count(PROMPT.rstrip()) >= 2
    )
    assert re.search(r"\[1\]\+\s+Stopped\s+.*kvtop", jobs.replace("\n", "")), jobs

    tmux.send("job", "fg", "Enter")
    want = masked(before)
    # The whole screen at once, not only what the next reading changes (the story's log and
    # the fake GPUs change nothing, so a partial repaint would leave most of it blank).
    again = tmux.wait_for("job", "the full overview after fg", lambda s: masked(s) == want)
    assert pane(tmux, "job", "alternate_on") == "1"
    assert eight_rows(again)

    tmux.send("job", "C-c")
    tmux.wait_for("job", "the prompt after Ctrl-C", lambda s: last_line(s) == PROMPT.rstrip())
    tmux.send("job", "echo status=$?", "Enter")
    done = tmux.wait_for(
        "job", "the exit status", lambda s: re.search(r"status=\d+", s) is not None
    )
    assert "status=0" in done


@pytest.mark.parametrize("where", ["overview", "formula"])
def test_ctrl_c_quits_with_status_zero(tmux: Tmux, kvtop_line: str, where: str) -> None:
    """As q, from the overview and from the formula, whose input field has the focus (an input
    field's Ctrl-C would copy)."""
    shell_session(tmux, "quit")
    tmux.send("quit", kvtop_line, "Enter")
    tmux.wait_for("quit", "the overview drawn", drawn)
    if where == "formula":
        tmux.send("quit", "f")
        tmux.wait_for("quit", "the formula", lambda s: "what if mem_fraction_static" in s)
    tmux.send("quit", "C-c")
    tmux.wait_for("quit", "the prompt after Ctrl-C", lambda s: last_line(s) == PROMPT.rstrip())
    tmux.send("quit", "echo status=$?", "Enter")
    done = tmux.wait_for(
        "quit", "the exit status", lambda s: re.search(r"status=\d+", s) is not None
    )
    assert "status=0" in done and "Traceback" not in done


def fresh_screens(
    tmux: Tmux, kvtop_line: str, sizes: set[tuple[int, int]]
) -> dict[tuple[int, int], str]:
    """What kvtop started at each size draws once settled (masked), the sizes run at once."""
    names = {size: f"fresh{size[0]}x{size[1]}" for size in sizes}
    for (width, height), name in names.items():
        tmux.new_session(name, kvtop_line, width, height)
    whats = {name: f"the overview at {w}x{h}" for (w, h), name in names.items()}
    screens = settled_all(tmux, whats)
    for name in names.values():
        tmux.kill_session(name)
    return {size: masked(screens[name]) for size, name in names.items()}


@pytest.mark.parametrize(
    "sizes",
    [((120, 40), (80, 24)), ((80, 24), (200, 60), (120, 40))],
    ids=["120x40-80x24", "80x24-200x60-120x40"],
)
def test_the_layout_follows_every_resize_at_once(
    tmux: Tmux, kvtop_line: str, sizes: tuple[tuple[int, int], ...]
) -> None:
    """After each resize the screen is, row by row, what kvtop started at that size draws
    (compact below 34 rows, full above): never the layout of the size before."""
    (width, height), *later = sizes
    tmux.new_session("resized", kvtop_line, width, height)  # starts while the fresh ones do
    fresh = fresh_screens(tmux, kvtop_line, set(later))
    tmux.wait_for("resized", "the overview drawn", drawn)
    for size in later:
        tmux.run("resize-window", "-t", "resized", "-x", str(size[0]), "-y", str(size[1]))
        want = fresh[size]
        shown = tmux.wait_for(
            "resized",
            f"the layout of a fresh start at {size[0]}x{size[1]}",
            lambda s, want=want: masked(s) == want,
        )
        assert len(shown.splitlines()) <= size[1]
