"""LogFollower against real files changing under it, and against a real stdin pipe."""

from __future__ import annotations

import asyncio
import io
import os
import shlex
import subprocess
import sys
import textwrap
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from kvtop.sources.log_follow import LogFollower
from kvtop.sources.log_stream import LineSplitter
from tests.support.stream_collector import Collector

POLL = 0.02
WAIT = 5.0


class Reader(Collector[str]):
    """A log follower followed in the background."""

    def __init__(self, follower: LogFollower) -> None:
        super().__init__(follower.lines(), follower.close)
        self.follower = follower

    async def lines(self, n: int) -> list[str]:
        return await self.at_least(n)


@pytest.fixture
async def follow(tmp_path: Path) -> AsyncIterator[Callable[..., Reader]]:
    readers: list[Reader] = []

    def start(path: Path, **kwargs: object) -> Reader:
        reader = Reader(LogFollower(str(path), poll_interval_s=POLL, **kwargs))  # type: ignore[arg-type]
        readers.append(reader)
        return reader

    yield start
    for reader in readers:
        await reader.stop()


async def positioned_at(path: Path, offset: int) -> None:
    """Wait until this process holds PATH open with its file position at OFFSET: what the
    follower has seeked to or read up to, as the kernel tells it (/proc/self/fdinfo)."""
    for _ in range(int(WAIT / POLL)):
        for fd in os.listdir("/proc/self/fd"):
            try:
                same = os.readlink(f"/proc/self/fd/{fd}") == str(path)
                info = Path(f"/proc/self/fdinfo/{fd}").read_text() if same else ""
            except OSError:
                continue
            if f"pos:\t{offset}\n" in info:
                return
        await asyncio.sleep(POLL)
    pytest.fail(f"the follower never stood at offset {offset} of {path}")


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as fh:
        fh.write(data)


async def test_follows_appends(tmp_path: Path, follow) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(b"one\n")
    reader = follow(log)
    assert await reader.lines(1) == ["one\n"]
    append(log, b"two\nthree\n")
    assert await reader.lines(3) == ["one\n", "two\n", "three\n"]
    assert reader.follower.status is None


async def test_from_end_skips_old_text(tmp_path: Path, follow) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(b"old\n")
    reader = follow(log, from_start=False)
    await positioned_at(log, len(b"old\n"))  # opened and at the end: "new" comes after
    append(log, b"new\n")
    assert await reader.lines(1) == ["new\n"]


async def test_partial_line_held_until_newline(tmp_path: Path, follow) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(b"whole\npart")
    reader = follow(log)
    await reader.lines(1)
    await positioned_at(log, len(b"whole\npart"))  # "part" was read, and is held back
    await asyncio.sleep(POLL * 5)  # a few more rounds in which it could wrongly come out
    assert reader.got == ["whole\n"]
    append(log, b"ial\n")
    assert await reader.lines(2) == ["whole\n", "partial\n"]


async def test_crlf_and_bare_cr(tmp_path: Path, follow) -> None:
    log = tmp_path / "a.log"
    # The "\r" ending the first write must not become an extra empty line when "\n" follows.
    log.write_bytes(b"a\r\nb\r")
    reader = follow(log)
    await reader.lines(1)
    append(log, b"\n 10%\r 20%\r 30%\ndone\n")
    assert await reader.lines(6) == ["a\n", "b\n", " 10%\n", " 20%\n", " 30%\n", "done\n"]


