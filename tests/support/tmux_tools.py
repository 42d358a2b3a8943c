"""A private tmux server for driving the installed kvtop: the tmux test and bench_tui share it."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

# How often a pane is read while waiting: a capture costs a few milliseconds of a tmux client,
# and each wait ends this much after what it waits for at most.
POLL_S = 0.05
SGR = re.compile(r"\x1b\[([0-9;:]*)m")


class TmuxError(RuntimeError):
    pass


def clean_env() -> dict[str, str]:
    """The tmux server's environment (its panes inherit it): no size or colour overrides.

    Rich, under Textual, takes COLUMNS and LINES over the terminal's real size, and pytest's
    environment here carries COLUMNS=80 LINES=24.
    """
    drop = {"COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "CLICOLOR_FORCE", "TMUX", "TMUX_PANE"}
    return {
        k: v
        for k, v in os.environ.items()
        if k not in drop and not k.startswith(("PYTEST_", "TEXTUAL"))
    }


class Tmux:
    """A private server (`tmux -L SOCKET`); every session keeps its pane after exit (to read a
    traceback). A holder session starts the server up front, so spawning kvtop does not pay
    for it, and keeps it up between sessions."""

    def __init__(self, tmux: str, socket: str, cwd: Path) -> None:
        self.tmux, self.socket, self.cwd = tmux, socket, cwd
        self.socket_path = ""
        self.run("-f", "/dev/null", "new-session", "-d", "-s", "holder", "sleep 86400")
        self.run("set-option", "-g", "remain-on-exit", "on")
        self.socket_path = self.run("display-message", "-p", "#{socket_path}").stdout.strip()

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [self.tmux, "-L", self.socket, *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
            cwd=self.cwd,
            env=clean_env(),
        )
        if check and result.returncode != 0:
            raise TmuxError(f"tmux {' '.join(args)} failed ({result.returncode}): {result.stderr}")
        return result

    def new_session(self, name: str, command: str, width: int = 120, height: int = 40) -> None:
        size = ["-x", str(width), "-y", str(height)]
        self.run("new-session", "-d", "-s", name, *size, "-c", str(self.cwd), command)

    def capture(self, name: str, *, escapes: bool = False, history: bool = False) -> str:
        args = ["capture-pane", "-p", "-t", name] + (["-e"] if escapes else [])
        if history:  # what scrolled off too (a dead pane's output can sit above the view)
            args += ["-S", "-100"]
        result = self.run(*args, check=False)
        return result.stdout if result.returncode == 0 else ""

    def send(self, name: str, *keys: str) -> None:
        self.run("send-keys", "-t", name, *keys)

    def kill_session(self, name: str) -> None:
        self.run("kill-session", "-t", name, check=False)

    def kill_server(self) -> None:
        self.run("kill-server", check=False)
        if self.socket_path:  # tmux 3.3 leaves its socket file behind
            Path(self.socket_path).unlink(missing_ok=True)
            self.socket_path = ""

    def wait_for(
        self,
        name: str,
        what: str,
        predicate: Callable[[str], bool],
        deadline_s: float = 20.0,
        *,
        escapes: bool = False,
    ) -> str:
        """Poll the pane until predicate(screen) holds and return that very screen (with SGR
        escapes if asked), so a caller asserts on what was waited for; TmuxError with the last
        screen if it never holds."""
        deadline = time.monotonic() + deadline_s
        screen = ""
        while time.monotonic() < deadline:
            screen = self.capture(name, escapes=escapes)
            if "Traceback" in screen:
                raise TmuxError(f"traceback in the pane:\n{screen}")
            if predicate(screen):
                return screen
            time.sleep(POLL_S)
        raise TmuxError(f"no {what} within {deadline_s:g} s; last screen:\n{screen}")


def foreground_colours(screen: str) -> set[tuple[int, ...]]:
    """Foreground colours set by SGR sequences: (index,) for 256 colours, (r, g, b) for RGB."""
    colours: set[tuple[int, ...]] = set()
    for match in SGR.finditer(screen):
        params = [int(p) if p else 0 for p in re.split("[;:]", match[1])]
        i = 0
        while i < len(params):
            p = params[i]
            if p in (38, 48) and i + 1 < len(params):
                if params[i + 1] == 5 and i + 2 < len(params):
                    if p == 38:
                        colours.add((params[i + 2],))
                    i += 3
                    continue
                if params[i + 1] == 2 and i + 4 < len(params):
                    if p == 38:
                        colours.add(tuple(params[i + 2 : i + 5]))
                    i += 5
                    continue
            if 30 <= p <= 37 or 90 <= p <= 97:
                colours.add((p - 30 if p < 90 else p - 82,))
            i += 1
    return colours


def is_grey(colour: tuple[int, ...]) -> bool:
    if len(colour) == 3:
        return colour[0] == colour[1] == colour[2]
    return colour[0] in (0, 7, 8, 15, 16, 231) or 232 <= colour[0] <= 255


def alive(pid: int) -> bool:
    """True while /proc/PID exists and is not a zombie (exited, not yet reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


@contextlib.contextmanager
def private_server(prefix: str, cwd: Path) -> Iterator[Tmux]:
    """A tmux server of its own (socket PREFIX-<pid>), killed on exit."""
    tmux = shutil.which("tmux")
    assert tmux is not None, "tmux is not installed"
    server = Tmux(tmux, f"{prefix}-{os.getpid()}", cwd)
    try:
        yield server
    finally:
        server.kill_server()
