"""What a --log-file path is, looked at without blocking: `--check` says at once when it is no
log it can read whole (a character device, a FIFO no one writes to and that holds nothing)
instead of waiting for its deadline."""

from __future__ import annotations

import array
import fcntl
import os
import stat
import termios


def log_path_problem(path: str) -> str | None:
    """A sentence when PATH cannot be read to its end now; None for a file (or anything else
    that may work: a missing file is the log reader's to say, with its own words)."""
    if path == "-":
        return None
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        kind = "a character device" if stat.S_ISCHR(mode) else "a block device"
        return (
            f"the log {path} is {kind}, not a log file: it never ends; give the SGLang log "
            "file (or - for a pipe into stdin)"
        )
    if stat.S_ISFIFO(mode) and not _fifo_has_writer(path) and not _fifo_holds_data(path):
        return (
            f"the log {path} is a named pipe (FIFO) no one writes to: nothing would arrive; "
            "start its writer first, or give the log file itself"
        )
    return None


def _fifo_holds_data(path: str) -> bool:
    """Whether the pipe holds bytes a writer left before it finished (`<(cat small.log)`):
    counted with FIONREAD, nothing read. Opened only once no process writes to it, so no
    writer can be released by the open and hurt by the close."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return True  # cannot tell: let the reader try
    try:
        count = array.array("i", [0])
        fcntl.ioctl(fd, termios.FIONREAD, count, True)
        return count[0] > 0
    except OSError:
        return True
    finally:
        os.close(fd)


def _fifo_has_writer(path: str) -> bool:
    """Whether some process holds the FIFO open for writing, read from /proc without opening
    the FIFO (opening it would release a writer blocked in open() and, closed again, break its
    next write). True when it cannot be told (no /proc, another user's processes): the reader
    then tries, within the deadline."""
    try:
        target = os.stat(path)
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return True
    hidden = False
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            with open(f"/proc/{pid}/wchan", encoding="ascii") as wchan:
                # A writer still blocked in open() on a FIFO holds no descriptor yet: which
                # FIFO cannot be told from here, so it may be this one.
                if wchan.read().strip() == "wait_for_partner":
                    hidden = True
        except OSError:
            hidden = True
            continue
        for fd in fds:
            try:
                held = os.stat(f"/proc/{pid}/fd/{fd}")
                if (held.st_dev, held.st_ino) != (target.st_dev, target.st_ino):
                    continue
                with open(f"/proc/{pid}/fdinfo/{fd}", encoding="ascii") as info:
                    flags = next(
                        int(line.split()[1], 8) for line in info if line.startswith("flags:")
                    )
            except (OSError, StopIteration, ValueError):
                continue
            if flags & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR):
                return True
    return hidden