def test_splitter_matches_universal_newlines() -> None:
    data = b"x\r\n\r\ny\rz\n\n\r\rw"
    splitter = LineSplitter()
    # Byte by byte is the worst case for a "\r\n" split across reads.
    got = [line for i in range(len(data)) for line in splitter.feed(data[i : i + 1])]
    got += splitter.flush()
    want = list(io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", newline=None))
    assert got == [line if line.endswith("\n") else line + "\n" for line in want]


async def test_invalid_utf8_is_replaced(tmp_path: Path, follow) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(b"bad \xff\xfe here\n")
    reader = follow(log)
    append(log, "caf\u00e9 ok\n".encode())
    assert await reader.lines(2) == ["bad \ufffd\ufffd here\n", "caf\u00e9 ok\n"]


async def test_truncate_in_place(tmp_path: Path, follow) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(b"first run line 1\nfirst run line 2\n")
    reader = follow(log)
    await reader.lines(2)
    os.truncate(log, 0)
    await reader.until(lambda: reader.follower.notices)
    assert "truncated" in reader.follower.notices[-1]
    append(log, b"second\n")
    assert (await reader.lines(3))[2:] == ["second\n"]


async def test_rotation_keeps_order(tmp_path: Path, follow) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(b"1\n")
    reader = follow(log)
    await reader.lines(1)
    with open(log, "ab") as old:
        old.write(b"2\n")
        old.flush()
        os.rename(log, tmp_path / "a.log.1")
        # Still written to the old file after the rename, as a logger does until it reopens.
        old.write(b"3\n")
    log.write_bytes(b"4\n")
    append(log, b"5\n")
    assert await reader.lines(5) == ["1\n", "2\n", "3\n", "4\n", "5\n"]
    await reader.until(lambda: reader.follower.notices)
    assert "rotated" in reader.follower.notices[-1]
    assert reader.follower.status is None


async def test_delete_then_recreate(tmp_path: Path, follow) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(b"before\n")
    reader = follow(log)
    await reader.lines(1)
    log.unlink()
    want = f"log file {log} was removed; waiting for it to come back"
    await reader.until(lambda: reader.follower.status == want)
    log.write_bytes(b"after\n")
    assert await reader.lines(2) == ["before\n", "after\n"]
    await reader.until(lambda: reader.follower.status is None)


async def test_missing_at_start_then_created(tmp_path: Path, follow) -> None:
    log = tmp_path / "later.log"
    reader = follow(log, from_start=False)
    await reader.until(lambda: reader.follower.status is not None)
    assert "does not exist yet" in reader.follower.status
    assert "waiting" in reader.follower.status
    # A file that appears after start is read whole, even with from_start=False.
    log.write_bytes(b"hello\n")
    assert await reader.lines(1) == ["hello\n"]
    await reader.until(lambda: reader.follower.status is None)


async def test_permission_denied_then_fixed(tmp_path: Path, monkeypatch, follow) -> None:
    # Tests often run as root, which chmod cannot lock out, so the denial is simulated.
    monkeypatch.setattr("kvtop.sources.log_follow.PERMISSION_RETRY_S", POLL)
    denied = [True]
    real_open = os.open

    def fake_open(path, flags, *args):
        if denied[0]:
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, flags, *args)

    monkeypatch.setattr("kvtop.sources.log_follow.os.open", fake_open)
    log = tmp_path / "a.log"
    log.write_bytes(b"secret\n")
    reader = follow(log)
    await reader.until(lambda: reader.follower.status is not None)
    assert "permission denied" in reader.follower.status
    assert "sudo" in reader.follower.status
    denied[0] = False
    assert await reader.lines(1) == ["secret\n"]
    await reader.until(lambda: reader.follower.status is None)


