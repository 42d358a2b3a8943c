"""The pure parts of trusting GPUs: notes by kind, whose a process is, lost GPUs' memory,
the other-processes segment and a GPU row's alert level. Plain data in, plain data out."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvtop.model.analysis import analyse
from kvtop.model.memory.gpu_memory import lost_memory, reconcile
from kvtop.model.memory.gpu_reading import GpuProcess, GpuSample
from kvtop.model.memory.process_owner import (
    ProcessInfo,
    is_servers,
    other_pids,
    other_processes_gib,
    server_identity,
)
from kvtop.model.notes import LOG_VS_NVML, RANK_ORDER, Note, collapse, gpu_span, shown_notes
from kvtop.model.snapshot import Snapshot
from kvtop.model.status.gpu_alerts import GpuAlert, gpu_alerts
from kvtop.model.status.levels import Level, Thresholds
from kvtop.model.status.watch import judged
from kvtop.sglang.story import fold_lines
from tests.support.paths import STORY_LOG
from tests.support.still import still_snapshot
from tests.support.tui_support import gpus_snapshot
from tests.unit.test_gpu_memory import TP0  # the story log's TP0


def test_gpu_span_runs_and_gaps() -> None:
    assert gpu_span([3, 0, 1, 2, 7, 5, 6]) == "0–3, 5–7"
    assert gpu_span([4]) == "4"
    assert gpu_span([0, 2]) == "0, 2"


def test_notes_of_one_kind_collapse_into_one_line() -> None:
    per_gpu = [
        Note(LOG_VS_NVML, f"GPU {i}: the log itemises {80 + i} GiB more", (i,), "log > NVML")
        for i in range(8)
    ]
    advisory = Note(RANK_ORDER, "ranks mapped to GPUs by order", advisory=True)
    notes = collapse([*per_gpu, advisory, advisory])
    assert [n.text for n in notes] == ["GPU 0–7: log > NVML", "ranks mapped to GPUs by order"]
    assert notes[0].gpus == tuple(range(8))
    assert collapse(per_gpu[:1]) == (per_gpu[0],)  # one note keeps its own numbers
    assert shown_notes(notes, {RANK_ORDER}) == notes[:1]  # a dismissed advisory is left out


def test_lost_memory_has_no_numbers_and_no_segments() -> None:
    memory = lost_memory()
    assert not memory.known and memory.segments() == []
    assert memory.runtime_gib is None and memory.free_gib is None
    assert memory.other_processes_gib is None


def test_other_processes_leave_runtime() -> None:
    alone = reconcile(95.59, 7.30, TP0)
    shared = reconcile(95.59, 7.30 - 4.0, TP0, 4.0)
    assert shared.runtime_gib == pytest.approx(alone.runtime_gib)  # the 4 GiB are not runtime
    names = [name for name, _ in shared.segments()]
    # The server's segments first (the reserve mark ends its KV cache), then another's, then free.
    assert names[:3] == ["baseline", "weights", "KV cache"]
    assert names[-2:] == ["other processes", "free"]
    assert shared.reserve_starts_at_gib is not None
    before_reserve = 0.0
    for name, value in shared.segments():
        if name in ("baseline", "weights", "KV cache"):
            before_reserve += value
    assert before_reserve <= shared.reserve_starts_at_gib + 0.05  # the mark is not in the KV
    assert sum(v for _, v in shared.segments()) == pytest.approx(95.59)
    assert "other processes" not in [n for n, _ in alone.segments()]  # 0.0: no segment
    no_log = reconcile(80.0, 30.0, None, 4.0)
    assert no_log.runtime_gib == 46.0 and no_log.other_processes_gib == 4.0


def test_whose_process_by_title_by_order_and_unseen() -> None:
    rank = GpuProcess(10, 80.0)
    stranger = GpuProcess(11, 4.0)
    helper = GpuProcess(12, 0.5)
    ranks = {10: "TP0"}
    infos = {
        10: ProcessInfo("sglang::scheduler_TP0", 1.0, ancestors=(12, 5)),
        11: ProcessInfo("python train.py", 2.0, ancestors=(5,)),
        12: ProcessInfo("python -m sglang.launch_server --tp 8", 1.0, ancestors=(5,)),
    }
    # by title: the rank and the server's main process (its parent) are the server's; the
    # trainer (a sibling under the same shell) is not
    assert other_pids([rank, stranger, helper], True, ranks, infos) == {11}
    # by order (no titles, nothing visible): the largest process is the rank's own
    assert other_pids([stranger, rank], True, {}, {}) == {11}
    # a GPU without a rank: only a visible process that is not the server's is another's
    assert other_pids([rank, stranger], False, {}, {11: infos[11]}) == {11}
    assert other_pids([stranger], False, {}, {}) == frozenset()


def test_whose_process_by_tree_and_unit_never_by_start_time() -> None:
    ranks = {10: "TP0"}
    infos = {
        10: ProcessInfo("sglang::scheduler_TP0", 500.0, (20,), "sglang-kimi.service"),
        20: ProcessInfo("python -m sglang.launch_server", 400.0, (1,), "sglang-kimi.service"),
        # a compile worker forked by a rank: the server's through its tree
        30: ProcessInfo("python -c compile", 600.0, (10, 20), "sglang-kimi.service"),
        # the same unit, another branch (an ExecStartPre helper holding a context)
        31: ProcessInfo("python warmup.py", 300.0, (), "sglang-kimi.service"),
        # another user's SGLang, started long before this server: not this server's
        40: ProcessInfo("python -m sglang.launch_server --port 31000", 1.0, (7,), "other.service"),
        # another's notebook in a user session: started first, allocated any time
        41: ProcessInfo("jupyter-kernel", 2.0, (8,), "session-3.scope"),
    }
    server = server_identity(ranks, infos)
    assert server.roots == {20} and server.units == {"sglang-kimi.service"}
    mine = {pid for pid, info in infos.items() if is_servers(pid, ranks.get(pid), info, server)}
    assert mine == {10, 20, 30, 31}
    procs = [GpuProcess(pid, 1.0) for pid in infos]
    assert other_pids(procs, True, ranks, infos) == {40, 41}
    # a user's manager or session shared with the server says nothing
    shared = {**infos, 10: replace(infos[10], unit="user@1000.service")}
    shared[41] = replace(infos[41], unit="user@1000.service")
    assert 41 in other_pids(procs, True, ranks, shared)
    # a process kvtop cannot see while ranks are named by title: the largest is the rank's
    hidden = [GpuProcess(10, 80.0), GpuProcess(50, 70.0), GpuProcess(51, 2.0)]
    assert other_pids(hidden[1:], True, ranks, infos) == {51}


def test_other_processes_gib_by_identity_never_by_start_time() -> None:
    procs = [GpuProcess(11, 4.0), GpuProcess(13, None)]
    assert other_processes_gib(procs, frozenset({11})) == 4.0
    assert other_processes_gib(procs, frozenset({11, 13})) is None
    assert other_processes_gib(procs, frozenset()) == 0.0


def test_another_process_already_in_the_baseline_is_counted_once() -> None:
    """The trainer held 4 GiB when the rank measured its free memory before loading: the
    baseline would hold it too. It is counted once, in other processes, and nothing goes
    below zero; the bar still adds up to the card."""
    alone = reconcile(95.59, 7.30, TP0)
    assert TP0.pre_load_free_gib is not None
    early = replace(TP0, pre_load_free_gib=TP0.pre_load_free_gib - 4.0)
    memory = reconcile(95.59, 7.30 - 4.0, early, 4.0)
    assert memory.other_processes_gib == 4.0
    # Which part of the baseline the trainer held is what keeps runtime at zero or more: the
    # server's baseline and runtime together are what they are without the trainer.
    assert memory.baseline_gib is not None and memory.runtime_gib is not None
    assert alone.baseline_gib is not None and alone.runtime_gib is not None
    assert memory.baseline_gib + memory.runtime_gib == pytest.approx(
        alone.baseline_gib + alone.runtime_gib, abs=1e-3
    )
    assert sum(v for _, v in memory.segments()) == pytest.approx(95.59)
    assert all(v >= 0 for _, v in memory.segments())


def test_a_negative_runtime_is_unknown_and_said() -> None:
    """The server's memory released while the log still itemises weights and KV: runtime
    would be −87 GiB; it is unknown, and the excess is kept for the note. Rounding below zero
    reads 0.00."""
    released = reconcile(95.59, 95.0, TP0)
    assert released.runtime_gib is None
    assert released.log_excess_gib is not None and released.log_excess_gib > 80
    assert all(v >= 0 for _, v in released.segments())
    alone = reconcile(95.59, 7.30, TP0)
    assert alone.runtime_gib is not None
    rounding = reconcile(95.59, 7.30 + alone.runtime_gib + 0.2, TP0)
    assert (rounding.runtime_gib, rounding.log_excess_gib) == (0.0, None)


def test_gpu_alert_levels_follow_the_alert_rule() -> None:
    """The demo, ready, with one GPU hot, one warm, one at its power limit, one short of free
    memory, one lost and one throttled for heat: each row's level is the alert rule's, cell by
    cell."""
    snapshot = still_snapshot()
    gpus = list(snapshot.gpus)

    def change(i: int, **fields: object) -> None:
        gpus[i] = replace(gpus[i], sample=replace(gpus[i].sample, **fields))

    change(1, temperature_c=94)
    change(2, temperature_c=85)
    change(3, power_w=600.0, power_limit_w=600.0, clock_event_reasons=0x4)  # normal under load
    change(6, clock_event_reasons=0x40)  # HW thermal slowdown
    change(4, free_gib=1.0)
    gpus[5] = replace(gpus[5], sample=replace(gpus[5].sample, status="lost"), memory=lost_memory())
    found = gpu_alerts(judged(replace(snapshot, gpus=tuple(gpus)), Thresholds()))
    assert found[0] == GpuAlert(Level.OK)
    assert (found[1].level, found[1].temperature) == (Level.CRITICAL, Level.CRITICAL)
    assert "94 °C" in found[1].reasons[0]
    assert (found[2].level, found[2].temperature) == (Level.WARNING, Level.WARNING)
    assert found[3] == GpuAlert(Level.OK)
    assert found[6].level == Level.WARNING and "HW thermal slowdown" in found[6].reasons[0]
    assert (found[4].level, found[4].free) == (Level.WARNING, Level.WARNING)
    assert found[5].level == Level.CRITICAL and "lost" in found[5].reasons[0]
    calmer = gpu_alerts(
        judged(replace(snapshot, gpus=tuple(gpus)), Thresholds(temperature_warning_c=90.0))
    )
    assert calmer[2].level == Level.OK  # the thresholds the user set


def _story_snapshot(samples: list[GpuSample], ranks: dict[int, str | None]) -> Snapshot:
    return gpus_snapshot(
        analyse(fold_lines(STORY_LOG.read_text().splitlines()), "story.log"), samples, ranks
    )


def _gpu(index: int, pid: int | None, status: str = "ok") -> GpuSample:
    procs = () if pid is None else (GpuProcess(pid, 130.0),)
    return GpuSample(
        index, "NVIDIA H200", f"GPU-{index}", "", 140.0, 132.0, 7.4, 0.5,
        None, None, None, None, None, processes=procs, status=status,
    )  # fmt: skip


def test_an_unreadable_gpu_keeps_its_rank_when_titles_place_the_others() -> None:
    """Ranks placed by the schedulers' titles: GPU 3 unreadable lists no process, and the one
    rank left over is its own (the alert can name it); no rank is missing."""
    ranks = {100 + i: f"TP{i}" for i in range(8) if i != 3}
    samples = [_gpu(i, None if i == 3 else 100 + i, "error" if i == 3 else "ok") for i in range(8)]
    snapshot = _story_snapshot(samples, ranks)
    assert snapshot.rank_mapping == "process"
    assert snapshot.gpus[3].ranks == ("TP3",)
    assert snapshot.missing_ranks == ()


def test_seven_gpus_for_a_tp8_log_miss_tp7() -> None:
    ranks = {100 + i: f"TP{i}" for i in range(7)}
    snapshot = _story_snapshot([_gpu(i, 100 + i) for i in range(7)], ranks)
    assert snapshot.missing_ranks == ("TP7",)
    by_order = _story_snapshot([_gpu(i, None) for i in range(7)], {})
    assert by_order.missing_ranks == ("TP7",)
    assert _story_snapshot([_gpu(i, None) for i in range(8)], {}).missing_ranks == ()
