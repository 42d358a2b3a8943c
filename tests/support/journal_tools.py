"""Real journals for tests: files written by systemd-journal-remote, and a private journald."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import textwrap
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path

JOURNAL_REMOTE = "/lib/systemd/systemd-journal-remote"
JOURNALD = "/lib/systemd/systemd-journald"
BOOT_ID = "5a1e5a1e5a1e4a1e8a1e5a1e5a1e5a1e"
# Monotonic time is derived from realtime so it always grows within the one boot.
BOOT_AT_US = 1_700_000_000_000_000
ROOT = Path(__file__).resolve().parents[2]

Entry = Mapping[str, "str | bytes | int"]


def journal_remote_missing() -> str | None:
    """Why journal files cannot be written here, or None when they can."""
    if not os.access(JOURNAL_REMOTE, os.X_OK):
        return f"{JOURNAL_REMOTE} is not installed (Debian package systemd-journal-remote)"
    return None


def invocation(n: int) -> str:
    """A recognisable 32-hex invocation id: invocation(2) == '2222...'."""
    return f"{n:x}" * 32 if n < 16 else uuid.UUID(int=n).hex


def export_format(entries: Iterable[Entry]) -> bytes:
    """Journal Export Format: KEY=VALUE lines, or KEY, a 64-bit LE length and the raw bytes for
    values with a newline or bytes that are not UTF-8; a blank line ends each entry."""
    out = bytearray()
    for entry in entries:
        for key, value in entry.items():
            raw = value if isinstance(value, bytes) else str(value).encode()
            if b"\n" in raw or isinstance(value, bytes):
                out += key.encode() + b"\n" + struct.pack("<Q", len(raw)) + raw + b"\n"
            else:
                out += key.encode() + b"=" + raw + b"\n"
        out += b"\n"
    return bytes(out)


def write_journal(directory: Path, entries: Iterable[Entry], name: str = "test.journal") -> Path:
    """Write ENTRIES into DIRECTORY/NAME (appending when it exists) with systemd-journal-remote."""
    directory.mkdir(parents=True, exist_ok=True)
    if not name.endswith(".journal"):
        name += ".journal"
    path = directory / name
    done = subprocess.run(
        [JOURNAL_REMOTE, "-o", str(path), "-"],
        input=export_format(entries),
        capture_output=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"systemd-journal-remote failed: {done.stderr.decode(errors='replace')}")
    return path


def entry(
    unit: str,
    invocation_id: str | None,
    message: str | bytes,
    at_us: int,
    pid: int = 4242,
    identifier: str = "python3",
) -> dict[str, str | bytes | int]:
    fields: dict[str, str | bytes | int] = {
        "__REALTIME_TIMESTAMP": at_us,
        "__MONOTONIC_TIMESTAMP": at_us - BOOT_AT_US,
        "_BOOT_ID": BOOT_ID,
        "_SYSTEMD_UNIT": unit,
        "MESSAGE": message,
        "PRIORITY": 6,
        "SYSLOG_IDENTIFIER": identifier,
        "_PID": pid,
        "_TRANSPORT": "stdout",
    }
    if invocation_id is not None:
        fields["_SYSTEMD_INVOCATION_ID"] = invocation_id
    return fields


def sglang_entries(
    unit: str,
    invocation_id: str | None,
    lines: Iterable[str | bytes],
    start_us: int,
    step_us: int = 1000,
    pid: int = 4242,
) -> list[dict[str, str | bytes | int]]:
    """One entry per SGLang log line, STEP_US apart from START_US (must be after BOOT_AT_US)."""
    return [
        entry(unit, invocation_id, text, start_us + i * step_us, pid=pid)
        for i, text in enumerate(lines)
    ]


def interleave(*runs: list[dict[str, str | bytes | int]]) -> list[dict[str, str | bytes | int]]:
    """All entries ordered by time, as journald would have written them."""
    merged = [e for run in runs for e in run]
    return sorted(merged, key=lambda e: int(e["__REALTIME_TIMESTAMP"]))


# -- a real systemd-journald ----------------------------------------------------------------


def cgroup2_root() -> Path | None:
    """Where cgroup2 is mounted: /sys/fs/cgroup/unified on a hybrid host, else /sys/fs/cgroup."""
    for candidate in (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")):
        if (candidate / "cgroup.procs").exists() and (candidate / "cgroup.controllers").exists():
            return candidate
    return None


def private_journald_missing() -> str | None:
    """Why PrivateJournald cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root (mount namespaces, tmpfs mounts and cgroups)"
    for tool in ("unshare", "systemd-cat"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not os.access(JOURNALD, os.X_OK):
        return f"{JOURNALD} is not installed (Debian package systemd)"
    if cgroup2_root() is None:
        return (
            "no cgroup2 hierarchy is mounted (looked in /sys/fs/cgroup/unified and /sys/fs/cgroup)"
        )
    probe = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "true"],
        capture_output=True,
        timeout=10,
        check=False,
    )
    if probe.returncode != 0:
        return f"unshare -m fails here: {probe.stderr.decode(errors='replace').strip()}"
    return None


