"""A private tmux server for driving the installed kvtop: the tmux test and bench_tui share it."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

POLL_S = 0.2


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
        self, name: str, what: str, predicate: Callable[[str], bool], deadline_s: float = 20.0
    ) -> str:
        """Poll the pane until predicate(screen) holds; TmuxError with the last screen if not."""
        deadline = time.monotonic() + deadline_s
        screen = ""
        while time.monotonic() < deadline:
            screen = self.capture(name)
            if "Traceback" in screen:
                raise TmuxError(f"traceback in the pane:\n{screen}")
            if predicate(screen):
                return screen
            time.sleep(POLL_S)
        raise TmuxError(f"no {what} within {deadline_s:g} s; last screen:\n{screen}")
