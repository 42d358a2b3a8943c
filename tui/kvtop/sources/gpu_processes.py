"""Who a GPU process is (psutil, one psutil.Process per pid): the SGLang rank its title
names, its user, command line, start time, ancestors and systemd unit; no NVML calls here.

SGLang names its scheduler processes with setproctitle, e.g. "sglang::scheduler_TP3" or
"sglang::scheduler_DP1_TP1_EP1"; rank_from_title() turns those into "TP3" and "DP1 TP1 EP1".
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence

import psutil

from kvtop.model.memory.process_owner import ProcessInfo
from kvtop.model.processes.record import ProcessRecord
from kvtop.sglang.process_title import rank_from_title

COMMAND_MAX = 200  # characters of a command line kept (GPU detail shows one line)

# What psutil raises for a process that is gone, hidden (hidepid, another PID namespace) or
# whose /proc entry cannot be read now.
_UNREADABLE = (psutil.Error, ProcessLookupError, PermissionError, ValueError, OSError)


def record_of_pid(pid: int) -> ProcessRecord:
    """Who process PID is: its rank, user, command line, start time, ancestors and unit, read
    through one psutil.Process in one oneshot() (its stat and status files read once for all of
    them); its usage is left empty (tui/kvtop/sources/host_processes.py reads it at every
    refresh). Gone or not visible here: nothing known."""
    try:
        proc = psutil.Process(pid)
    except _UNREADABLE:
        return ProcessRecord(pid)
    with proc.oneshot():
        return ProcessRecord(pid, _rank(proc), _user(proc), _info(proc))


def _rank(proc: psutil.Process) -> str | None:
    """The SGLang rank PROC's title names, or None (not a scheduler, gone, or not visible)."""
    try:
        try:
            cmdline = proc.cmdline()
        except (psutil.AccessDenied, psutil.ZombieProcess):
            cmdline = []
        titles = [cmdline[0]] if cmdline else []
        # setproctitle may leave the whole title in argv[0] with spaces instead of NULs.
        titles.append(proc.name())
    except (psutil.Error, ProcessLookupError, PermissionError, ValueError):
        return None
    for title in titles:
        rank = rank_from_title(title)
        if rank is not None:
            return rank
    return None


def _user(proc: psutil.Process) -> str | None:
    """PROC's owner, or None when it is gone or not visible here."""
    try:
        return proc.username()
    except (psutil.Error, ProcessLookupError, PermissionError, ValueError, KeyError):
        return None  # KeyError: a uid without a passwd entry (containers)


def command_words(argv: Sequence[str]) -> str:
    """A command line as one string a shell would read back as the same arguments: an argument
    holding a space or a character the shell treats specially is quoted (`'my prog' 100`, not
    `my prog 100`, which reads as three). A title a process set for itself (setproctitle: one
    string, spaces and all) is shown as it is, as nvitop does."""
    if len(argv) == 1:
        return argv[0]
    return shlex.join(argv)


def _info(proc: psutil.Process) -> ProcessInfo:
    """PROC's command line (its title when set), start time, ancestors and systemd unit;
    None (or empty) where it is gone or not visible here."""
    try:
        started = proc.create_time()
    except _UNREADABLE:
        return ProcessInfo()
    try:
        words = proc.cmdline() or [proc.name()]
    except _UNREADABLE:
        words = []
    command = command_words(words).replace("\x00", " ").strip()
    # Printable only: a title is anyone's to set and must not steer the terminal.
    command = "".join(c if c.isprintable() else "?" for c in command)[:COMMAND_MAX]
    parents = _parents(proc)
    return ProcessInfo(
        command or None,
        started,
        _ancestors(parents),
        unit_of_pid(proc.pid),
        adopted=_adopted(proc, parents),
    )


# What takes in a process whose parent died: PID 1 (init, a container's init) or a subreaper
# (a user's systemd, tini, dumb-init, a container runtime's shim).
_SUBREAPERS = ("systemd", "init", "tini", "dumb-init", "docker-init", "containerd-shim", "conmon")


