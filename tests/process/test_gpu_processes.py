"""record_of_pid against real child processes whose argv[0] is an SGLang scheduler title."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import psutil
import pytest

from kvtop.model.analysis import analyse
from kvtop.model.memory.gpu_reading import GpuProcess, GpuSample, NvmlReading
from kvtop.sglang.story import fold_lines
from kvtop.sources.gpu_processes import (
    rank_from_title,
    record_of_pid,
    unit_from_cgroup,
)
from kvtop.sources.local_host import LocalHost
from tests.support.tui_support import gpus_snapshot


def _start_titled(title: str) -> subprocess.Popen[bytes]:
    """A `sleep 30` whose argv[0] is TITLE (bash `exec -a` keeps the pid)."""
    proc = subprocess.Popen(["bash", "-c", f"exec -a '{title}' sleep 30"])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            if psutil.Process(proc.pid).cmdline()[:1] == [title]:
                return proc
        except (psutil.Error, IndexError):
            pass
        time.sleep(0.01)
    proc.kill()
    proc.wait()
    raise AssertionError(f"child never showed the title {title!r}")


@pytest.fixture
def titled() -> Iterator[dict[str, int]]:
    titles = ["sglang::scheduler_TP3", "sglang::scheduler_DP1_TP1_EP1", "sglang::detokenizer"]
    procs = {title: _start_titled(title) for title in titles}
    try:
        yield {title: proc.pid for title, proc in procs.items()}
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()


def test_rank_of_scheduler_processes(titled: dict[str, int]) -> None:
    assert record_of_pid(titled["sglang::scheduler_TP3"]).rank == "TP3"
    assert record_of_pid(titled["sglang::scheduler_DP1_TP1_EP1"]).rank == "DP1 TP1 EP1"
    assert record_of_pid(titled["sglang::detokenizer"]).rank is None


def test_rank_of_other_and_gone_processes() -> None:
    plain = subprocess.Popen(["sleep", "30"])
    try:
        assert record_of_pid(plain.pid).rank is None
    finally:
        plain.kill()
        plain.wait()
    assert record_of_pid(plain.pid).rank is None  # reaped: no such process
    assert record_of_pid(-1).rank is None


def test_rank_from_title_variants() -> None:
    assert rank_from_title("sglang::scheduler_TP0") == "TP0"
    assert rank_from_title("sglang::scheduler_PP1_TP7") == "PP1 TP7"
    assert rank_from_title("sglang::scheduler_TP12 extra args") == "TP12"
    assert rank_from_title("sglang::scheduler") is None
    assert rank_from_title("python -m sglang.launch_server") is None


def _visible(pids: list[int]) -> bool:
    """Whether this host's process table shows every GPU process NVML lists (LocalHost)."""
    reading = NvmlReading((_sample(0, pids),), available=True, problem=None, driver_version=None)
    return LocalHost().processes(reading).visible


def test_pids_visible(titled: dict[str, int]) -> None:
    assert _visible(list(titled.values())) is True
    assert _visible([]) is True
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert _visible([*titled.values(), gone.pid]) is False


def _sample(index: int, pids: list[int]) -> GpuSample:
    return GpuSample(
        index=index,
        name="NVIDIA H200",
        uuid=f"GPU-{index}",
        pci_bus_id="",
        total_gib=140.0,
        used_gib=1.0,
        free_gib=139.0,
        reserved_gib=0.5,
        utilization_pct=None,
        memory_utilization_pct=None,
        temperature_c=None,
        power_w=None,
        power_limit_w=None,
        processes=tuple(GpuProcess(pid=pid, used_gib=1.0) for pid in pids),
    )


def test_map_ranks_to_gpus(titled: dict[str, int]) -> None:
    samples = [
        _sample(0, [titled["sglang::scheduler_TP3"], titled["sglang::detokenizer"]]),
        _sample(1, [titled["sglang::scheduler_DP1_TP1_EP1"]]),
        _sample(2, []),
    ]
    # As the session does: each GPU process's rank from its title, joined into the snapshot.
    ranks = {p.pid: record_of_pid(p.pid).rank for s in samples for p in s.processes}
    snapshot = gpus_snapshot(analyse(fold_lines([]), "empty.log"), samples, ranks)
    assert {g.sample.index: g.ranks for g in snapshot.gpus} == {
        0: ("TP3",),
        1: ("DP1 TP1 EP1",),
        2: (),
    }


def test_info_of_a_real_child_has_its_tree() -> None:
    """A real child: its command line; its ancestors end with the topmost that is SGLang's own,
    so a child of this test's process (not SGLang's) has none."""
    child = subprocess.Popen(["sleep", "30"])
    try:
        deadline = time.monotonic() + 5  # until the fork has exec'd sleep
        while (info := record_of_pid(child.pid).info).command != "sleep 30":
            assert time.monotonic() < deadline, info
            time.sleep(0.01)
        assert info.command == "sleep 30"
        assert info.started_at is not None
        assert info.ancestors == ()
        assert record_of_pid(2**22 + 12345).info.ancestors == ()  # gone: nothing
    finally:
        child.kill()
        child.wait()


def test_a_rank_descendant_keeps_the_rank_in_its_tree() -> None:
    """A process a rank started through a shell (rank → sh → sleep): its ancestors are the shell
    and the rank, and stop there (this test's process above is not SGLang's)."""
    script = "exec -a 'sglang::scheduler_TP0' bash -c 'sh -c \"sleep 30; :\" & wait'"
    rank = subprocess.Popen(["bash", "-c", script])
    try:
        deadline = time.monotonic() + 5
        while not (
            sleeps := [
                c for c in psutil.Process(rank.pid).children(recursive=True) if c.name() == "sleep"
            ]
        ):
            assert time.monotonic() < deadline, "the rank's grandchild did not start"
            time.sleep(0.01)
        shell = sleeps[0].ppid()
        while psutil.Process(rank.pid).cmdline()[:1] != ["sglang::scheduler_TP0"]:
            assert time.monotonic() < deadline, "the rank did not take its title"
            time.sleep(0.01)
        assert record_of_pid(sleeps[0].pid).info.ancestors == (shell, rank.pid)
    finally:
        for proc in psutil.Process(rank.pid).children(recursive=True):
            proc.kill()
        rank.kill()
        rank.wait()


@pytest.mark.parametrize(
    ("text", "unit"),
    [
        ("0::/system.slice/sglang-kimi.service\n", "sglang-kimi.service"),
        ("0::/system.slice/sglang.service/payload\n", "sglang.service"),
        ("0::/user.slice/user-1000.slice/session-3.scope\n", "session-3.scope"),
        (
            "12:pids:/system.slice/x.service\n1:name=systemd:/system.slice/sglang.service\n",
            "sglang.service",
        ),
        ("0::/\n", None),
        ("", None),
        ("garbage without colons\n", None),
    ],
)
def test_unit_from_cgroup(text: str, unit: str | None) -> None:
    assert unit_from_cgroup(text) == unit