_DRIVER = """\
set -eu
export CG="$CGROUP2/system.slice/$UNIT"
JPID=""
cleanup() {{
    [ -n "$JPID" ] && kill "$JPID" 2>/dev/null && wait "$JPID" 2>/dev/null
    rmdir "$CG" 2>/dev/null || true
    rmdir "$CGROUP2/system.slice" 2>/dev/null || true
}}
trap cleanup EXIT
# Private tmpfs over every place journald writes: nothing reaches the host's journal.
mkdir -p /run/systemd /run/log /var/log/journal
mount -t tmpfs tmpfs /run/systemd
mount -t tmpfs tmpfs /run/log
mount -t tmpfs tmpfs /var/log/journal
{journald} &
JPID=$!
for _ in $(seq 800); do [ -S /run/systemd/journal/stdout ] && break; sleep 0.025; done
[ -S /run/systemd/journal/stdout ] || {{ echo "journald did not start" >&2; exit 3; }}
# journald takes _SYSTEMD_UNIT from the writer's cgroup and _SYSTEMD_INVOCATION_ID from this link.
mkdir -p /run/systemd/units
ln -s "$INVOCATION" "/run/systemd/units/invocation:$UNIT"
mkdir -p "$CG" || {{ echo "cannot create cgroup $CG" >&2; exit 4; }}
{command}
"""


class PrivateJournald:
    """Run a shell COMMAND next to a real systemd-journald in a private mount namespace.

    `start_writer` lines put a process into the unit's cgroup so journald tags its output with
    _SYSTEMD_UNIT and _SYSTEMD_INVOCATION_ID, as under systemd. Use as a context manager:
    `with PrivateJournald(unit, inv) as pj: result = pj.run(script)`; the cgroup is removed and
    journald stopped when the script ends, whatever happens.
    """

    def __init__(self, unit: str, invocation_id: str) -> None:
        self.unit = unit
        self.invocation_id = invocation_id
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> PrivateJournald:
        self._tmp = tempfile.TemporaryDirectory(prefix="kvtop-journald-")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()

    def writer(self, lines: Iterable[str], hold_s: float = 0.3) -> str:
        """Shell that logs LINES through systemd-cat from inside the unit's cgroup.

        The lines are written by the shell's own printf and the shell then lingers: journald
        reads the writer's cgroup from /proc/PID, and a writer already gone (a short-lived
        `cat`) is logged without a unit, now and then.
        """
        assert self._tmp is not None
        work = Path(self._tmp.name)
        n = len(list(work.glob("writer-*.sh")))
        text = work / f"lines-{n}.txt"
        text.write_text("".join(line + "\n" for line in lines))
        script = work / f"writer-{n}.sh"
        script.write_text(
            'echo $$ > "${CG:?}/cgroup.procs" || exit 5\n'
            "exec systemd-cat -t python3 sh -c "
            f'\'while IFS= read -r l; do printf "%s\\n" "$l"; done < {text}; sleep {hold_s}\'\n'
        )
        return f"sh {script}"

    def run(self, command: str, timeout_s: float = 30.0) -> subprocess.CompletedProcess[str]:
        assert self._tmp is not None
        cgroup = cgroup2_root()
        script = Path(self._tmp.name) / "driver.sh"
        script.write_text(_DRIVER.format(journald=JOURNALD, command=command))
        env = {
            **os.environ,
            "CGROUP2": str(cgroup),
            "UNIT": self.unit,
            "INVOCATION": self.invocation_id,
            "PYTHON": sys.executable,
            "PYTHONPATH": str(ROOT),
        }
        return subprocess.run(
            ["unshare", "-m", "--propagation", "private", "bash", str(script)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            check=False,
        )


READ_BACK = textwrap.dedent(
    """\
    import asyncio, json, sys
    from kvtop.sources.journal import JournalSource

    async def main(unit, want, ready):
        source = JournalSource(unit)
        got = []

        async def collect():
            nonlocal ready
            async for line in source.lines():
                got.append(line)
                if ready:  # tells the driver the first run has been read
                    open(ready, "w").close()
                    ready = None
                if len(got) >= want:
                    return

        try:  # a hang guard: it returns as soon as it has the lines it waits for
            await asyncio.wait_for(collect(), timeout=20)
        except asyncio.TimeoutError:
            pass
        source.close()
        print(json.dumps({
            "backend": source.backend_used,
            "status": source.status,
            "invocation_id": source.invocation_id,
            "restarts_seen": source.restarts_seen,
            "lines": [line.text for line in got],
            "invocations": [line.invocation_id for line in got],
        }))

    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else None))
    """
)


def read_back_result(stdout: str) -> dict[str, object]:
    """The JSON line READ_BACK printed (the last line of stdout)."""
    return json.loads(stdout.strip().splitlines()[-1])


def systemd_entry(
    unit: str, invocation_id: str | None, message: str, at_us: int
) -> dict[str, str | bytes | int]:
    """One of systemd's own lines about UNIT, as PID 1 writes it: `UNIT=` and `INVOCATION_ID=`
    name the unit and its run; its own `_SYSTEMD_UNIT` is init.scope (what `journalctl -u`
    shows beside the unit's output)."""
    fields: dict[str, str | bytes | int] = {
        "__REALTIME_TIMESTAMP": at_us,
        "__MONOTONIC_TIMESTAMP": at_us - BOOT_AT_US,
        "_BOOT_ID": BOOT_ID,
        "_SYSTEMD_UNIT": "init.scope",
        "MESSAGE": message,
        "PRIORITY": 6,
        "SYSLOG_IDENTIFIER": "systemd",
        "_PID": 1,
        "_COMM": "systemd",
        "_TRANSPORT": "journal",
        "UNIT": unit,
    }
    if invocation_id is not None:
        fields["INVOCATION_ID"] = invocation_id
    return fields
