"""The orphan rules on their own: an SGLang child adopted by PID 1 is an orphan, a scheduler
under its main process is one only once the log says the server ended, and an orphan is never
taken for the rank's own process when the ranks' titles cannot be seen."""

from __future__ import annotations

from datetime import datetime

from kvtop.model.memory.gpu_reading import GpuProcess
from kvtop.model.memory.process_owner import ProcessInfo, other_pids
from kvtop.model.snapshot import GpuProcessView
from kvtop.model.status.orphans import LogEnd, is_orphan, kill_command

STARTED = datetime(2026, 9, 14, 20, 0, 0).timestamp()


def view(title: str | None, adopted: bool, started_at: float | None = STARTED) -> GpuProcessView:
    return GpuProcessView(4101, 70.0, None, command=title, started_at=started_at, adopted=adopted)


def test_an_adopted_sglang_child_is_an_orphan_while_the_server_serves() -> None:
    assert is_orphan(view("sglang::scheduler_TP0", adopted=True), LogEnd(False))
    assert is_orphan(view("sglang::detokenizer", adopted=True), LogEnd(False))
    # Adopted but not SGLang's own title (a trainer, a launcher), or not visible: never.
    assert not is_orphan(view("python3 train.py", adopted=True), LogEnd(False))
    assert not is_orphan(view(None, adopted=True), LogEnd(False))


def test_under_its_parent_it_is_one_only_after_the_log_says_the_server_ended() -> None:
    scheduler = view("sglang::scheduler_TP0", adopted=False)
    assert not is_orphan(scheduler, LogEnd(False))
    assert is_orphan(scheduler, LogEnd(True, datetime(2026, 9, 14, 21, 0, 0)))
    assert is_orphan(scheduler, LogEnd(True, None))  # untimed: the log's word stands
    # Started after the log's end: another start's process.
    assert not is_orphan(scheduler, LogEnd(True, datetime(2026, 9, 14, 19, 0, 0)))


def test_the_kill_command_names_each_pid_once_in_order() -> None:
    assert kill_command([4102, 4101, 4102]) == (
        "kill 4101 4102 (then kill -9 4101 4102 if still there after 10 s)"
    )


def test_an_orphan_is_not_the_ranks_own_process_when_titles_cannot_be_seen() -> None:
    rank, orphan = 4_000_003, 4101  # the rank's process is another PID namespace's
    processes = [GpuProcess(rank, 131.84), GpuProcess(orphan, 2.0)]
    infos = {orphan: ProcessInfo("sglang::detokenizer", STARTED, (), None, adopted=True)}
    assert other_pids(processes, True, {}, infos) == frozenset({orphan})
    # The same process under a live server's main process stays the server's (rule 2).
    infos = {orphan: ProcessInfo("sglang::detokenizer", STARTED, (), None, adopted=False)}
    assert other_pids(processes, True, {}, infos) == frozenset({rank})
