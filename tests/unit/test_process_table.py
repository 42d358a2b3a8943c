"""The process table's model: whose each row is, its orders, its columns for each width, the
overview's line and the host line."""

from __future__ import annotations

import pytest

from kvtop.model.analysis import analyse
from kvtop.model.build_snapshot import SnapshotInputs, build_snapshot
from kvtop.model.memory.gpu_reading import GpuProcess, GpuSample, NvmlReading
from kvtop.model.memory.process_owner import ProcessInfo
from kvtop.model.processes.columns import COMMAND_LEAST, UNREADABLE, cells, elapsed, table_lines
from kvtop.model.processes.record import ProcessFacts, ProcessRecord
from kvtop.model.processes.summary import host_line, processes_summary
from kvtop.model.processes.table import (
    ORDER_KEYS,
    ProcessRow,
    Whose,
    next_order,
    process_rows,
    sorted_rows,
)
from kvtop.model.snapshot import HostMemory, ProcessUsage
from kvtop.sglang.story import fold_lines
from tests.support.tui_support import FOREIGN_PID, HIDDEN_PID, processes_snapshot


@pytest.fixture(scope="module")
def rows() -> tuple[ProcessRow, ...]:
    return process_rows(processes_snapshot())


def _by_pid(rows: tuple[ProcessRow, ...], pid: int) -> ProcessRow:
    return next(r for r in rows if r.pid == pid)


def test_every_gpu_process_is_a_row_with_whose_it_is(rows: tuple[ProcessRow, ...]) -> None:
    assert [(r.gpu, r.whose_word) for r in rows if r.whose == Whose.RANK] == [
        (i, f"TP{i}") for i in range(8)
    ]
    trainer = _by_pid(rows, FOREIGN_PID)
    assert (trainer.gpu, trainer.whose_word, trainer.foreign, trainer.readable) == (
        2,
        "foreign",
        True,
        True,
    )
    assert (trainer.user, trainer.gpu_memory_gib, trainer.cpu_percent) == ("bob", 4.0, 312.5)
    assert trainer.elapsed_s == 3725.0
    # On a GPU of the server's, a process kvtop cannot read that is not the rank is another's.
    hidden = _by_pid(rows, HIDDEN_PID)
    assert (hidden.foreign, hidden.readable, hidden.user, hidden.elapsed_s) == (
        True,
        False,
        None,
        None,
    )
    assert cells(hidden)["command"] == UNREADABLE
    assert (cells(hidden)["cpu"], cells(hidden)["rss"], cells(hidden)["user"]) == ("—",) * 3


def _gpu(index: int, *procs: GpuProcess) -> GpuSample:
    return GpuSample(
        index=index,
        name="NVIDIA H200",
        uuid=f"GPU-{index}",
        pci_bus_id="",
        total_gib=140.0,
        used_gib=10.0,
        free_gib=130.0,
        reserved_gib=0.5,
        utilization_pct=None,
        memory_utilization_pct=None,
        temperature_c=None,
        power_w=None,
        power_limit_w=None,
        processes=procs,
    )


def _facts(*records: ProcessRecord) -> ProcessFacts:
    return ProcessFacts({r.pid: r for r in records})


def test_on_a_gpu_without_a_rank_an_unreadable_process_is_nobodys_known() -> None:
    """Rule 4 of whose a process is: kvtop claims nothing about one it cannot see; one it
    can see and that is not the server's is foreign; a rank's child is the server's."""
    samples = [
        _gpu(0, GpuProcess(100, 60.0), GpuProcess(101, 1.0)),
        _gpu(1, GpuProcess(200, 2.0), GpuProcess(201, 3.0)),
    ]
    snapshot = build_snapshot(
        SnapshotInputs(
            analyse(fold_lines([]), "empty.log"),
            taken_at=1000.0,
            nvml=NvmlReading(tuple(samples), True, None, None),
            processes=_facts(
                ProcessRecord(
                    100,
                    "TP0",
                    info=ProcessInfo("sglang::scheduler_TP0", 400.0, (50,)),
                    usage=ProcessUsage(99.5, 6.0),
                ),
                ProcessRecord(
                    101,
                    info=ProcessInfo("python -m sglang.detokenizer", 990.5, (100, 50)),
                    usage=ProcessUsage(None, 0.5),
                ),
                ProcessRecord(200),
                ProcessRecord(201, info=ProcessInfo("python3 eval.py", 900.0, (1234,))),
            ),
        )
    )
    rows = {r.pid: r for r in process_rows(snapshot)}
    assert {pid: r.whose for pid, r in rows.items()} == {
        100: Whose.RANK,
        101: Whose.SERVER,
        200: Whose.UNKNOWN,
        201: Whose.FOREIGN,
    }
    assert [r.whose_word for r in rows.values()] == ["TP0", "server", "?", "foreign"]
    assert rows[100].elapsed_s == 600.0 and rows[101].elapsed_s == 9.5
    assert rows[101].cpu_percent is None  # one reading so far: no CPU % yet
    assert cells(rows[101])["cpu"] == "—"


