"""Real process trees around SGLang's ranks, for whose a GPU process is: the ranks under a shell,
under SGLang's own main process (`python -m sglang.launch_server`, a stand-in package), or
orphaned (their parent died: taken in by a subreaper, or by whatever adopts orphans here), each
beside a foreign `python3 train.py` that has the same parent.

Each tree is a context manager that yields the pids by name ("TP0", "TP1", "trainer", and
"parent", "server_child" where there are such) and kills every process it started.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

RANKS = ("TP0", "TP1")
TRAINER = "python3 train.py"
WAIT_S = 10


def _children_script(directory: Path, ranks: tuple[str, ...] = RANKS) -> str:
    """The bash lines that start RANKS (titled as SGLang titles them) and the trainer."""
    train = directory / "train.py"
    train.write_text("import time\ntime.sleep(120)\n")
    python = shlex.quote(sys.executable)
    titled = " ".join(f"(exec -a 'sglang::scheduler_{r}' sleep 120) &" for r in ranks)
    return f"cd {shlex.quote(str(directory))}; {titled} (exec -a python3 {python} train.py) &"


def _named(parent: int) -> dict[str, int]:
    """The ranks and the trainer among PARENT's children, by name."""
    found: dict[str, int] = {}
    for child in psutil.Process(parent).children():
        with contextlib.suppress(psutil.Error, IndexError):
            argv = child.cmdline()
            if argv[0].startswith("sglang::scheduler_"):
                found[argv[0].removeprefix("sglang::scheduler_")] = child.pid
            elif argv[:2] == ["python3", "train.py"]:
                found["trainer"] = child.pid
    return found


def _wait_for(parent: int, names: set[str]) -> dict[str, int]:
    """Until PARENT's children named NAMES have exec'd under their titles."""
    deadline = time.monotonic() + WAIT_S
    while not names <= (found := _named(parent)).keys():
        assert time.monotonic() < deadline, f"the children did not start: {found}"
        time.sleep(0.02)
    return found


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def under_a_shell(directory: Path) -> Iterator[dict[str, int]]:
    """bash starts the two ranks and the trainer: a shell is their parent, not the server."""
    shell = subprocess.Popen(["bash", "-c", _children_script(directory) + " wait"])
    found: dict[str, int] = {}
    try:
        found = _wait_for(shell.pid, {*RANKS, "trainer"})
        yield found | {"parent": shell.pid}
    finally:
        shell.kill()
        shell.wait()
        _kill(list(found.values()))


@contextlib.contextmanager
def orphaned_after_a_crash(directory: Path) -> Iterator[dict[str, int]]:
    """The ranks' and the trainer's shell killed: they are orphans, adopted by PID 1 or by
    whichever subreaper is above this test (the leftover ranks that still hold GPU memory)."""
    shell = subprocess.Popen(["bash", "-c", _children_script(directory) + " wait"])
    found: dict[str, int] = {}
    try:
        found = _wait_for(shell.pid, {*RANKS, "trainer"})
        shell.kill()
        shell.wait()
        deadline = time.monotonic() + WAIT_S
        while any(psutil.Process(pid).ppid() == shell.pid for pid in found.values()):
            assert time.monotonic() < deadline, "the orphans were not adopted"
            time.sleep(0.02)
        yield found
    finally:
        if shell.poll() is None:
            shell.kill()
            shell.wait()
        _kill(list(found.values()))


# A process that makes itself a subreaper (prctl PR_SET_CHILD_SUBREAPER), then lets a shell
# start the ranks and the trainer in the background and exit: they are its orphans. It prints
# their pids and keeps them until its stdin closes.
_SUBREAPER = textwrap.dedent(
    """
    import ctypes, json, os, signal, subprocess, sys, time
    PR_SET_CHILD_SUBREAPER = 36
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.exit("prctl: " + os.strerror(ctypes.get_errno()))
    subprocess.run(["bash", "-c", sys.argv[1]], check=True)
    print(json.dumps(os.getpid()), flush=True)
    sys.stdin.read()
    """
)


@contextlib.contextmanager
def orphaned_to_a_subreaper(directory: Path) -> Iterator[dict[str, int]]:
    """The ranks and the trainer orphaned by their shell and taken in by a subreaper (as a
    container's init or a supervisor takes them in); "parent" is the subreaper."""
    reaper = subprocess.Popen(
        [sys.executable, "-c", _SUBREAPER, _children_script(directory)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    found: dict[str, int] = {}
    try:
        assert reaper.stdout is not None
        pid = json.loads(reaper.stdout.readline())
        found = _wait_for(pid, {*RANKS, "trainer"})
        yield found | {"parent": pid}
    finally:
        _kill(list(found.values()))
        reaper.kill()
        reaper.wait()


# A stand-in for SGLang's launcher: `python -m sglang.launch_server` (the package written into
# the test's directory), the ranks' parent as SGLang's own main process is, with a child of its
# own that has no rank's title (as a compile worker).
_LAUNCH_SERVER = textwrap.dedent(
    """
    import subprocess, sys
    children = [
        subprocess.Popen(["bash", "-c", "exec -a 'sglang::scheduler_TP0' sleep 120"]),
        subprocess.Popen(["bash", "-c", "exec -a 'sglang::scheduler_TP1' sleep 120"]),
        subprocess.Popen(["sleep", "121"]),
    ]
    print(" ".join(str(c.pid) for c in children), flush=True)
    sys.stdin.read()
    for child in children:
        child.kill()
    """
)


@contextlib.contextmanager
def under_sglang(directory: Path) -> Iterator[dict[str, int]]:
    """`python -m sglang.launch_server` starts the two ranks and a child without a title; a
    shell beside it starts the trainer."""
    package = directory / "sglang"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "launch_server.py").write_text(_LAUNCH_SERVER)
    env = dict(os.environ, PYTHONPATH=str(directory))
    server = subprocess.Popen(
        [sys.executable, "-m", "sglang.launch_server", "--tp-size", "2"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    shell = subprocess.Popen(["bash", "-c", _children_script(directory, ranks=()) + " wait"])
    found: dict[str, int] = {}
    try:
        assert server.stdout is not None
        tp0, tp1, child = (int(p) for p in server.stdout.readline().split())
        found = {"TP0": tp0, "TP1": tp1, "server_child": child}
        found["trainer"] = _wait_for(shell.pid, {"trainer"})["trainer"]
        _wait_for(server.pid, set(RANKS))
        yield found | {"parent": server.pid}
    finally:
        shell.kill()
        shell.wait()
        _kill(list(found.values()))
        server.kill()
        server.wait()