def _adopted(proc: psutil.Process, parents: list[psutil.Process] | None) -> bool:
    """PROC's parent is PID 1 or a subreaper: the process that started it is gone (an SGLang
    scheduler is its server's main process's child while that lives). PARENTS: PROC's, read
    already (their first is its parent, unless psutil found the parent's pid reused)."""
    try:
        parent = proc.ppid()
        if parent == 1:
            return True
        if parent < 1:
            return False
        first = parents[0] if parents and parents[0].pid == parent else psutil.Process(parent)
        name = first.name()
    except _UNREADABLE:
        return False  # not readable here: nothing says it was adopted
    return name.startswith(_SUBREAPERS)


ANCESTORS_MAX = 32  # a process tree deeper than this is not followed further

# SGLang's own packages: `python -m sglang.launch_server`, `python -m sglang_router.launch_server`
# (the router starting its servers), a script of theirs, the `sglang` command.
_SGLANG_PACKAGES = ("sglang", "sglang_router")
_PYTHON = re.compile(r"(?:python|pypy)[\d.]*$")
_PYTHON_TAKES_VALUE = ("-W", "-X", "--check-hash-based-pycs")  # options whose value follows


def _sglang_program(path: str) -> bool:
    """The `sglang` command, or a script inside SGLang's packages."""
    parts = path.split("/")
    if parts[-1] == "sglang":
        return True
    return parts[-1].endswith(".py") and any(p in _SGLANG_PACKAGES for p in parts[:-1])


def is_sglang_command(argv: Sequence[str]) -> bool:
    """The process is SGLang's own by its command line: a title SGLang set (`sglang::…`), the
    `sglang` command (`sglang serve`), or Python running SGLang's module or one of its scripts
    (`python -m sglang.launch_server`). A shell, an init, a supervisor or `python -c` is not,
    whatever its arguments mention."""
    if not argv:
        return False
    program = argv[0]
    if program.startswith("sglang::") or _sglang_program(program):
        return True
    if not _PYTHON.match(os.path.basename(program)):
        return False
    words = iter(argv[1:])
    for word in words:
        if word.startswith("-m"):
            module = word[2:] or next(words, "")
            return module.split(".")[0] in _SGLANG_PACKAGES
        if word.startswith("-c"):
            return False
        if word in _PYTHON_TAKES_VALUE:
            next(words, None)
        elif not word.startswith("-"):
            return _sglang_program(word)  # the script Python runs
    return False


def _is_sglangs(proc: psutil.Process) -> bool:
    try:
        return is_sglang_command(proc.cmdline() or [proc.name()])
    except _UNREADABLE:
        return False  # not readable here: nothing says it is SGLang's


def _parents(proc: psutil.Process) -> list[psutil.Process] | None:
    """The processes above PROC, its parent first, up to ANCESTORS_MAX; None: not readable."""
    try:
        return proc.parents()[:ANCESTORS_MAX]
    except _UNREADABLE:
        return None


def _ancestors(parents: list[psutil.Process] | None) -> tuple[int, ...]:
    """The pids of PARENTS (a process's, its parent first) up to the topmost that is SGLang's
    own (`is_sglang_command`); none when no ancestor is.

    Whose a process is follows its tree only through SGLang's processes: a shell, PID 1, a
    container's init or a subreaper that took in orphaned ranks holds whatever else runs on the
    host, so the ranks' parent is the server's main process only when it is SGLang's, and a
    process related to a rank only through such a parent is not the server's."""
    if parents is None:
        return ()
    top = max((i for i, p in enumerate(parents) if p.pid >= 1 and _is_sglangs(p)), default=-1)
    return tuple(p.pid for p in parents[: top + 1])


def unit_from_cgroup(text: str) -> str | None:
    """The systemd unit in a /proc/PID/cgroup text: the innermost `.service` or `.scope`
    of the unified (v2, `0::`) or systemd (v1, `name=systemd`) hierarchy; None outside one."""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or not (parts[0] == "0" or parts[1] == "name=systemd"):
            continue
        units = [c for c in parts[2].split("/") if c.endswith((".service", ".scope"))]
        if units:
            return units[-1]
    return None


def unit_of_pid(pid: int) -> str | None:
    """Process PID's systemd unit from /proc/PID/cgroup (None: not in one, or unreadable)."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
            return unit_from_cgroup(f.read(8192))
    except OSError:
        return None