async def test_close_ends_iteration_while_waiting(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(b"")
    follower = LogFollower(str(log), poll_interval_s=60)
    got = []

    async def run() -> None:
        async for line in follower.lines():
            got.append(line)

    task = asyncio.ensure_future(run())
    await asyncio.sleep(0.05)
    follower.close()
    await asyncio.wait_for(task, WAIT)
    assert got == []


def test_notices_are_bounded() -> None:
    follower = LogFollower("x")
    for i in range(120):
        follower._notice(f"n{i}")
    assert len(follower.notices) == 50
    assert follower.notices[-1] == "n119"


def test_stdin_until_eof() -> None:
    child = textwrap.dedent(
        """
        import asyncio
        from kvtop.sources.log_follow import LogFollower

        async def main():
            follower = LogFollower("-")
            async for line in follower.lines():
                print("LINE", ascii(line))
            print("STATUS", follower.status)

        asyncio.run(main())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", child],
        input=b"alpha\r\nbeta\rgamma \xff\ntail",
        capture_output=True,
        timeout=WAIT,
        cwd=Path(__file__).resolve().parents[2],
        check=True,
    )
    assert done.stdout.decode().splitlines() == [
        "LINE 'alpha\\n'",
        "LINE 'beta\\n'",
        "LINE 'gamma \\ufffd\\n'",
        "LINE 'tail\\n'",
        "STATUS stdin closed: no more log lines will arrive",
    ]


async def test_on_the_beat_reads_once_per_tick_and_idles_without_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a lane the follower reads at each tick only; a file that has not grown costs no hop
    to a worker thread (counted by wrapping the real asyncio.to_thread), and growth and
    truncation are still read."""
    from kvtop.sources.pacing import Pacer

    hops = 0
    real_to_thread = asyncio.to_thread

    async def counting(func, /, *args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal hops
        hops += 1
        return await real_to_thread(func, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counting)
    log = tmp_path / "sglang.log"
    log.write_text("one\ntwo\n")
    pacer = Pacer()
    follower = LogFollower(str(log), lane=pacer.lane("log"))
    got: list[str] = []

    async def run() -> None:
        async for line in follower.lines():
            got.append(line)

    task = asyncio.create_task(run())

    async def tick() -> None:
        await asyncio.sleep(0.01)
        pacer.tick()
        assert await pacer.settled(WAIT)

    await tick()
    assert got == ["one\n", "two\n"]
    idle_from = hops
    for _ in range(10):
        await tick()
    assert hops == idle_from  # ten ticks, nothing new, no thread
    with log.open("a") as handle:
        handle.write("three\n")
    await tick()
    assert got[-1] == "three\n"
    log.write_text("new\n")  # truncated and rewritten shorter
    for _ in range(3):
        await tick()
    assert got[-1] == "new\n" and follower.notices
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


# -- rewritten in place -------------------------------------------------------------------------
async def test_rewritten_in_place_longer_is_read_from_the_start(tmp_path: Path, follow) -> None:
    """A new run written over the old one without the file ever getting shorter than what was
    read (truncate and rewrite within one refresh): told by content, read from its start."""
    log = tmp_path / "a.log"
    old = b"[2026-02-27 09:00:00] run one: mem_fraction_static=0.88\n"
    log.write_bytes(old)
    reader = follow(log)
    await reader.lines(1)
    await positioned_at(log, len(old))
    new = b"[2026-03-01 10:00:00] run two: mem_fraction_static=0.77, pool 123456\nrun two more\n"
    with log.open("r+b") as fh:  # in place: the size never drops below what was read
        fh.write(new)
    got = await reader.lines(3)
    assert got[1:] == [line.decode() + "\n" for line in new.splitlines()]
    assert "was rewritten in place" in reader.follower.notices[-1]
    assert reader.follower.status is None


async def test_rewrite_with_the_same_first_bytes_is_told_by_the_last_read(
    tmp_path: Path, follow
) -> None:
    """Runs that begin with the same banner differ where kvtop had read to."""
    log = tmp_path / "a.log"
    banner = b"SGLang banner " * 100 + b"\n"  # longer than the head kvtop compares
    log.write_bytes(banner + b"old run ends here\n")
    reader = follow(log)
    await reader.lines(2)
    await positioned_at(log, log.stat().st_size)
    with log.open("r+b") as fh:
        fh.write(banner + b"new run line one!\nnew run line two\n")
    got = await reader.lines(5)
    assert got[2:] == [banner.decode(), "new run line one!\n", "new run line two\n"]


async def test_appends_are_not_a_rewrite(tmp_path: Path, follow) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(b"x" * 5000 + b"\n")
    reader = follow(log)
    for i in range(20):
        append(log, f"line {i}\n".encode())
        await reader.lines(i + 2)
    assert reader.follower.notices == []
    assert len(reader.got) == 21


# -- streams: FIFOs, pipes, devices -------------------------------------------------------------
async def test_fifo_is_read_as_a_stream_until_its_writer_closes(tmp_path: Path, follow) -> None:
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    reader = follow(fifo)
    await reader.until(lambda: "FIFO with no writer" in (reader.follower.status or ""))
    writer = await asyncio.to_thread(os.open, fifo, os.O_WRONLY)  # waits for kvtop's open
    os.write(writer, b"one\ntwo\n")
    assert await reader.lines(2) == ["one\n", "two\n"]
    assert reader.follower.status is None
    os.write(writer, b"three\npartial")
    os.close(writer)  # the writer finishes: the end of the stream, not a truncation
    await reader.until(lambda: reader.follower.status is not None)
    assert reader.got == ["one\n", "two\n", "three\n", "partial\n"]
    assert reader.follower.notices == []
    assert reader.follower.status.startswith(f"{fifo} ended: the program writing it closed it")


async def test_fifo_without_a_writer_closes_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "quiet.fifo"
    os.mkfifo(fifo)
    follower = LogFollower(str(fifo), poll_interval_s=60)
    reader = Reader(follower)
    await reader.until(lambda: follower.status is not None)
    await reader.stop()  # raises on timeout: close() must not wait for a writer
    unblock = os.open(fifo, os.O_RDWR)  # a writer (Linux): lets the parked thread go
    os.close(unblock)


async def test_quiet_pipe_closes_at_once() -> None:
    read_end, write_end = os.pipe()
    try:
        follower = LogFollower(f"/dev/fd/{read_end}", poll_interval_s=60)
        reader = Reader(follower)
        os.write(write_end, b"hello\n")
        assert await reader.lines(1) == ["hello\n"]
        await reader.stop()  # the pipe stays open and quiet: close() must not wait on a read
    finally:
        os.close(write_end)
        os.close(read_end)


async def test_process_substitution_reads_to_the_end(tmp_path: Path) -> None:
    """`--log-file <(cmd)`: the writer finishes, the follower says so and ends (no false
    truncation, no failed seek)."""
    child = textwrap.dedent(
        """
        import asyncio, sys
        from kvtop.sources.log_follow import LogFollower

        async def main():
            follower = LogFollower(sys.argv[1], poll_interval_s=0.02)
            async for line in follower.lines():
                print("LINE", line.strip())
            print("STATUS", follower.status)
            print("NOTICES", follower.notices)

        asyncio.run(main())
        """
    )
    script = tmp_path / "child.py"
    script.write_text(child)
    done = subprocess.run(
        ["bash", "-c", f'{shlex.quote(sys.executable)} {script} <(printf "a\\nb\\n")'],
        capture_output=True,
        text=True,
        timeout=WAIT * 4,
        cwd=Path(__file__).resolve().parents[2],
        check=True,
    )
    out = done.stdout.splitlines()
    assert out[:2] == ["LINE a", "LINE b"], done
    assert out[2].startswith("STATUS /dev/fd/") and "ended: the program writing it closed" in out[2]
    assert out[3] == "NOTICES []"


async def test_endless_device_is_bounded_and_closes(tmp_path: Path) -> None:
    """/dev/zero never ends and holds no log: the follower says so and reads nothing (no stream
    thread burning a core), and close() still ends it."""
    streams = sum(t.name == "kvtop-log-stream" for t in threading.enumerate())
    follower = LogFollower("/dev/zero", poll_interval_s=60)
    reader = Reader(follower)
    await reader.until(lambda: follower.status is not None)
    assert "never ends" in str(follower.status)
    assert sum(t.name == "kvtop-log-stream" for t in threading.enumerate()) <= streams
    await reader.stop()
    assert reader.got == []
