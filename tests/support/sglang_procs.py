"""Real processes that look like an SGLang server on this host: a main process with its
schedulers under it, titled as SGLang titles them (`sglang::scheduler_TP3`).

Whose a GPU process is comes from its identity (its title, its parent tree, its unit): the
schedulers must have a parent of their own, as SGLang's launcher is theirs, so that a process
started beside them (a test's "trainer") is not in the server's tree.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class Child:
    pid: int


def start_server(
    ranks: int = 8, lifetime_s: int = 60
) -> tuple[subprocess.Popen[bytes], dict[str, Child]]:
    """A main process (bash) with RANKS schedulers (TP0…) under it, each living LIFETIME_S
    unless stopped first (a benchmark's rounds outlast a test); waits until each has its
    title. Returns the main process and the schedulers by rank."""
    forks = " ".join(
        f"(exec -a 'sglang::scheduler_TP{i}' sleep {lifetime_s}) &" for i in range(ranks)
    )
    main = subprocess.Popen(["bash", "-c", f"{forks} wait"])
    deadline = time.monotonic() + 10
    while True:
        found: dict[str, Child] = {}
        for child in psutil.Process(main.pid).children():
            with contextlib.suppress(psutil.Error, IndexError):
                title = child.cmdline()[0]
                if title.startswith("sglang::scheduler_TP"):
                    found[title.removeprefix("sglang::scheduler_")] = Child(child.pid)
        if len(found) == ranks:
            return main, found
        assert time.monotonic() < deadline, "the schedulers did not start"
        time.sleep(0.02)


def titled_process(title: str, lifetime_s: int = 60) -> subprocess.Popen[bytes]:
    """A process whose argv[0] is TITLE (as setproctitle leaves a scheduler's), living
    LIFETIME_S unless killed; returned once it has exec'd (before that, /proc shows the
    parent's command line)."""
    proc = subprocess.Popen([title, str(lifetime_s)], executable="sleep")
    deadline = time.monotonic() + 10
    while True:
        with contextlib.suppress(psutil.Error, IndexError):
            if psutil.Process(proc.pid).cmdline()[0] == title:
                return proc
        assert time.monotonic() < deadline, f"{title!r} did not start"
        time.sleep(0.01)


def stop_server(main: subprocess.Popen[bytes], ranks: dict[str, Child]) -> None:
    main.kill()  # first, so it reports no killed child
    main.wait()
    for child in ranks.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGKILL)


@contextlib.contextmanager
def running_server(ranks: int = 8) -> Iterator[dict[str, Child]]:
    main, children = start_server(ranks)
    try:
        yield children
    finally:
        stop_server(main, children)
