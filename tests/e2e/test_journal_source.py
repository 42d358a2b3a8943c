"""JournalSource against real journal files (systemd-journal-remote) and a real journald."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timezone
from pathlib import Path

import pytest

from kvtop.sources.journal import JournalLine, JournalSource, normalize_unit
from tests.support.journal_tools import (
    BOOT_AT_US,
    READ_BACK,
    ROOT,
    PrivateJournald,
    interleave,
    invocation,
    journal_remote_missing,
    private_journald_missing,
    read_back_result,
    sglang_entries,
    write_journal,
)
from tests.support.stream_collector import Collector

pytestmark = pytest.mark.skipif(
    journal_remote_missing() is not None, reason=journal_remote_missing() or ""
)

WAIT = 5.0
KIMI = "sglang-kimi.service"
T0 = BOOT_AT_US + 3_600_000_000  # an hour after boot
RUN1 = [
    "[2026-01-10 09:00:00] server_args=ServerArgs(model_path='moonshotai/Kimi-K2.5', tp_size=8)",
    "[2026-01-10 09:00:05 TP0] Load weight begin. avail mem=93.21 GB",
    "[2026-01-10 09:04:40 TP0] Load weight end. type=DeepseekV3ForCausalLM, avail mem=20.30 GB",
    "[2026-01-10 09:04:41 TP0] KV Cache is allocated. #tokens: 159277, KV size: 10.42 GB",
    "[2026-01-10 09:05:30] The server is fired up and ready to roll!",
]
RUN2 = [
    "[2026-01-10 10:00:00] server_args=ServerArgs(model_path='moonshotai/Kimi-K2.5', tp_size=8, mem_fraction_static=0.9)",
    "[2026-01-10 10:00:06 TP0] Load weight begin. avail mem=93.20 GB",
    "[2026-01-10 10:04:39 TP0] Load weight end. type=DeepseekV3ForCausalLM, avail mem=20.31 GB",
    "[2026-01-10 10:04:40 TP0] KV Cache is allocated. #tokens: 187301, KV size: 12.25 GB",
]
MORE = [
    "[2026-01-10 10:05:31] The server is fired up and ready to roll!",
    "[2026-01-10 10:06:00 TP0] Decode batch. #running-req: 3, #token: 48211, token usage: 0.26",
]
RUN3 = ["[2026-01-10 11:00:00] server_args=ServerArgs(model_path='moonshotai/Kimi-K2.5')"]
BACKENDS = ["python", "journalctl"]


def noise(start_us: int, count: int, step_us: int = 1000) -> list[dict[str, str | bytes | int]]:
    """Other units logging at the same time, with their own invocations."""
    nginx = sglang_entries(
        "nginx.service",
        invocation(14),
        [f"GET /v1 {i}" for i in range(count)],
        start_us + 1,
        step_us,
    )
    llama = sglang_entries(
        "sglang-llama.service",
        invocation(15),
        [f"[llama] line {i}" for i in range(count)],
        start_us + 2,
        step_us,
    )
    return nginx + llama


def build_two_runs(directory: Path, old_entries: int = 0) -> None:
    """Older history, run 1 and run 2 of sglang-kimi, other units interleaved throughout."""
    old = []
    if old_entries:
        per = old_entries // 4
        for k in range(4):  # several old invocations, as after weeks of restarts
            old += sglang_entries(
                KIMI,
                invocation(5 + k),
                (f"old run {k} line {i}" for i in range(per)),
                BOOT_AT_US + 1_000_000 + k * per * 100,
                step_us=100,
            )
    run1 = sglang_entries(KIMI, invocation(1), RUN1, T0)
    run2 = sglang_entries(KIMI, invocation(2), RUN2, T0 + 1_000_000)
    write_journal(directory, old + interleave(run1, run2, noise(T0, 10, 200_000)))


class Follow(Collector[JournalLine]):
    """A journal source followed in the background."""

    def __init__(self, source: JournalSource) -> None:
        super().__init__(source.lines(), source.close)
        self.source = source

    async def texts(self, n: int) -> list[str]:
        return [line.text for line in await self.at_least(n)]


@pytest.fixture
async def follow() -> AsyncIterator[Callable[[JournalSource], Follow]]:
    started: list[Follow] = []

    def start(source: JournalSource) -> Follow:
        started.append(Follow(source))
        return started[-1]

    yield start
    for f in started:
        await f.stop()


async def read_latest(source: JournalSource) -> list[JournalLine]:
    async def collect() -> list[JournalLine]:
        return [line async for line in source.read_latest()]

    return await asyncio.wait_for(collect(), WAIT)


def test_normalize_unit() -> None:
    assert normalize_unit("sglang-kimi") == KIMI
    assert normalize_unit(" sglang-kimi.service ") == KIMI
    assert normalize_unit("session-3.scope") == "session-3.scope"
    assert normalize_unit("kimi.v2") == "kimi.v2.service"


@pytest.mark.parametrize("backend", BACKENDS)
async def test_reads_only_the_latest_run(tmp_path: Path, backend: str) -> None:
    build_two_runs(tmp_path)
    source = JournalSource("sglang-kimi", directory=str(tmp_path), backend=backend)
    got = await read_latest(source)
    assert [line.text for line in got] == RUN2
    assert {line.invocation_id for line in got} == {invocation(2)}
    assert source.invocation_id == invocation(2)
    assert source.status is None
    assert source.backend_used == backend
    assert got[0].realtime == datetime.fromtimestamp((T0 + 1_000_000) // 1_000_000, timezone.utc)
    assert all(line.cursor for line in got)


async def test_latest_run_after_long_history(tmp_path: Path) -> None:
    # 1,000,000 entries take journal-remote about 10 s to write: that case is in
    # bench/bench_journal_seek.py; 20,000 older entries keep the same shape here.
    build_two_runs(tmp_path, old_entries=20_000)
    source = JournalSource(KIMI, directory=str(tmp_path), backend="python")
    assert [line.text for line in await read_latest(source)] == RUN2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("where", ["new file", "same file"])
async def test_follows_new_lines_and_restarts(
    tmp_path: Path, backend: str, where: str, follow: Callable[[JournalSource], Follow]
) -> None:
    build_two_runs(tmp_path)
    name = "more.journal" if where == "new file" else "test.journal"
    f = follow(JournalSource("sglang-kimi", directory=str(tmp_path), backend=backend))
    assert await f.texts(len(RUN2)) == RUN2

    later = T0 + 60_000_000
    more = sglang_entries(KIMI, invocation(2), MORE, later)
    await asyncio.to_thread(write_journal, tmp_path, interleave(more, noise(later, 2)), name)
    assert await f.texts(len(RUN2) + len(MORE)) == RUN2 + MORE
    assert f.source.restarts_seen == 0

    restart = T0 + 120_000_000
    run3 = sglang_entries(KIMI, invocation(3), RUN3, restart, pid=5151)
    await asyncio.to_thread(write_journal, tmp_path, interleave(run3, noise(restart, 2)), name)
    assert await f.texts(len(RUN2) + len(MORE) + len(RUN3)) == RUN2 + MORE + RUN3
    assert f.source.restarts_seen == 1
    assert f.source.invocation_id == invocation(3)
    assert f.got[-1].invocation_id == invocation(3)

    # ...and the new run keeps flowing.
    await asyncio.to_thread(
        write_journal, tmp_path, sglang_entries(KIMI, invocation(3), ["after"], restart + 10), name
    )
    assert (await f.texts(len(RUN2) + len(MORE) + len(RUN3) + 1))[-1] == "after"
    assert f.source.restarts_seen == 1


@pytest.mark.parametrize("backend", BACKENDS)
async def test_unknown_unit_names_similar_ones_then_waits(
    tmp_path: Path, backend: str, follow: Callable[[JournalSource], Follow]
) -> None:
    build_two_runs(tmp_path)
    source = JournalSource("sglang-kim", directory=str(tmp_path), backend=backend)
    assert await read_latest(source) == []
    assert source.status == (
        "no journal entries for sglang-kim.service. Units with a similar name: "
        "sglang-kimi.service, sglang-llama.service"
    )

    f = follow(JournalSource("sglang-kim", directory=str(tmp_path), backend=backend))
    await f.until(lambda: f.source.status is not None)
    assert "no journal entries for sglang-kim.service" in (f.source.status or "")
    # The unit appears later (installed and started): its lines arrive, the status clears.
    appears = sglang_entries("sglang-kim.service", invocation(7), ["hello"], T0 + 300_000_000)
    await asyncio.to_thread(write_journal, tmp_path, appears, "new.journal")
    assert await f.texts(1) == ["hello"]
    assert f.source.status is None
    assert f.source.invocation_id == invocation(7)
    assert f.source.restarts_seen == 0


async def test_no_similar_units(tmp_path: Path) -> None:
    build_two_runs(tmp_path)
    source = JournalSource("vllm", directory=str(tmp_path), backend="python")
    assert await read_latest(source) == []
    assert source.status == ("no journal entries for vllm.service. Units with a similar name: none")


@pytest.mark.parametrize("backend", BACKENDS)
async def test_bad_utf8_and_embedded_newline(tmp_path: Path, backend: str) -> None:
    messages: list[str | bytes] = [
        b"bad \xff\xfe bytes",
        "Traceback:\n  File x\nValueError: y",
        "ok",
    ]
    write_journal(tmp_path, sglang_entries(KIMI, invocation(4), messages, T0))
    source = JournalSource(KIMI, directory=str(tmp_path), backend=backend)
    got = [line.text for line in await read_latest(source)]
    assert got == ["bad \ufffd\ufffd bytes", "Traceback:\n  File x\nValueError: y", "ok"]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_without_invocation_ids_starts_at_the_last_entry(
    tmp_path: Path, backend: str, follow: Callable[[JournalSource], Follow]
) -> None:
    # An imported journal, or systemd before 232: no way to tell where the run began.
    write_journal(tmp_path, sglang_entries(KIMI, None, ["x1", "x2", "x3"], T0))
    source = JournalSource(KIMI, directory=str(tmp_path), backend=backend)
    assert [line.text for line in await read_latest(source)] == ["x3"]
    assert source.invocation_id is None

    f = follow(JournalSource(KIMI, directory=str(tmp_path), backend=backend))
    assert await f.texts(1) == ["x3"]
    await asyncio.to_thread(
        write_journal, tmp_path, sglang_entries(KIMI, None, ["x4"], T0 + 10_000_000)
    )
    assert await f.texts(2) == ["x3", "x4"]
    assert f.source.restarts_seen == 0


def test_auto_falls_back_to_journalctl(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "systemd.journal", None)  # import now fails
    source = JournalSource("sglang-kimi")
    assert source.backend_used == "journalctl"
    assert "systemd Python module" in (source.backend_reason or "")
    with pytest.raises(ValueError, match="pip install systemd-python"):
        JournalSource("sglang-kimi", backend="python")
    with pytest.raises(ValueError, match="unknown journal backend"):
        JournalSource("sglang-kimi", backend="sd")


async def test_missing_directory_is_a_sentence(tmp_path: Path) -> None:
    source = JournalSource(KIMI, directory=str(tmp_path / "nope"), backend="python")
    assert await read_latest(source) == []
    assert source.status is not None and "does not exist" in source.status


# A child that runs as nobody once everything is imported (the venv's interpreter lives under
# /root, which nobody may not enter), so the journal is opened without the rights.
AS_NOBODY = textwrap.dedent(
    """\
    import asyncio, json, os, sys
    from kvtop.sources.journal import JournalSource
    import systemd.journal

    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)

    async def main(directory, backend):
        once = JournalSource("sglang-kimi", directory=directory, backend=backend)
        got = [line.text async for line in once.read_latest()]
        live = JournalSource("sglang-kimi", directory=directory, backend=backend)
        task = asyncio.ensure_future(live.lines().__anext__())
        for _ in range(500):
            if live.status is not None:
                break
            await asyncio.sleep(0.01)
        live.close()
        try:
            await asyncio.wait_for(task, 5)
        except StopAsyncIteration:
            pass
        print(json.dumps({"uid": os.getuid(), "lines": got, "once": once.status, "live": live.status}))

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


@pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root to make root-only files and drop to nobody"
)
@pytest.mark.parametrize("backend", BACKENDS)
def test_permission_denied_is_a_sentence(backend: str) -> None:
    directory = Path(tempfile.mkdtemp(prefix="kvtop-journal-perm-"))
    try:
        directory.chmod(0o755)  # nobody may list it, but not read the files in it
        build_two_runs(directory)
        for path in directory.iterdir():
            path.chmod(0o600)
        done = subprocess.run(
            [sys.executable, "-c", AS_NOBODY, str(directory), backend],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            check=False,
        )
    finally:
        shutil.rmtree(directory)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    sentence = (
        "cannot read the journal for sglang-kimi.service: permission denied. Add your user to "
        "the systemd-journal group (sudo usermod -aG systemd-journal $USER, then log in again), "
        "or run kvtop with sudo."
    )
    assert result == {"uid": 65534, "lines": [], "once": sentence, "live": sentence}


@pytest.mark.skipif(private_journald_missing() is not None, reason=private_journald_missing() or "")
def test_real_journald_end_to_end() -> None:
    first = ["[2026-01-10 09:00:00] server_args=ServerArgs(tp_size=8)", "first run ready"]
    second = [
        "[2026-01-10 10:00:00] server_args=ServerArgs(tp_size=8)",
        "[2026-01-10 10:04:40 TP0] KV Cache is allocated. #tokens: 159277, KV size: 10.42 GB",
    ]
    with PrivateJournald(KIMI, invocation(10)) as pj:
        work = Path(pj._tmp.name)  # type: ignore[union-attr]
        (work / "read_back.py").write_text(READ_BACK)
        ready, out = work / "ready", work / "out.json"
        script = f"""
{pj.writer(first)}
"$PYTHON" {work / "read_back.py"} "$UNIT" {len(first) + len(second)} {ready} > {out} &
READER=$!
for _ in $(seq 800); do [ -e {ready} ] && break; sleep 0.025; done
# As systemd does on a restart: a new invocation id for the unit's next process.
ln -sfn {invocation(11)} "/run/systemd/units/invocation:$UNIT"
{pj.writer(second)}
wait $READER
cat {out}
"""
        done = pj.run(script, timeout_s=60.0)
    assert done.returncode == 0, done.stderr
    result = read_back_result(done.stdout)
    assert result["backend"] == "python"
    assert result["status"] is None
    assert result["lines"] == first + second
    assert result["invocations"] == [invocation(10)] * len(first) + [invocation(11)] * len(second)
    assert result["invocation_id"] == invocation(11)
    assert result["restarts_seen"] == 1


