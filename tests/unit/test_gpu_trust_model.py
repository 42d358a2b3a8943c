"""The pure parts of trusting GPUs: notes by kind, whose a process is, lost GPUs' memory,
the other-processes segment and a GPU row's alert level. Plain data in, plain data out."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.support.still import still_snapshot
from tests.unit.test_gpu_memory import TP0  # the story log's TP0
from tui.model.memory.gpu_memory import lost_memory, reconcile
from tui.model.memory.gpu_reading import GpuProcess
from tui.model.memory.process_owner import ProcessInfo, other_pids, other_processes_gib
from tui.model.status.gpu_alerts import GpuAlert, gpu_alerts
from tui.model.status.levels import Level, Thresholds
from tui.model.status.notes import LOG_VS_NVML, RANK_ORDER, Note, collapse, gpu_span, shown_notes
from tui.model.status.watch import judged


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
    assert names[:3] == ["baseline", "other processes", "weights"]
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
        10: ProcessInfo("sglang::scheduler_TP0", 1.0),
        11: ProcessInfo("python train.py", 2.0),
        12: ProcessInfo("python -m sglang.launch_server --tp 8", 1.0),
    }
    # by title: the rank and SGLang's own helper are the server's, the trainer is not
    assert other_pids([rank, stranger, helper], True, ranks, infos) == {11}
    # by order (no titles, nothing visible): the largest process is the rank's own
    assert other_pids([stranger, rank], True, {}, {}) == {11}
    # a GPU without a rank: only a visible, non-SGLang process is another's
    assert other_pids([rank, stranger], False, {}, {11: infos[11]}) == {11}
    assert other_pids([stranger], False, {}, {}) == frozenset()


def test_other_processes_gib_unknown_and_in_baseline() -> None:
    procs = [GpuProcess(11, 4.0), GpuProcess(13, None)]
    assert other_processes_gib(procs, frozenset({11}), {}, None) == 4.0
    assert other_processes_gib(procs, frozenset({11, 13}), {}, None) is None
    before = {11: ProcessInfo("python train.py", 100.0)}
    # running before the rank read its pre-load free memory: in baseline already
    assert other_processes_gib(procs, frozenset({11}), before, 200.0) == 0.0
    assert other_processes_gib(procs, frozenset({11}), before, 50.0) == 4.0


def test_gpu_alert_levels_follow_the_alert_rule() -> None:
    """The demo, ready, with one GPU hot, one warm, one at its power limit, one short of free
    memory and one lost: each row's level is the alert rule's, cell by cell."""
    snapshot = still_snapshot()
    gpus = list(snapshot.gpus)

    def change(i: int, **fields: object) -> None:
        gpus[i] = replace(gpus[i], sample=replace(gpus[i].sample, **fields))

    change(1, temperature_c=94)
    change(2, temperature_c=85)
    change(3, power_w=599.0, power_limit_w=600.0)
    change(4, free_gib=1.0)
    gpus[5] = replace(gpus[5], sample=replace(gpus[5].sample, status="lost"), memory=lost_memory())
    found = gpu_alerts(judged(replace(snapshot, gpus=tuple(gpus)), Thresholds()))
    assert found[0] == GpuAlert(Level.OK)
    assert (found[1].level, found[1].temperature) == (Level.CRITICAL, Level.CRITICAL)
    assert "94 °C" in found[1].reasons[0]
    assert (found[2].level, found[2].temperature) == (Level.WARNING, Level.WARNING)
    assert (found[3].level, found[3].power, found[3].temperature) == (
        Level.CRITICAL,
        Level.CRITICAL,
        Level.OK,
    )
    assert (found[4].level, found[4].free) == (Level.WARNING, Level.WARNING)
    assert found[5].level == Level.CRITICAL and "lost" in found[5].reasons[0]
    calmer = gpu_alerts(
        judged(replace(snapshot, gpus=tuple(gpus)), Thresholds(temperature_warning_c=90.0))
    )
    assert calmer[2].level == Level.OK  # the thresholds the user set