def test_orders_cycle_and_sort_with_unknowns_last(rows: tuple[ProcessRow, ...]) -> None:
    assert ORDER_KEYS[0] == "gpu_memory"
    seen = [ORDER_KEYS[0]]
    while (key := next_order(seen[-1])) != ORDER_KEYS[0]:
        seen.append(key)
    assert tuple(seen) == ORDER_KEYS
    assert next_order("no such order") == "gpu_memory"

    by_memory = sorted_rows(rows, "gpu_memory")
    memory = [r.gpu_memory_gib for r in by_memory]
    assert memory == sorted(memory, reverse=True)  # type: ignore[type-var]
    assert by_memory[-2:] == (_by_pid(rows, FOREIGN_PID), _by_pid(rows, HIDDEN_PID))
    by_cpu = sorted_rows(rows, "cpu")
    assert by_cpu[0].pid == FOREIGN_PID and by_cpu[-1].pid == HIDDEN_PID  # unknown last
    assert sorted_rows(rows, "time")[0].pid == FOREIGN_PID  # running longest
    assert sorted_rows(rows, "rss")[-1].pid == HIDDEN_PID
    assert [r.gpu for r in sorted_rows(rows, "gpu")] == sorted(r.gpu for r in rows)
    assert [r.pid for r in sorted_rows(rows, "pid")][:2] == [FOREIGN_PID, HIDDEN_PID]
    by_user = sorted_rows(rows, "user")
    assert by_user[0].user == "bob" and by_user[-1].user is None


@pytest.mark.parametrize(
    ("width", "columns"),
    [
        (200, ("gpu", "pid", "user", "whose", "gpu_memory", "cpu", "rss", "time", "command")),
        (120, ("gpu", "pid", "user", "whose", "gpu_memory", "cpu", "rss", "time", "command")),
        (80, ("gpu", "pid", "user", "whose", "gpu_memory", "cpu", "rss", "command")),
        (70, ("gpu", "pid", "user", "whose", "gpu_memory", "cpu", "command")),
        (60, ("gpu", "pid", "user", "whose", "gpu_memory", "command")),
        (50, ("gpu", "pid", "whose", "gpu_memory", "command")),
        (36, ("gpu", "pid", "whose", "gpu_memory")),
    ],
)
def test_columns_leave_by_priority_as_the_width_shrinks(
    rows: tuple[ProcessRow, ...], width: int, columns: tuple[str, ...]
) -> None:
    """The command shortens first (to COMMAND_LEAST), then TIME, RSS, %CPU and USER leave;
    GPU, PID, WHOSE and GPU-MEM always stay, and no line is wider than the screen."""
    table = table_lines(sorted_rows(rows, "gpu_memory"), width, "gpu_memory")
    assert table.columns == columns
    assert all(len(line) <= width for line, _ in table.rows)
    assert len(table.header) <= width
    assert "GPU-MEM▼" in table.header
    trainer = next(line for line, kind in table.rows if kind == "warn")
    assert f" {FOREIGN_PID} " in trainer and "foreign" in trainer and "4.00 GiB" in trainer
    if "command" in columns:
        command = trainer[table.header.index("COMMAND") :]
        if width >= 120:
            assert command == "python3 train.py --epochs 3"  # whole when there is room
        else:
            assert command.endswith("…") or len(command) >= COMMAND_LEAST


def test_rows_are_drawn_by_whose_they_are(rows: tuple[ProcessRow, ...]) -> None:
    table = table_lines(sorted_rows(rows, "pid"), 200, "pid")
    kinds = [kind for _, kind in table.rows]
    assert kinds[:2] == ["warn", "warn"]  # the foreign ones (the unreadable one too)
    assert set(kinds[2:]) == {""}
    assert "PID▲" in table.header and UNREADABLE in table.rows[1][0]


def test_elapsed_reads_as_ps_and_nvitop() -> None:
    assert [elapsed(s) for s in (None, 0, 59.9, 245, 3723, 86400 * 3 + 4 * 3600 + 5 * 60)] == [
        "—",
        "0:00",
        "0:59",
        "4:05",
        "1:02:03",
        "3d 04:05",
    ]


def test_the_overview_line_names_the_largest_foreign_process(rows: tuple[ProcessRow, ...]) -> None:
    assert processes_summary(rows) == (
        "10 processes on 8 GPUs, 2 foreign, the largest: python3 train.py --epochs 3 "
        "4.00 GiB on GPU 2; 1 unreadable here"
    )
    one = tuple(r for r in rows if r.pid != HIDDEN_PID)
    assert processes_summary(one) == (
        "9 processes on 8 GPUs, 1 foreign: python3 train.py --epochs 3 4.00 GiB on GPU 2"
    )
    hidden_only = tuple(r for r in rows if r.pid != FOREIGN_PID and r.gpu == 5)
    assert processes_summary(hidden_only) == (
        "2 processes on 1 GPU, 1 foreign: pid 4343 1.50 GiB on GPU 5; 1 unreadable here"
    )
    assert processes_summary(()) == "no process on the GPUs (NVML lists none)"


def test_host_line_as_nvitop() -> None:
    host = HostMemory(100.0, 25.0, 75.0, cpu_percent=12.34, swap_total_gb=8.0, swap_used_gb=2.0)
    assert host_line(host) == "CPU 12.3%  MEM 25.0% (25.0/100.0 GB)  SWP 25.0% (2.0/8.0 GB)"
    first = HostMemory(100.0, 25.0, 75.0, swap_total_gb=0.0, swap_used_gb=0.0)
    assert host_line(first) == "CPU —  MEM 25.0% (25.0/100.0 GB)  SWP 0.0% (0.0/0.0 GB)"
    assert host_line(None) == "host: CPU, memory and swap cannot be read now"