@pytest.mark.parametrize("backend", BACKENDS)
async def test_directory_removed_before_following_is_said(tmp_path: Path, backend: str) -> None:
    """The directory goes after the latest start was read and before following began (the
    generator is held at its last line of the first read): the status says so all the same."""
    directory = tmp_path / "journal"
    build_two_runs(directory)
    source = JournalSource("sglang-kimi", directory=str(directory), backend=backend)
    lines = source.lines()
    got = [(await asyncio.wait_for(lines.__anext__(), WAIT)).text for _ in RUN2]
    assert got == RUN2
    shutil.rmtree(directory)  # before the generator is asked for more
    following = asyncio.ensure_future(lines.__anext__())

    async def said() -> None:
        while "was removed" not in (source.status or ""):
            assert not following.done(), "the source ended or yielded with the directory gone"
            await asyncio.sleep(0.01)

    try:
        await asyncio.wait_for(said(), WAIT)
    finally:
        source.close()
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)
        await lines.aclose()


def cut_in_half(path: Path) -> int:
    """Cut a journal file in the middle (a disk that filled, a copy that stopped)."""
    size = path.stat().st_size
    os.truncate(path, size // 2)
    return size


@pytest.mark.parametrize("backend", BACKENDS)
async def test_damaged_file_is_named(tmp_path: Path, backend: str) -> None:
    """A truncated file: systemd skips it silently; kvtop names it and the check to run."""
    build_two_runs(tmp_path)
    damaged = tmp_path / "test.journal"
    size = cut_in_half(damaged)
    source = JournalSource("sglang-kimi", directory=str(tmp_path), backend=backend)
    assert await read_latest(source) == []
    assert source.status == (
        f"journal file {damaged} (cut short: {size // 2:,} bytes of the {size:,} its header "
        "counts) is damaged; systemd skips it, so its entries cannot be read: run journalctl "
        f"--verify --file={damaged}. No journal entries for sglang-kimi.service. Units with a "
        "similar name: none"
    )
    # The unit's entries in another, whole file are read; the damaged one is still named.
    write_journal(tmp_path, sglang_entries(KIMI, invocation(2), RUN2, T0), "whole.journal")
    source = JournalSource("sglang-kimi", directory=str(tmp_path), backend=backend)
    assert [line.text for line in await read_latest(source)] == RUN2
    assert source.status is not None and source.status.startswith(f"journal file {damaged} (")


def test_damage_kinds(tmp_path: Path) -> None:
    from kvtop.sources.journal_files import damage, damaged_files, damaged_sentence

    write_journal(tmp_path, sglang_entries(KIMI, invocation(2), RUN2, T0), "whole.journal")
    head = write_journal(tmp_path, sglang_entries(KIMI, invocation(2), RUN2, T0), "head.journal")
    os.truncate(head, 100)
    (tmp_path / "text.journal").write_text("not a journal at all\n")
    assert damage(str(tmp_path / "whole.journal")) is None
    assert damaged_files(str(tmp_path)) == [
        (str(head), "cut short: 100 bytes, less than a journal header"),
        (str(tmp_path / "text.journal"), "not a journal file (no journal signature at its start)"),
    ]
    sentence = damaged_sentence(damaged_files(str(tmp_path))) or ""
    assert sentence.startswith(f"journal files {head} (cut short: 100 bytes")
    assert "are damaged; systemd skips them" in sentence


@pytest.mark.parametrize("backend", BACKENDS)
async def test_directory_removed_then_back(
    tmp_path: Path, backend: str, follow: Callable[[JournalSource], Follow]
) -> None:
    """The journal directory deleted while followed: said at once; read on when it is back."""
    directory = tmp_path / "journal"
    build_two_runs(directory)
    f = follow(JournalSource("sglang-kimi", directory=str(directory), backend=backend))
    assert await f.texts(len(RUN2)) == RUN2
    shutil.rmtree(directory)
    await f.until(lambda: "was removed" in (f.source.status or ""))
    assert f.source.status == (
        f"the journal directory {directory} was removed while kvtop read {KIMI}: nothing new "
        "can be read. What was read stays on screen; kvtop reads on when it is back."
    )
    later = T0 + 60_000_000
    more = sglang_entries(KIMI, invocation(2), MORE, later)
    await asyncio.to_thread(write_journal, directory, interleave(more, noise(later, 2)), "new")
    assert await f.texts(len(RUN2) + len(MORE)) == RUN2 + MORE
    assert f.source.status is None
    # ...and it keeps following the new files.
    await asyncio.to_thread(
        write_journal, directory, sglang_entries(KIMI, invocation(2), ["after"], later + 10), "new"
    )
    assert (await f.texts(len(RUN2) + len(MORE) + 1))[-1] == "after"
