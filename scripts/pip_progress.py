"""Run pip quietly and say on stderr what it is doing: setup-env.sh's install step.

    python pip_progress.py LOG LABEL -- PIP-ARGUMENTS...

pip's own output goes to LOG (shown only when pip fails). On stderr: one line per stage
(resolving and downloading, compiling systemd-python, installing N packages) with the seconds
so far; in a terminal one line rewritten in place every second instead, and when it ends one
line that says how many packages went in and how long it took. Exits with pip's status.
Standard library only: it runs under the new environment's python before anything is in it.
"""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
import time

HEARTBEAT_S = 10.0  # without a terminal: a line at least this often while pip is quiet
# A package found: by name, or (a local index or wheel cache) by its file; not the project.
COLLECTING = re.compile(r"^(?:Collecting (\S+)|Processing (\S+\.(?:whl|tar\.gz|zip))\b)")
BUILDING = re.compile(r"^\s*Building (?:wheel|editable) for (\S+)")
INSTALLING = re.compile(r"^Installing collected packages: (.*)")
DONE = re.compile(r"^Successfully installed (.*)")


class Progress:
    """What pip is doing, from its output lines: a stage and a detail that changes within it."""

    def __init__(self) -> None:
        self.collected = 0
        self.stage, self.detail = "preparing kvtop's build (setuptools)", ""
        self.installed: int | None = None

    @property
    def text(self) -> str:
        return f"{self.stage} ({self.detail})" if self.detail else self.stage

    def feed(self, line: str) -> bool:
        """Take one line of pip's output; True when the stage (not only its detail) changed."""
        before = self.stage
        if match := COLLECTING.match(line):
            self.collected += 1
            self.stage = "resolving and downloading packages"
            self.detail = f"{self.collected} so far: {_package(match[1] or match[2])}"
        elif match := BUILDING.match(line):
            name, self.detail = match[1], ""
            if name == "systemd-python":
                self.stage = "compiling systemd-python (C, against libsystemd: a few seconds)"
            else:
                self.stage = f"building {name}"
        elif match := INSTALLING.match(line):
            count = len([p for p in match[1].split(",") if p.strip()])
            self.stage, self.detail = f"installing {_count(count)} into .venv", ""
        elif match := DONE.match(line):
            self.installed = len(match[1].split())
        return self.stage != before


def _count(packages: int) -> str:
    return f"{packages} package" + ("" if packages == 1 else "s")


def _package(spec: str) -> str:
    """`textual<8.3,>=8.0` or `/x/files/rich-15.0.0-py3-none-any.whl`: the package's name."""
    name = spec.rsplit("/", 1)[-1]
    if name.endswith((".whl", ".tar.gz", ".zip")):
        name = name.split("-", 1)[0]
    return re.split(r"[<>=!~\[;( ]", name, maxsplit=1)[0]


def _columns() -> int:
    try:
        return os.get_terminal_size(2).columns or 80
    except OSError:
        return 80


def _reader(stream, lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _follow(pip: subprocess.Popen[str], log, label: str, progress: Progress) -> None:
    """Copy pip's output to the log until it ends, saying the stage on stderr as it goes."""
    tty = sys.stderr.isatty()
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_reader, args=(pip.stdout, lines), daemon=True).start()
    start = said = time.monotonic()
    while True:
        try:
            line = lines.get(timeout=1.0)
        except queue.Empty:
            line = ""
        if line is None:
            break
        log.write(line)
        changed = progress.feed(line) if line else False
        now = time.monotonic()
        if tty:
            text = f"{label}: {progress.text} · {now - start:.0f} s"
            sys.stderr.write("\r\x1b[K" + text[: _columns() - 1])
            sys.stderr.flush()
        elif changed or now - said >= HEARTBEAT_S:
            print(f"{label}: {progress.text} · {now - start:.0f} s", file=sys.stderr)
            said = now
    if tty:
        sys.stderr.write("\r\x1b[K")


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    log_path, label, pip_args = argv[0], argv[1], argv[3:]
    start = time.monotonic()
    env = dict(os.environ, PYTHONUNBUFFERED="1", PIP_PROGRESS_BAR="off")
    progress = Progress()
    with open(log_path, "w", encoding="utf-8") as log:
        pip = subprocess.Popen(
            [sys.executable, "-m", "pip", *pip_args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env=env,
        )
        try:
            _follow(pip, log, label, progress)
            status = pip.wait()
        except KeyboardInterrupt:  # Ctrl-C reaches pip too (same process group): let it stop
            pip.wait()
            print(f"\n{label}: stopped; run it again to finish the install.", file=sys.stderr)
            return 130
    if status == 0:
        count = progress.installed
        what = _count(count) if count is not None else "nothing new"
        elapsed = time.monotonic() - start
        print(f"{label}: done, {what} installed in {elapsed:.0f} s", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
