"""The fault matrix: each row injects one real fault while kvtop runs, then clears it.

For every row, on a healthy host (fake GPUs through the real nvidia-ml-py, a real HTTP server on
loopback that wants an API key, a real log file being followed; see fault_host.py):
1. the real KvtopApp runs the real Session under Pilot (120×40, refresh 0.1 s) until all three
   source markers are ● (healthy);
2. the fault is injected; the screen must show the row's sentence (which panel says what, with
   the next step), and the sources the fault did not touch must keep updating (`bump()` moves a
   number in each and the app's latest snapshot must show it);
3. the `--once` report (text and JSON, built as `kvtop --once` builds them) is taken while the
   fault is on and must say the same;
4. the fault is cleared; kvtop must come back by itself (all markers ●, every source updating);
5. the API key appears in nothing the row saw: screens, report text, JSON.

Rows that need another process (the library missing, the journal without permission, the
terminal itself) live in test_fault_matrix_process.py, with the same table shape. docs/
reliability.md shows the whole table.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import io
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prometheus_client.core import Metric

from kvtop.export.collector import render
from kvtop.live.app import KvtopApp
from kvtop.live.view_state import SOURCE_NAMES, SOURCE_SHORT
from kvtop.model.kv_usage import kv_usage
from kvtop.model.memory.gpu_detail import gpu_detail
from kvtop.model.memory.gpu_memory import reconcile
from kvtop.model.snapshot import Snapshot
from kvtop.model.status.levels import Level, Thresholds
from kvtop.sources import journal as journal_source
from tests.support.fake_nvml import gcc_path
from tests.support.fault_host import (
    API_KEY,
    BATCH_LINE,
    FRESH,
    FaultHost,
    NvmlState,
    check_report,
    log_tokens,
    once_reports,
    source_state,
    wait_screen,
)
from tests.support.journal_tools import (
    BOOT_AT_US,
    JOURNAL_REMOTE,
    entry,
    export_format,
    invocation,
    journal_remote_missing,
    sglang_entries,
    write_journal,
)
from tests.support.sglang_http import MODEL, Deployment, build_exposition, build_server_info

pytestmark = pytest.mark.skipif(gcc_path() is None, reason="gcc not found: no fake NVML")

STORY_LINES = (
    (Path(__file__).resolve().parents[2] / "tui/kvtop/data/kimi-k25-tp8-eagle3-hicache-0.5.8.log")
    .read_text()
    .splitlines()
)
UNIT = "sglang-kimi.service"
T0_US = 1_700_000_100_000_000
ROW_LIMIT_S = 120.0
MARK = {"nvml": "NVML", "log": "log", "journal": "journal", "metrics": "metrics"}

Step = Callable[[FaultHost], "Awaitable[None] | None"]
Check = Callable[[str, "Snapshot | None"], bool]


def flat(text: str) -> str:
    """The screen as one line: panels wrap long sentences."""
    return re.sub(r"\s+", " ", text)


def _full_markers(text: str) -> str:
    """The source markers under their full names: the header shortens them (●NV, ●met) when the
    worst alert's words take the room, as docs/live-view.md says."""
    text = re.sub(r"([●◐○])NV\b", r"\1NVML", text)
    return re.sub(r"([●◐○])met\b", r"\1metrics", text)


def says(pattern: str) -> Check:
    rx = re.compile(pattern, re.S)
    return lambda text, _snap: rx.search(_full_markers(flat(text))) is not None


@dataclass(frozen=True)
class Fault:
    id: str
    hits: str  # the source it hits: nvml, log (or journal), metrics, terminal
    inject: Step
    clear: Step
    screen: Check  # what the operator sees while the fault is on
    once: str | None  # a regex the --once text report must match while the fault is on
    sees: str = ""  # the sentence for docs/reliability.md (what the operator sees)
    options: dict[str, object] = field(default_factory=dict)
    setup: Step | None = None
    fault_s: float = 10.0  # how long the screen may take to show the fault
    recover_s: float = 15.0
    # The verdict while the fault is on, the same in the live view, `--once --json`, `--check`
    # and the exporter ("ok", "warning", "critical"); "same" only asks that they agree.
    level: str | None = None
    json_ok: Callable[[dict[str, object]], bool] | None = None  # the --once JSON, fault on
    export_ok: Callable[[list[Metric]], bool] | None = None  # the exporter's families, fault on


# A hang is waited out against a shorter limit than kvtop's own (5 s a fetch, 2 s an NVML call),
# set with the fault and put back with its end (FaultHost.shorten_fetch, .shorten_nvml_call): the
# same cut, the same sentence (naming the limit) and the same recovery, in a tenth of the time.
FETCH_S = 0.3
NVML_CALL_S = 0.2


def within(seconds: float) -> str:
    """A regex for kvtop's "within N s" with N the limit in force."""
    return re.escape(f"within {seconds:g} s")


# -- NVML ----------------------------------------------------------------------------------------
def nvml(**changes: object) -> Step:
    def step(host: FaultHost) -> None:
        for key, value in changes.items():
            setattr(host.state, key, value)
        host.write_nvml()

    return step


def nvml_healthy(host: FaultHost) -> None:
    host.state.errors, host.state.absent, host.state.delays = [], [], []
    host.state.init_error = None
    if len(host.state.gpus) < 8:
        host.state.gpus = host.healthy_gpus()
    host.write_nvml()


async def nvml_hangs(host: FaultHost) -> None:
    """Every GPU's memory call hangs five times the limit (on a real host: 10 s against 2 s)."""
    await host.shorten_nvml_call(NVML_CALL_S)
    nvml(delays=[("nvmlDeviceGetMemoryInfo_v2", round(NVML_CALL_S * 5 * 1000))])(host)


def nvml_answers(host: FaultHost) -> None:
    nvml_healthy(host)
    host.restore_nvml_call()


def driver_unloaded(host: FaultHost) -> None:
    host.state_path.unlink()  # the fake answers "driver not loaded" to every call


def gpu_gone(host: FaultHost) -> None:
    host.state.gpus = {i: g for i, g in host.state.gpus.items() if i != 7}
    host.write_nvml()


def gpu7_missing(text: str, snap: Snapshot | None) -> bool:
    return (
        snap is not None and len(snap.gpus) == 7 and re.search(r"(?m)^\S?\s+7\s+TP7", text) is None
    )


def power_temp_blank(text: str, snap: Snapshot | None) -> bool:
    if snap is None or not snap.gpus:
        return False
    s = snap.gpus[0].sample
    return s.temperature_c is None and s.power_w is None and "NVML" in text and "●NVML" in text


def v2_processes(text: str, snap: Snapshot | None) -> bool:
    return snap is not None and all(len(g.processes) == 1 for g in snap.gpus) and "●NVML" in text


def impossible_values(host: FaultHost) -> None:
    """A driver answering 0xFFFFFFFF for GPU 0's utilization and temperature, and more memory
    in use than GPU 1 has."""
    host.state.gpus[0].update(util=0xFFFFFFFF, temp=0xFFFFFFFF)
    host.state.gpus[1].update(used_mib=200_000)
    host.write_nvml()


def gpus_restored(host: FaultHost) -> None:
    host.state.gpus = host.healthy_gpus()
    host.write_nvml()


def values_refused(text: str, snap: Snapshot | None) -> bool:
    if snap is None or len(snap.gpus) != 8:
        return False
    g0, g1 = snap.gpus[0].sample, snap.gpus[1].sample
    row0 = re.search(r"(?m)^\S?\s+0\s+TP0.*$", text)
    return (
        says(r"◐NVML.*impossible numbers.*GPU 0: utilization 4294967295 \(out of range\)")(
            text, snap
        )
        and g0.utilization_pct is None
        and g0.temperature_c is None
        and g1.status == "error"
        and row0 is not None
        and "4294967295" not in row0.group(0)
        and " — " in row0.group(0)  # the utilization and temperature cells are blank
    )


def all_lost(text: str, snap: Snapshot | None) -> bool:
    """Every GPU lost: eight rows that say so (✖, readable without colour), one notice that
    says all of them, no derived number (no negative runtime) and no "other GPUs" sentence."""
    return (
        snap is not None
        and len(snap.gpus) == 8
        and all(g.lost and not g.memory.known for g in snap.gpus)
        and flat(text).count("✖ lost") == 8
        and says(r"◐NVML.*GPU 0–7: lost.*all 8 GPUs NVML sees")(text, snap)
        and "keep updating" not in flat(text)
        and re.search(r"runtime\s*−", text) is None
    )


def gpus_gone(host: FaultHost) -> None:
    host.state.gpus = {}
    host.write_nvml()


def exported(families: list[Metric], name: str) -> list[tuple[dict[str, str], float]]:
    return [(s.labels, s.value) for f in families for s in f.samples if s.name == name]


def gpu_up(families: list[Metric]) -> dict[str, float]:
    return {labels["gpu"]: value for labels, value in exported(families, "kvtop_gpu_up")}


def handle_unreadable(text: str, snap: Snapshot | None) -> bool:
    """GPU 3's handle answers Unknown Error: its row says so with the call and the code; the
    other seven keep their bars; the notice names GPU 3 and says the others keep updating."""
    if snap is None or len(snap.gpus) != 8:
        return False
    row3 = re.search(r"(?m)^\S?\s+3\s+TP3.*$", text)
    return (
        [g.sample.index for g in snap.gpus if g.lost] == [3]
        and row3 is not None
        and "handle unreadable through NVML" in row3.group(0)
        and says(r"◐NVML.*GPU 3: unreadable through NVML \(handle: Unknown Error, code 999\)")(
            text, snap
        )
        and "other GPUs keep updating" in flat(text)
    )


def seven_gpus(host: FaultHost) -> None:
    """A TP8 server's host where NVML sees seven GPUs from the start (GPU 7 hidden or gone
    before kvtop started: no "fewer than before" to go by)."""
    host.state.gpus = {i: g for i, g in host.healthy_gpus().items() if i != 7}
    host.state.procs = [p for p in host.state.procs if p[0] != 7]
    host.write_nvml()


def eight_again(host: FaultHost) -> None:
    host.state.procs = NvmlState().procs
    nvml_healthy(host)


def tp7_without_gpu(text: str, snap: Snapshot | None) -> bool:
    return (
        snap is not None
        and len(snap.gpus) == 7
        and snap.missing_ranks == ("TP7",)
        and "TP7 from the log has no GPU here" in flat(text)
    )


def at_power_limit(host: FaultHost) -> None:
    """Every GPU draws its enforced limit and NVML says so (the software power cap engaged):
    normal under load."""
    for fields in host.state.gpus.values():
        fields.update(power_mw=fields["limit_mw"], throttle=0x4)
    host.write_nvml()


def rows_at_limit_calm(text: str, snap: Snapshot | None) -> bool:
    rows = re.findall(r"(?m)^\S?\s+\d\s+TP\d.*$", text)
    return (
        snap is not None
        and all(g.sample.clock_event_reasons == 0x4 for g in snap.gpus)
        and len(rows) == 8
        and all("700W" in row and row.rstrip()[-1] not in "▲✖" for row in rows)
    )


def thermal_throttle(host: FaultHost) -> None:
    host.state.gpus[2]["throttle"] = 0x40  # HW thermal slowdown
    host.write_nvml()


def gpu2_throttled(text: str, snap: Snapshot | None) -> bool:
    row2 = re.search(r"(?m)^\S?\s+2\s+TP2.*$", text)
    return (
        snap is not None
        and snap.gpus[2].sample.clock_event_reasons == 0x40
        and row2 is not None
        and row2.group(0).rstrip().endswith("▲")
    )


FOREIGN_MIB = 4608  # 4.50 GiB


def foreign_before_restart(host: FaultHost) -> None:
    """Another user's process starts; then the server restarts (its log written anew, stamped
    now); then that process allocates 4.50 GiB on GPU 3. It started before the server's latest
    start, and it is not the server's."""
    as_nobody = {"user": "nobody"} if os.geteuid() == 0 else {}
    host.foreign = subprocess.Popen(["sleep", "600"], **as_nobody)  # type: ignore[call-overload]
    time.sleep(1.2)  # the log's stamps have whole seconds: the restart comes strictly after
    now = time.strftime("%Y-%m-%d %H:%M:%S")
    restart = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", now, host.story.read_text())
    with host.log.open("a") as out:
        out.write(restart)
    host.state.gpus[3]["used_mib"] = int(host.state.gpus[3]["used_mib"]) + FOREIGN_MIB
    host.state.procs = [*host.state.procs, (3, host.foreign.pid, FOREIGN_MIB)]
    host.write_nvml()


def foreign_gone(host: FaultHost) -> None:
    assert host.foreign is not None
    host.foreign.kill()
    host.foreign.wait()
    host.state.procs = NvmlState().procs
    gpus_restored(host)


def orphan_left(host: FaultHost) -> None:
    """An SGLang detokenizer whose main process died: adopted by PID 1, titled as SGLang titles
    it, still holding 2 GiB on GPU 3 (NVML lists it beside the server's ranks)."""
    script = "(exec -a sglang::detokenizer sleep 600 >/dev/null 2>&1 </dev/null) & echo $!"
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    pid = int(out.stdout)
    deadline = time.monotonic() + 10
    while not _titled_sglang(pid):
        assert time.monotonic() < deadline, "the orphan never took its SGLang title"
        time.sleep(0.02)
    ORPHANS.append(pid)
    host.state.procs = [*host.state.procs, (3, pid, 2048)]
    host.write_nvml()


ORPHANS: list[int] = []  # the orphans a row started, ended by its clear


def _titled_sglang(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().startswith(b"sglang::")
    except OSError:
        return False


def orphan_ended(host: FaultHost) -> None:
    """The operator runs the kill the alert names."""
    while ORPHANS:
        pid = ORPHANS.pop()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    host.state.procs = NvmlState().procs
    host.write_nvml()


def orphan_in_json(data: dict[str, object]) -> bool:
    found = data["orphans"]
    return [(o["gpu"], o["gib"], o["title"]) for o in found] == [  # type: ignore[attr-defined]
        (3, 2.0, "sglang::detokenizer 600")
    ]


def foreign_is_other(text: str, snap: Snapshot | None) -> bool:
    """4.50 GiB of other processes on GPU 3 in the model, the bar (after the server's
    segments) and GPU detail; SGLang's runtime there is what it is on the others."""
    if snap is None or snap.analysis.startup.restarts < 1:
        return False
    g3 = snap.gpus[3]
    names = [name for name, _ in g3.memory.segments()]
    detail = gpu_detail(snap, 3)
    rows = {r.item: r.gib for r in detail.breakdown} if detail is not None else {}
    tp3 = next(b for b in snap.analysis.breakdowns if b.rank == "TP3")
    alone = reconcile(g3.sample.total_gib, g3.sample.free_gib + 4.5, tp3)
    return (
        g3.memory.other_processes_gib == 4.5
        and any(p.other and p.used_gib == 4.5 for p in g3.processes)
        and g3.memory.runtime_gib is not None
        and alone.runtime_gib is not None
        and abs(g3.memory.runtime_gib - alone.runtime_gib) < 1e-3
        and names.index("other processes") == names.index("runtime") + 1
        and rows.get("other processes") == 4.5
        and "▙" in next(x for x in text.splitlines() if re.match(r"^\S?\s+3\s+TP3", x))
    )


def foreign_in_json(data: dict[str, object]) -> bool:
    gpu3 = data["gpus"][3]  # type: ignore[index]
    return gpu3["breakdown"]["other_processes_gib"] == 4.5 and any(  # type: ignore[index]
        p["other"]
        for p in gpu3["processes"]  # type: ignore[index]
    )


def foreign_exported(families: list[Metric]) -> bool:
    other = {
        labels["gpu"]: value
        for labels, value in exported(families, "kvtop_gpu_memory_bytes")
        if labels["segment"] == "other_processes"
    }
    return other["3"] == FOREIGN_MIB * 2**20 and other["2"] == 0


def memory_released(host: FaultHost) -> None:
    """Every GPU's memory released under the server's processes (still listed): the log says
    ready and itemises weights and KV cache that NVML does not see. (With the processes gone
    too, the server is gone: tests/e2e/test_verdict_matrix.py.)"""
    for fields in host.state.gpus.values():
        fields["used_mib"] = 600
    host.write_nvml()


def server_back(host: FaultHost) -> None:
    host.state.procs = NvmlState().procs
    gpus_restored(host)


NEGATIVE = re.compile(r"[−-]\s?\d+\.\d")  # a negative quantity as kvtop prints one


def memory_part(text: str) -> str:
    """The GPU rows and the legend (the events' deltas, "−0.14 GiB", are changes, not
    quantities)."""
    lines = text.splitlines()
    start = next((i for i, x in enumerate(lines) if "rank memory" in x), 0)
    end = next((i for i, x in enumerate(lines) if x.startswith("KV cache")), len(lines))
    return "\n".join(lines[start:end])


def released_said(text: str, snap: Snapshot | None) -> bool:
    """No negative number on screen; the inconsistency said in words; runtime unknown."""
    return (
        snap is not None
        and all(g.memory.runtime_gib is None for g in snap.gpus)
        and says(r"GPU 0–7: the log itemises more than NVML sees in use, so runtime is unknown")(
            text, snap
        )
        and "runtime unknown" in memory_part(text)
        and NEGATIVE.search(memory_part(text)) is None
    )


def no_negative_breakdown(data: dict[str, object]) -> bool:
    numbers = [
        value
        for gpu in data["gpus"]  # type: ignore[attr-defined]
        for value in gpu["breakdown"].values()
        if isinstance(value, (int, float))
    ]
    runtimes = [gpu["breakdown"]["runtime_gib"] for gpu in data["gpus"]]  # type: ignore[attr-defined]
    return bool(numbers) and min(numbers) >= 0 and runtimes == [None] * 8


def no_negative_sample(families: list[Metric]) -> bool:
    memory = exported(families, "kvtop_gpu_memory_bytes")
    segments = {labels["segment"] for labels, _ in memory}
    return bool(memory) and min(v for _, v in memory) >= 0 and "runtime" not in segments


NVML_ROWS = [
    Fault(
        "nvml-driver-not-loaded",
        "nvml",
        driver_unloaded,
        nvml_healthy,
        says(r"○NVML.*NVIDIA driver not loaded.*nvidia-smi"),
        r"NVIDIA driver not loaded",
        "NVML marker ○; notice: driver not loaded, check with nvidia-smi, retried each poll",
    ),
    Fault(
        "nvml-gpu-lost",
        "nvml",
        nvml(errors=[("nvmlDeviceGetMemoryInfo_v2", 3, 15)]),
        nvml_healthy,
        says(r"◐NVML.*GPU 3: lost.*dmesg.*Xid.*other GPUs keep updating"),
        r"GPU 3: lost",
        "NVML ◐; GPU 3's row says ✖ lost (no bar, no derived number, no note about it); "
        "notice: GPU 3: lost, fallen off the bus, check nvidia-smi and dmesg for Xid; the other "
        "seven keep updating",
    ),
    Fault(
        "nvml-all-gpus-lost",
        "nvml",
        nvml(errors=[("nvmlDeviceGetMemoryInfo_v2", None, 15)]),
        nvml_healthy,
        all_lost,
        r"GPU 0–7: lost \(fallen off the bus\).*all 8 GPUs NVML sees",
        "NVML ◐; all eight rows say ✖ lost (no bar, no derived number, no negative runtime); "
        "one notice: GPU 0–7: lost, all 8 GPUs NVML sees, check nvidia-smi and dmesg for Xid "
        '(never "the other GPUs keep updating"); --once says the same, the JSON breakdowns '
        "are null",
    ),
    Fault(
        "nvml-v3-processes-missing",
        "nvml",
        nvml(absent=["nvmlDeviceGetComputeRunningProcesses_v3"]),
        nvml_healthy,
        v2_processes,
        None,
        "nothing to do: processes come from the v2 call (an older driver), NVML stays ●",
    ),
    Fault(
        "nvml-power-temp-not-supported",
        "nvml",
        nvml(
            errors=[
                ("nvmlDeviceGetPowerUsage", None, 3),
                ("nvmlDeviceGetTemperature", None, 3),
                ("nvmlDeviceGetTemperatureV", None, 3),
            ]
        ),
        nvml_healthy,
        power_temp_blank,
        None,
        "temp and power columns blank (not a made-up 0); NVML stays ●, memory keeps updating",
    ),
    Fault(
        "nvml-call-hangs-10s",
        "nvml",
        nvml_hangs,
        nvml_answers,
        says(rf"◐NVML.*NVML did not answer {within(NVML_CALL_S)}.*stale.*nvidia-smi"),
        None,  # --once waits for its one poll: the live view is what must not freeze
        "NVML ◐; notice: NVML did not answer within 2 s, readings are stale; the screen keeps "
        "refreshing the other sources",
        recover_s=25.0,
    ),
    Fault(
        "nvml-gpu-disappears",
        "nvml",
        gpu_gone,
        nvml_healthy,
        gpu7_missing,
        r"TP7 from the log has no GPU here: NVML sees 7 GPUs",
        "GPU 7's row goes and a note says TP7 has no GPU here (fallen off the bus? check "
        "nvidia-smi and dmesg); NVML ◐: it sees 7 GPUs now, 8 before; the other seven keep "
        "updating",
    ),
    Fault(
        "nvml-impossible-values",
        "nvml",
        impossible_values,
        gpus_restored,
        values_refused,
        r"rejected from NVML \(not used, shown blank\): GPU 0 utilization 4294967295 "
        r"\(out of range\), GPU 0 temperature 4294967295 \(out of range\), GPU 1 memory_used",
        "NVML ◐; notice: NVML gave impossible numbers, refused and shown blank (GPU 0: "
        "utilization 4294967295 …), check nvidia-smi and dmesg; the cells are blank, GPU 1's "
        "row says memory unreadable; --once lists them under rejected, the JSON in "
        "rejected_from_nvml (GPU, field, raw value, reason)",
    ),
    Fault(
        "nvml-gpu-count-zero",
        "nvml",
        gpus_gone,
        nvml_healthy,
        says(r"◐NVML.*(?=.*NVML sees no GPU now, 8 before)(?=.*TP0–7 from the log have no GPU)"),
        r"TP0–7 from the log have no GPU here: NVML sees no GPU",
        "NVML ◐ (not ●); notice: NVML sees no GPU now, 8 before, check nvidia-smi and dmesg; "
        "note: TP0–7 from the log have no GPU here; --once (which never saw the GPUs) says the "
        "same note with NVML ◐",
    ),
]


# -- log file ------------------------------------------------------------------------------------
def log_truncate(host: FaultHost) -> None:
    with host.log.open("r+") as f:
        f.truncate(0)


def log_restore(host: FaultHost) -> None:
    """The server starts again: the whole story is logged anew (to the file at the path)."""
    tmp = host.log.with_suffix(".new")
    shutil.copyfile(host.story, tmp)
    if host.log.exists():
        with host.log.open("a") as out:
            out.write(tmp.read_text())
        tmp.unlink()
    else:
        os.replace(tmp, host.log)


def log_rotate(host: FaultHost) -> None:
    os.rename(host.log, host.log.with_suffix(".log.1"))
    host.log.write_text("")


def log_delete(host: FaultHost) -> None:
    host.log.unlink()


def log_binary(host: FaultHost) -> None:
    with host.log.open("ab") as f:
        f.write(bytes(range(256)) * 64 + b"\x00\x1b[2J\x1b]0;pwned\x07\n")


def log_rewrite(host: FaultHost) -> None:
    """The server starts again and its log is written over the old one in place, within one
    refresh: another date, mem_fraction_static 0.77, a pool of 123,456 tokens. The file never
    gets shorter than what kvtop had read (so its size alone says nothing)."""
    new_run = (
        host.story.read_text()
        .replace("2026-02-27", "2026-03-01")
        .replace("mem_fraction_static=0.88", "mem_fraction_static=0.77")
        .replace("159277", "123456")
        .replace("159,277", "123,456")
    )
    size = host.log.stat().st_size
    batch = BATCH_LINE.replace("2026-02-27", "2026-03-01")
    n = 0
    while len(new_run.encode()) <= size:
        new_run += batch.format(sec=n % 60, tokens=40000 + n)
        n += 1
    with host.log.open("r+") as f:
        f.write(new_run)


def new_run_alone(text: str, snap: Snapshot | None) -> bool:
    """The new run is a start of its own: its mem_fraction_static and its pool, nothing of the
    old run (0.88, 159,277) mixed in, and the restart counted."""
    if snap is None:
        return False
    startup = snap.analysis.startup
    args = startup.server_args
    pools = {r.target.kv_tokens for r in startup.ranks.values()}
    return (
        "note: log: log file" in flat(text)
        and "was rewritten in place" in flat(text)
        and startup.restarts == 1
        and "restarted 1×" in text
        and args is not None
        and args.mem_fraction_static == 0.77
        and pools == {123_456}
        and len(startup.ranks) == 8
    )


def log_ok(text: str, snap: Snapshot | None) -> bool:
    return snap is not None and "●log" in text


# SGLang 0.5.x's retraction line as a public benchmark posted it, logged again at other times.
RETRACTION = (
    "KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: 646, "
    "#new_token_ratio: 0.0980 -> 0.3487"
)


def retraction_storm(host: FaultHost) -> None:
    """The server retracts a request every 20 s for four minutes, up to now: 12 in the window,
    2.4 a minute (the story's server: schedule_conservativeness 1.0, max_running_requests 48)."""
    now = time.time()
    stamps = [time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now - 20 * i)) for i in range(12)]
    with host.log.open("a") as out:
        out.writelines(f"[{stamp} TP0] {RETRACTION}\n" for stamp in reversed(stamps))


def storm_in_json(data: dict[str, object]) -> bool:
    found = data["retractions"]
    assert isinstance(found, dict)
    return (found["count"], found["per_min"], found["source"]) == (12, 2.4, "log")


def storm_exported(families: list[Metric]) -> bool:
    return [v for _, v in exported(families, "kvtop_retracted_requests_total")] == [12] and [
        v for _, v in exported(families, "kvtop_retractions_per_minute")
    ] == [2.4]


LOG_ROWS = [
    Fault(
        "log-retraction-storm",
        "log",
        retraction_storm,
        lambda host: None,  # the lines stay: the warning clears once the window holds fewer
        says(r"●log.*▲ retracted 12 · 2\.4/min over 5 min"),
        r"retractions: 12 retracted since start · 2\.4/min over 5 min \(from the log",
        "the KV panel says ▲ retracted 12 · 2.4/min over 5 min; WARNING everywhere: 12 requests "
        "retracted in the last 5 min (2.4/min) with SGLang's rule in this server's values "
        "(raise --schedule-conservativeness, now 1.0, try 1.3; then lower "
        "--max-running-requests, now 48); kvtop_retracted_requests_total 12",
        level="warning",
        json_ok=storm_in_json,
        export_ok=storm_exported,
    ),
    Fault(
        "log-truncated",
        "log",
        log_truncate,
        log_restore,
        says(r"●log.*note: log: log file \S+ was truncated; reading it again from the start"),
        None,  # --once reads the file as it is now: an empty log
        "note for a minute: the log was truncated, read again from its start; what was read "
        "stays on screen (log stays ●)",
    ),
    Fault(
        "log-rewritten-in-place",
        "log",
        log_rewrite,
        lambda host: None,
        new_run_alone,
        None,  # --once reads the file as it is now: the new run only
        "note for a minute: the log was rewritten in place, read again from its start as a new "
        "run; the header shows the new run's mem_fraction_static and pool (nothing of the old "
        "run) and counts the restart (log stays ●)",
    ),
    Fault(
        "log-rotated",
        "log",
        log_rotate,
        log_restore,
        says(r"●log.*note: log: log file \S+ was replaced \(rotated\); reading the new file"),
        None,
        "note for a minute: the file was rotated; the rest of the old file is read, then the "
        "new one from its start (log stays ●)",
    ),
    Fault(
        "log-deleted",
        "log",
        log_delete,
        log_restore,
        says(r"◐log.*log file \S+ was removed; waiting for it to come back"),
        r"(?i)does not exist|cannot read|no such file",
        "log ◐; notice: the file is gone, kvtop waits for it to come back; the screen keeps the "
        "last startup",
    ),
    Fault(
        "log-binary",
        "log",
        log_binary,
        lambda host: None,
        lambda text, snap: (
            "●log" in text and "\x1b" not in text and "pwned" not in text.split("\n")[0]
        ),
        r"ready",
        "bytes that are not text are replaced (U+FFFD) and escapes made visible (␛); nothing on "
        "screen moves; the startup read before stays",
    ),
]


# -- HTTP ----------------------------------------------------------------------------------------
def switch(**changes: object) -> Step:
    def step(host: FaultHost) -> None:
        for key, value in changes.items():
            setattr(host.server.switches, key, value)

    return step


def http_healthy(host: FaultHost) -> None:
    sw = host.server.switches
    sw.status, sw.delay_s, sw.body, sw.old_endpoint_only = {}, 0.0, None, False
    host.server.resume()


def hangs(**changes: object) -> Step:
    """A server that kvtop waits out: the switches, with the fetch limit shortened."""

    async def step(host: FaultHost) -> None:
        await host.shorten_fetch(FETCH_S)
        switch(**changes)(host)

    return step


def answers(host: FaultHost) -> None:
    http_healthy(host)
    host.restore_fetch()


def server_down(host: FaultHost) -> None:
    host.server.pause()  # the port closes: connection refused


def restart_bigger(host: FaultHost) -> None:
    """The server starts again with a bigger pool, and its followed log says so (a pool that
    only the server had would be another server's: see http-another-server)."""
    with host.log.open("a") as out:
        out.write(host.story.read_text().replace("159277", "171234"))
    host.deployment = Deployment(version="0.5.8", max_total_num_tokens=171_234)
    host.server.restart(host.deployment)


def pool_171k(text: str, snap: Snapshot | None) -> bool:
    return (
        "171,234" in text
        and snap is not None
        and snap.metrics is not None
        and snap.mismatches == ()
    )


def another_server(host: FaultHost) -> None:
    """--url reaches another server: another model, pool, TP size and SGLang version."""
    other = Deployment(version="0.5.12", tp_size=16, max_total_num_tokens=655_360)
    text = build_exposition(other).replace(MODEL, "glm-5.3-flash")
    info = build_server_info(other)
    info["model_path"] = info["served_model_name"] = "zai-org/glm-5.3-flash"
    host.server.server_info_override = info
    with host.server._lock:  # the fake's own lock: what it serves changes between requests
        host.server.exposition = text.encode()
    host.session_ref.forget_server_info()  # as after --url is changed: read again


def the_log_server_again(host: FaultHost) -> None:
    host.server.server_info_override = None
    host.server.restart(host.deployment)
    host.session_ref.forget_server_info()


def log_pool_in_kv_panel(text: str, snap: Snapshot | None) -> bool:
    """Both sources named as another server's; the KV panel keeps the log's own pool."""
    if snap is None or {m.source for m in snap.mismatches} != {"metrics", "server_info"}:
        return False
    return kv_usage(snap).max_tokens == 159_277 and "/ 159,277 tokens" in text


def info_broken(body: object) -> Step:
    def step(host: FaultHost) -> None:
        host.server.server_info_override = body
        host.session_ref.forget_server_info()  # as after a server restart: read again

    return step


def info_healthy(host: FaultHost) -> None:
    host.server.server_info_override = None
    http_healthy(host)


def info_requests(host: FaultHost) -> int:
    return sum(1 for path, _ in host.server.requests if path == "/server_info")


def info_key_refused(host: FaultHost) -> None:
    """SGLang's middleware with another key: /metrics passes, /server_info answers 401."""
    host.server.switches.api_key = "another-key-than-kvtops"
    host.session_ref.forget_server_info()  # as after a server restart: read again
    host.info_asked = (info_requests(host), time.monotonic())


def info_key_accepted(host: FaultHost) -> None:
    """Back-off: while refused, /server_info was asked 1, 2, 4 … refresh intervals apart (at
    0.1 s a refresh, about log2(seconds × 10) times), not at every scrape (10 a second)."""
    before, since = host.info_asked
    asked = info_requests(host) - before
    seconds = time.monotonic() - since
    allowed = 3 + math.log2(1 + seconds / 0.1) + 1  # +1 for the --once report's own request
    assert 1 <= asked <= allowed, f"/server_info asked {asked} times in {seconds:.1f} s"
    host.server.switches.api_key = API_KEY


async def info_hangs(host: FaultHost) -> None:
    await host.shorten_fetch(FETCH_S)
    host.server.switches.delay_by_path = {"/server_info": 30.0}
    host.session_ref.forget_server_info()


def info_answers(host: FaultHost) -> None:
    host.server.switches.delay_by_path = {}
    host.restore_fetch()


HTTP_ROWS = [
    Fault(
        "http-refused",
        "metrics",
        server_down,
        http_healthy,
        says(r"○metrics.*nothing listens on http://127\.0\.0\.1:\d+.*is the server running"),
        r"nothing listens on",
        "metrics ○; notice: nothing listens on URL, is the server running and is --url right; "
        "the KV panel falls back to the log's batch lines",
    ),
    Fault(
        "http-2s-delay",
        "metrics",
        switch(delay_s=2.0),
        http_healthy,
        lambda text, snap: "●metrics" in text or "◐metrics" in text,
        None,
        "a 2 s answer is slow but in time (5 s limit): the numbers keep coming, marker stays ●",
    ),
    Fault(
        "http-30s-timeout",
        "metrics",
        hangs(delay_s=30.0),
        answers,
        says(rf"◐metrics.*did not answer {within(FETCH_S)}.*overloaded or hung"),
        rf"did not answer {within(FETCH_S)}",
        "metrics ◐; notice: did not answer within 5 s, overloaded or hung, kvtop keeps retrying",
        fault_s=15.0,
        recover_s=40.0,
    ),
    Fault(
        "http-401",
        "metrics",
        switch(status={"/metrics": 401}),
        http_healthy,
        says(r"○metrics.*API key was refused"),
        r"API key was refused",
        "metrics ○; notice: the API key was refused, check the key (the key itself is never shown)",
    ),
    Fault(
        "http-403",
        "metrics",
        switch(status={"/metrics": 403}),
        http_healthy,
        says(r"○metrics.*refused \(403\)"),
        r"refused \(403\)",
        "metrics ○; notice: refused (403), check the key or use the admin key",
    ),
    Fault(
        "http-404-metrics-disabled",
        "metrics",
        switch(status={"/metrics": 404}),
        http_healthy,
        # The story log's server_args say enable_metrics=True: a 404 is another service.
        says(r"◐metrics.*answers 404, but the log's server_args say enable_metrics=True"),
        r"answers 404, but the log's server_args say enable_metrics=True",
        "metrics ◐; notice: /metrics answers 404 while the log says enable_metrics=True: --url "
        "reaches another server or service (a server without --enable-metrics is no alert)",
    ),
    Fault(
        "http-500",
        "metrics",
        switch(status={"/metrics": 500}),
        http_healthy,
        says(r"◐metrics.*answered 500.*server log"),
        r"answered 500",
        "metrics ◐; notice: answered 500, the server is failing or starting, check its log",
    ),
    Fault(
        "http-html-body",
        "metrics",
        switch(body="html"),
        http_healthy,
        says(r"◐metrics.*no sglang: metrics.*proxy"),
        r"no sglang: metrics",
        "metrics ◐; notice: answered without sglang: metrics (an HTML page): --url points at a "
        "proxy or another service",
    ),
    Fault(
        "http-garbage-body",
        "metrics",
        switch(body="garbage"),
        http_healthy,
        says(r"◐metrics.*no sglang: metrics"),
        r"no sglang: metrics",
        "metrics ◐; the same sentence as for HTML; nothing from the bytes reaches the screen",
    ),
    Fault(
        "http-50mb-body",
        "metrics",
        switch(body="huge", huge_bytes=50 * 2**20),
        http_healthy,
        says(r"◐metrics.*more than 20 MiB.*stopped\s+reading"),
        r"more than 20 MiB",
        "metrics ◐; notice: sent more than 20 MiB so kvtop stopped reading (a real scrape is "
        "~100 KB); memory stays bounded",
    ),
    Fault(
        "http-slow-drip",
        "metrics",
        hangs(body="drip", drip_bytes=1, drip_max_s=30.0),
        answers,
        says(rf"◐metrics.*did not answer {within(FETCH_S)}"),
        rf"did not answer {within(FETCH_S)}",
        "metrics ◐; a body dripping one byte at a time is cut at the 5 s limit for the whole "
        "fetch, like a hung server",
        fault_s=15.0,
        recover_s=40.0,
    ),
    Fault(
        "http-restart-new-pool",
        "metrics",
        restart_bigger,
        lambda host: None,
        pool_171k,
        r"171,234",
        "the KV panel shows the new pool size (171,234) at the next scrape; /server_info is "
        "read again",
    ),
    Fault(
        "http-another-server",
        "metrics",
        another_server,
        the_log_server_again,
        log_pool_in_kv_panel,
        r"mismatch: metrics say glm-5\.3-flash, 655,360 tokens; the log says kimi-k2\.5, "
        r"159,277 tokens.*mismatch: /server_info says zai-org/glm-5\.3-flash, TP 16, 655,360 "
        r"tokens, SGLang 0\.5\.12",
        "--url reaches another server (another model, pool, TP size, version): the KV panel "
        "keeps the log's pool (159,277, its batch lines labelled \"metrics are from another "
        "server\"), never the other server's 655,360; the report says in red which facts differ "
        "between the log and /metrics and /server_info, with both values",
    ),
    Fault(
        "http-server-info-missing-fields",
        "metrics",
        info_broken({"version": "0.5.8"}),
        info_healthy,
        lambda text, snap: "●metrics" in text and snap is not None and snap.server_info is not None,
        None,
        "what /server_info lacks stays unknown (from the log instead); nothing invented",
    ),
    Fault(
        "http-server-info-wrong-types",
        "metrics",
        info_broken(
            {
                "version": 5.8,
                "tp_size": "eight",
                "mem_fraction_static": "lots",
                "max_total_num_tokens": [1, 2],
                "scheduler_info": "ready",
                "internal_states": {"memory_usage": 3},
            }
        ),
        info_healthy,
        lambda text, snap: "●metrics" in text and snap is not None and snap.server_info is not None,
        None,
        "values of the wrong type are dropped one by one and the log's values stand; the "
        "formula keeps the log's 0.88",
    ),
    Fault(
        "http-server-info-key-refused",
        "server_info",
        info_key_refused,
        info_key_accepted,
        says(r"◐metrics.*/server_info: the API key was refused by /server_info; check the key"),
        r"the API key was refused by /server_info",
        "metrics ◐ (not ●) while its numbers keep coming; notice: the API key was refused by "
        "/server_info, check the key; /server_info is asked again after 1, 2, 4 … refresh "
        "intervals (at most 30 s), not at every scrape",
    ),
    Fault(
        "http-server-info-hangs",
        "server_info",
        info_hangs,
        info_answers,
        says(rf"◐metrics.*/server_info did not answer {within(FETCH_S)}"),
        rf"/server_info did not answer {within(FETCH_S)}",
        "metrics ◐ while /metrics keeps updating at every refresh (its own connection and "
        "timing); notice: /server_info did not answer within 5 s",
        fault_s=15.0,
        recover_s=30.0,
    ),
]


# -- journal -------------------------------------------------------------------------------------
def journal_setup(host: FaultHost) -> None:
    host.journal = host.tmp / "journal"
    run1 = sglang_entries(UNIT, invocation(1), STORY_LINES[:40], T0_US)
    run2 = sglang_entries(UNIT, invocation(2), STORY_LINES, T0_US + 600_000_000)
    write_journal(host.journal, run1 + run2)
    host.journal_at = T0_US + 700_000_000
    host.journal_run = (UNIT, 2)


def journal_restarts(host: FaultHost) -> None:
    """The unit restarts twice within a minute: two new invocations, the second one ready."""
    at = host.journal_at + 1_000_000
    run3 = sglang_entries(UNIT, invocation(3), STORY_LINES[:30], at)
    run4 = sglang_entries(UNIT, invocation(4), STORY_LINES, at + 30_000_000)
    write_journal(host.journal, run3 + run4)
    host.journal_at = at + 60_000_000
    host.journal_run = (UNIT, 4)


def restarts_seen(text: str, snap: Snapshot | None) -> bool:
    return snap is not None and snap.analysis.startup.restarts >= 2 and "ready" in text


def batch_entry(host: FaultHost, tokens: int, name: str = "new") -> None:
    """One more Decode batch line of the running invocation, in journal file NAME."""
    at = host.journal_at + 1_000_000
    line = BATCH_LINE.format(sec=30, tokens=tokens).rstrip("\n")
    unit, run = host.journal_run
    write_journal(host.journal, sglang_entries(unit, invocation(run), [line], at), name)
    host.journal_at = at + 1_000_000


def journal_vacuum(host: FaultHost) -> None:
    """journalctl --vacuum-*: the followed file is deleted; journald writes on in a new one."""
    for path in host.journal.glob("*.journal"):
        path.unlink()
    batch_entry(host, 555, "after-vacuum")


def journal_more(host: FaultHost) -> None:
    batch_entry(host, 777)


def journal_tokens(tokens: int) -> Check:
    def check(text: str, snap: Snapshot | None) -> bool:
        return snap is not None and "●journal" in text and log_tokens(snap) == tokens

    return check


HISTORY = 1_000_000
HISTORY_FILES = 2  # written at once, one systemd-journal-remote per core (see million_entries)


def history_entry(i: int) -> dict[str, str | bytes | int]:
    """The I-th of the million older entries: eight older invocations of the unit."""
    return entry(
        UNIT,
        invocation(100 + i // 125_000),
        f"[2026-01-09 08:00:00 TP{i % 8}] Decode batch, #running-req: 1, #token: {i}",
        BOOT_AT_US + 1_000_000 + i * 50,  # 50 s of entries before T0_US
    )


def history_export(first: int, stop: int) -> bytes:
    """export_format([history_entry(i) for i in range(first, stop)]) from one template, the
    same bytes at a fraction of the CPU (the generic path costs 12 s for the million); the
    template is export_format's own entry with markers where the entries differ."""
    marked = export_format([entry(UNIT, "\x01inv", "\x01message", BOOT_AT_US + 999_999_999)])
    template = (
        marked.replace(b"%", b"%%")
        .replace(b"=%d\n" % (BOOT_AT_US + 999_999_999), b"=%(at)d\n")
        .replace(b"=999999999\n", b"=%(mono)d\n")
        .replace(b"\x01message", b"[2026-01-09 08:00:00 TP%(tp)d] Decode batch, #running-req: 1, "
                 b"#token: %(i)d")
        .replace(b"\x01inv", b"%(inv)s")
    )  # fmt: skip
    runs = {run: invocation(100 + run).encode() for run in range(HISTORY // 125_000 + 1)}
    parts = []
    for i in range(first, stop):
        at = BOOT_AT_US + 1_000_000 + i * 50
        run = runs[i // 125_000]
        parts.append(
            template % {b"at": at, b"mono": at - BOOT_AT_US, b"tp": i % 8, b"i": i, b"inv": run}
        )
    return b"".join(parts)


def million_entries(host: FaultHost) -> None:
    """A year of restarts: 1,000,000 older entries of the unit before the latest run. Written
    as HISTORY_FILES journal files at once, each by its own systemd-journal-remote fed by a
    thread of its own (a pipe's writer waits with the GIL released): journald keeps a long
    history in several files too, and journal-remote rotates into several on its own."""
    for i in (0, 1, 124_999, 125_000, HISTORY - 1):  # the template writes what entry() does
        assert history_export(i, i + 1) == export_format([history_entry(i)]), i
    host.journal = host.tmp / "journal"
    host.journal.mkdir()
    per_file = HISTORY // HISTORY_FILES

    def write(n: int) -> int:
        path = host.journal / f"history-{n}.journal"
        with subprocess.Popen(
            [JOURNAL_REMOTE, "-o", str(path), "-"],
            stdin=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        ) as proc:
            assert proc.stdin is not None
            chunk = 50_000
            for first in range(n * per_file, (n + 1) * per_file, chunk):
                proc.stdin.write(history_export(first, first + chunk))
            proc.stdin.close()
            return proc.wait()

    with concurrent.futures.ThreadPoolExecutor(HISTORY_FILES) as pool:
        codes = list(pool.map(write, range(HISTORY_FILES)))
    assert codes == [0] * HISTORY_FILES, f"systemd-journal-remote failed: {codes}"
    write_journal(host.journal, sglang_entries(UNIT, invocation(2), STORY_LINES, T0_US), "system")
    host.journal_at = T0_US + 10_000_000
    host.journal_run = (UNIT, 2)


def journal_missing_unit_then_starts(host: FaultHost) -> None:
    at = host.journal_at + 1_000_000
    write_journal(
        host.journal, sglang_entries("sglang-new.service", invocation(9), STORY_LINES, at)
    )
    host.journal_at = at + 1_000_000
    host.journal_run = ("sglang-new.service", 9)


def journal_damaged(host: FaultHost) -> None:
    """The unit's journal file cut in the middle (a full disk, a copy that stopped): systemd
    skips such a file without a word. kvtop checks the files every 0.5 s here instead of every
    5 s (the notice goes at the first check after the file is whole, whatever the period)."""
    assert host.monkeypatch is not None
    host.monkeypatch.setattr(journal_source, "DAMAGE_CHECK_S", 0.5)
    journal_setup(host)
    path = host.journal / "test.journal"
    os.truncate(path, path.stat().st_size // 2)


def journal_rewritten(host: FaultHost) -> None:
    """The damaged file is moved away and the unit logs its run again into a whole file."""
    (host.journal / "test.journal").rename(host.tmp / "test.journal.damaged")
    at = host.journal_at + 1_000_000
    write_journal(host.journal, sglang_entries(UNIT, invocation(2), STORY_LINES, at), "whole")
    host.journal_at = at + 1_000_000


def journal_dir_removed(host: FaultHost) -> None:
    """The directory goes; kvtop looks for it again every 0.2 s here instead of every 2 s
    (it reads on at the first look after it is back, whatever the period). It comes back with
    its file written whole: the step writes it while kvtop's loop waits, so no look can find
    the file half written (kvtop would call it damaged until its next check of the files)."""
    assert host.monkeypatch is not None
    host.monkeypatch.setattr(journal_source, "RETRY_S", 0.2)
    shutil.rmtree(host.journal)


def no_systemd_module(host: FaultHost) -> None:
    host.monkeypatch.setitem(sys.modules, "systemd.journal", None)  # import now fails


JOURNAL_ROWS = [
    Fault(
        "journal-unit-missing",
        "log",
        lambda host: None,
        journal_missing_unit_then_starts,
        says(r"◐journal.*no journal entries for sglang-new\.service"),
        r"no journal entries for sglang-new\.service",
        "journal ◐; notice: no entries for the unit, units with a similar name listed; kvtop "
        "waits and picks the unit up when it starts",
        options={"unit": "sglang-new"},
        setup=journal_setup,
    ),
    Fault(
        "journal-two-restarts-in-a-minute",
        "log",
        journal_restarts,
        journal_more,
        restarts_seen,
        None,
        "the startup panel follows the newest invocation; the status line counts the restarts",
        options={"unit": "sglang-kimi"},
        setup=journal_setup,
    ),
    Fault(
        "journal-vacuumed",
        "log",
        journal_vacuum,
        journal_more,
        journal_tokens(555),
        None,
        "the reader moves to the new file; what was read stays on screen",
        options={"unit": "sglang-kimi"},
        setup=journal_setup,
    ),
    Fault(
        "journal-no-systemd-python",
        "log",
        lambda host: None,
        journal_more,
        lambda text, snap: "●journal" in text and "ready" in text,
        r"· ready",
        "journalctl is used instead (same lines, same follow), no notice needed",
        options={"unit": "sglang-kimi"},
        setup=lambda host: (journal_setup(host), no_systemd_module(host))[0],
    ),
]

JOURNAL_ROWS += [
    Fault(
        "journal-file-damaged",
        "log",
        lambda host: None,
        journal_rewritten,
        says(
            r"◐journal.*journal file \S*test\.journal \(cut short: [\d,]+ bytes of the [\d,]+ "
            r"its header counts\) is damaged.*journalctl --verify --file=\S*test\.journal"
        ),
        r"journal file \S*test\.journal \(cut short: .*\) is damaged; systemd skips it",
        "journal ◐; notice: journal file …/test.journal (cut short: N bytes of the M its header "
        "counts) is damaged, systemd skips it, run journalctl --verify --file=…; then no entries "
        'for the unit (instead of only "no entries … similar name: none")',
        options={"unit": "sglang-kimi"},
        setup=journal_damaged,
    ),
    Fault(
        "journal-directory-removed",
        "log",
        journal_dir_removed,
        lambda host: batch_entry(host, 555, "after-removal"),
        says(r"◐journal.*the journal directory \S+ was removed while kvtop read.*when it is back"),
        r"cannot read the journal for sglang-kimi\.service: \S+ does not exist",
        "journal ◐; notice: the journal directory was removed while kvtop read the unit, what "
        "was read stays on screen, kvtop reads on when it is back (--once: the directory does "
        "not exist)",
        options={"unit": "sglang-kimi"},
        setup=journal_setup,
    ),
]

JOURNAL_ROWS.append(
    Fault(
        "journal-1m-entry-history",
        "log",
        lambda host: None,
        journal_more,
        lambda text, snap: "●journal" in text and re.search(r"(?m)(^ |· )ready", text) is not None,
        r"· ready",
        "the latest run is found by its invocation id without reading the million older "
        "entries (3 ms vs 3 ms for 10,000: bench_journal_seek); the screen is ready at once",
        options={"unit": "sglang-kimi"},
        setup=million_entries,
    )
)

# One GPU failing on its own, ranks without a GPU, power, throttling, memory that is not the
# server's, memory released: each judged the same in all four views (the `level` column).
GPU_VERDICT_ROWS = [
    Fault(
        "nvml-gpu-handle-unknown-error",
        "nvml",
        nvml(errors=[("nvmlDeviceGetHandleByIndex_v2", 3, 999)]),
        nvml_healthy,
        handle_unreadable,
        r"GPU 3: unreadable through NVML \(handle: Unknown Error, code 999\)",
        "GPU 3's row says ✖ handle unreadable through NVML (Unknown Error, code 999); the "
        "other seven keep their bars and numbers; CRITICAL everywhere, naming GPU 3 (TP3); "
        "kvtop_gpu_up 0 for GPU 3 only",
        level="critical",
        json_ok=lambda data: (
            [g["status"] for g in data["gpus"]]  # type: ignore[attr-defined]
            == ["ok"] * 3 + ["error"] + ["ok"] * 4
        ),
        export_ok=lambda families: gpu_up(families) == {str(i): float(i != 3) for i in range(8)},
    ),
    Fault(
        "nvml-tp8-log-seven-gpus",
        "nvml",
        lambda host: None,
        eight_again,
        tp7_without_gpu,
        r"TP7 from the log has no GPU here: NVML sees 7 GPUs",
        "a TP8 log on a host whose NVML sees 7 GPUs from the start: note TP7 from the log has "
        "no GPU here; CRITICAL everywhere, naming TP7",
        setup=seven_gpus,
        level="critical",
    ),
    Fault(
        "nvml-power-at-limit",
        "nvml",
        at_power_limit,
        gpus_restored,
        rows_at_limit_calm,
        None,
        "every GPU at its 700 W limit (software power cap): the power column says 700W, no "
        "alert anywhere (normal under load)",
        level="ok",
    ),
    Fault(
        "nvml-thermal-throttle",
        "nvml",
        thermal_throttle,
        gpus_restored,
        gpu2_throttled,
        None,  # --once says the verdict once the report carries it (the level column)
        "GPU 2's clocks lowered for heat (NVML: HW thermal slowdown): ▲ on its row, a warning "
        "naming the reason everywhere",
        level="warning",
        json_ok=lambda data: (
            [g["clocks_lowered_by"] for g in data["gpus"]]  # type: ignore[attr-defined]
            == [[]] * 2 + [["HW thermal slowdown"]] + [[]] * 5
        ),
    ),
    Fault(
        "nvml-foreign-process-before-restart",
        "nvml",
        foreign_before_restart,
        foreign_gone,
        foreign_is_other,
        None,  # the JSON's and the exporter's numbers are checked (json_ok, export_ok)
        "another user's process, started before the server's restart, allocates 4.50 GiB on "
        "GPU 3: 4.50 GiB of other processes in the bar (after the server's segments), GPU "
        "detail, --once and the exporter; runtime unchanged; the headroom warning for GPU 3",
        level="warning",
        json_ok=foreign_in_json,
        export_ok=foreign_exported,
    ),
    Fault(
        "nvml-memory-released",
        "nvml",
        memory_released,
        server_back,
        released_said,
        r"GPU 0–7: the log itemises more than NVML sees in use, so runtime is unknown",
        "every GPU's memory released under the server's processes while the log says ready: "
        "runtime unknown (never −130 GiB) on screen, in --once, the JSON and the exporter; a "
        "note says the log itemises more than NVML sees in use",
        level="ok",
        json_ok=no_negative_breakdown,
        export_ok=no_negative_sample,
    ),
    Fault(
        "nvml-orphan-holds-memory",
        "nvml",
        orphan_left,
        orphan_ended,
        says(r"▲ ready \S+ · 1 SGLang process with no server"),
        r"orphans: sglang::detokenizer 600 pid \d+ on GPU 3, 2\.00 GiB, up \S+; end them: kill \d+",
        "an SGLang detokenizer adopted by PID 1 (its main process gone) still holds 2.00 GiB on "
        "GPU 3: the orphans warning names it (title, pid, GPU, GiB, age) with the kill command; "
        "--once lists it (text 'orphans:', JSON orphans[]), --check orphans=1; kvtop signals "
        "nothing; its memory is other processes' on GPU 3, never the rank's",
        level="warning",
        json_ok=orphan_in_json,
    ),
]

# -- memory that keeps growing -------------------------------------------------------------------
# GPU 0's used memory climbs while the server serves (the fake driver reads its state file at
# every call): a leak of days shown in seconds, with the rate and the span the user may set.
LEAK_MIB_PER_STEP = 8  # every 0.1 s: 80 MiB/s, under the headroom warning for 40 s
_LEAKS: dict[int, asyncio.Task[None]] = {}


async def _leak(host: FaultHost) -> None:
    used = int(host.state.gpus[0]["used_mib"])  # type: ignore[call-overload]
    while True:
        used += LEAK_MIB_PER_STEP
        host.state.gpus[0]["used_mib"] = used
        host.write_nvml()
        await asyncio.sleep(0.1)


def gpu0_leaks(host: FaultHost) -> None:
    _LEAKS[id(host)] = asyncio.get_running_loop().create_task(_leak(host))


def gpu0_leak_stops(host: FaultHost) -> None:
    task = _LEAKS.pop(id(host), None)
    if task is not None:
        task.cancel()
    nvml_healthy(host)


def gpu0_growing(text: str, snap: Snapshot | None) -> bool:
    row0 = re.search(r"(?m)^\S?\s+0\s+TP0.*$", text)
    return (
        snap is not None
        and any(a.kind == "memory_growing" and a.subject == "GPU 0" for a in snap.verdict.alerts)
        and row0 is not None
        and row0.group(0).rstrip().endswith("▲")
        and "GPU 0: runtime memory grows" in flat(text)  # the header's words, cut to fit
    )


GPU_VERDICT_ROWS.append(
    Fault(
        "nvml-runtime-memory-leak",
        "nvml",
        gpu0_leaks,
        gpu0_leak_stops,
        gpu0_growing,
        None,  # one look has no history: --once and --check cannot see a rate
        "GPU 0's runtime memory climbs steadily while the server serves: ▲ on its row and a "
        "memory_growing warning naming GPU 0, the rate in GiB/day, the span it was measured "
        "over and when its free memory runs out at that rate (here with a 1 s least span; "
        "3 h by default)",
        options={"thresholds": Thresholds(growth_min_span_s=1.0)},
        fault_s=30.0,
    )
)


ROWS = NVML_ROWS + GPU_VERDICT_ROWS + LOG_ROWS + HTTP_ROWS + JOURNAL_ROWS
# Rows that take several seconds on their own (a million journal entries written, and the 2 s
# delay that needs a few slow rounds): `-m "not slow"` leaves them out, CI runs all. The hangs,
# timeouts and drips are waited out against shortened limits (FETCH_S, NVML_CALL_S): ~2 s each.
SLOW_ROWS = {
    "http-2s-delay",
    "journal-1m-entry-history",
}
assert {r.id for r in ROWS} >= SLOW_ROWS
# Rows whose fault is there from the start (the setup made it): no healthy start to wait for.
STARTS_FAULTY = {"journal-unit-missing", "journal-file-damaged", "nvml-tp8-log-seven-gpus"}
CHECK_LEVELS = {0: Level.OK, 1: Level.WARNING, 2: Level.CRITICAL, 3: Level.UNKNOWN}


async def same_verdict(
    row: Fault, app: KvtopApp, host: FaultHost, overrides: dict[str, object], data: dict
) -> None:
    """The row's level in the live view (its snapshot's verdict and the header's level),
    `--once --json` (its verdict), `--check` (its exit status) and the exporter
    (kvtop_verdict)."""
    live = app.state.latest
    assert live is not None
    levels = {"live": live.verdict.level}
    assert app.state.status is not None
    levels["live header"] = app.state.status.level
    result = await check_report(host.options(**overrides))
    levels["--check"] = CHECK_LEVELS[result.exit_code]
    levels["--once --json"] = Level(data["verdict"]["level"])
    families = render(live, "gpu-host")
    (level,) = [labels["level"] for labels, v in exported(families, "kvtop_verdict") if v == 1]
    levels["exporter"] = Level(level)
    seen = set(levels.values())
    assert len(seen) == 1, f"{row.id}: the views disagree: {levels} ({result.line})"
    if row.level != "same":
        assert seen == {Level(row.level)}, f"{row.id}: {levels} ({result.line})"
    if row.json_ok is not None:
        assert row.json_ok(data), f"{row.id}: the --once JSON: {data.get('gpus')}"
    if row.export_ok is not None:
        assert row.export_ok(families), f"{row.id}: the exporter"


def healthy(log_name: str) -> Check:
    """Every source's marker ● (in its full or its short form: a long state, such as a
    mismatch that outlives the fault, shortens the markers on a 120-column status line)."""

    def marked(text: str, name: str) -> bool:
        return f"●{SOURCE_NAMES[name]}" in text or f"●{SOURCE_SHORT[name]}" in text

    def check(text: str, snap: Snapshot | None) -> bool:
        return (
            snap is not None
            and marked(text, log_name)
            and marked(text, "nvml")
            and marked(text, "metrics")
            and len(snap.gpus) == 8
        )

    return check


async def wait_fresh(app: KvtopApp, pilot, host: FaultHost, sources: set[str], what: str) -> None:
    """Move a number in every source; the app's snapshot must show it for each of SOURCES."""
    bumped = host.bump(sources)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 15.0
    while True:
        await pilot.pause(0.01)
        snap = app.state.latest
        stale = [s for s in sources if snap is None or not FRESH[s](snap, bumped)]
        if not stale:
            return
        if loop.time() > deadline:
            got = {
                "nvml": None if snap is None else [g.sample.used_gib for g in snap.gpus],
                "log": None if snap is None else log_tokens(snap),
            }
            raise AssertionError(f"{what}: {stale} stopped updating ({bumped}, {got})")


@pytest.mark.parametrize(
    "row",
    [pytest.param(r, id=r.id, marks=[pytest.mark.slow] if r.id in SLOW_ROWS else []) for r in ROWS],
)
async def test_fault(
    row: Fault, fake_lib: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if "unit" in row.options and journal_remote_missing():
        pytest.skip(journal_remote_missing() or "")
    body = asyncio.ensure_future(run_row(row, fake_lib, tmp_path, monkeypatch))
    done, _ = await asyncio.wait([body], timeout=ROW_LIMIT_S)
    if not done:  # a hang must fail the row, with where every task was stuck
        stacks = io.StringIO()
        for task in asyncio.all_tasks():
            task.print_stack(file=stacks)
        body.cancel()
        pytest.fail(f"{row.id} did not finish within {ROW_LIMIT_S:g} s:\n{stacks.getvalue()}")
    body.result()


async def run_row(
    row: Fault, fake_lib: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FaultHost(tmp_path, fake_lib) as host:
        host.monkeypatch = monkeypatch
        if row.setup is not None:
            row.setup(host)
        overrides = dict(row.options)
        journal = "unit" in overrides
        if journal:
            overrides.update(log_file=None, journal_dir=str(host.journal))
        log_name = "journal" if journal else "log"
        session = host.session(**overrides)
        host.session_ref = session
        app = KvtopApp(session, source_label="fault matrix", host_name="gpu-host")
        seen = host.outputs
        updating = {"nvml", "metrics", "log"} - {row.hits}
        if journal:
            updating.discard("log")  # bump() appends to a file; the journal rows move it themselves
        async with app.run_test(size=(120, 40)) as pilot:
            if row.id not in STARTS_FAULTY:
                await wait_screen(app, pilot, "healthy start", healthy(log_name), 20, seen)

            result = row.inject(host)
            if asyncio.iscoroutine(result):
                await result
            shown = await wait_screen(
                app, pilot, f"{row.id} on screen", row.screen, row.fault_s, seen
            )
            await wait_fresh(app, pilot, host, updating, f"during {row.id}")
            if "○metrics" in shown:  # nothing to read: old numbers must not pass for current
                tokens = f"{log_tokens(app.state.latest):,}"
                await wait_screen(
                    app, pilot, "the log's batch line in the KV panel",
                    lambda text, snap: snap.metrics is None and tokens in text, 5, seen,
                )  # fmt: skip

            if row.once is not None or row.level is not None:
                text, data = await once_reports(host.options(**overrides))
                seen += [text, str(data)]
                if row.once is not None:
                    assert re.search(row.once, flat(text)), f"--once during {row.id}:\n{text}"
                assert "Traceback" not in text
                if row.level is not None:
                    await same_verdict(row, app, host, overrides, data)

            result = row.clear(host)
            if asyncio.iscoroutine(result):
                await result
            await wait_screen(
                app, pilot, f"recovery from {row.id}", healthy(log_name), row.recover_s, seen
            )
            await wait_fresh(
                app,
                pilot,
                host,
                updating
                | ({row.hits} - {"log"} if journal else {row.hits}) - {"terminal", "server_info"},
                f"after {row.id}",
            )
            if journal:
                journal_more(host)
                await wait_screen(app, pilot, "journal lines after", journal_tokens(777), 15, seen)
                if row.id == "journal-no-systemd-python":
                    assert session.log.journal is not None
                    assert session.log.journal.backend_used == "journalctl"
            snap = app.state.latest
            assert snap is not None
            for name in ("nvml", "metrics"):
                assert source_state(snap, name)[0] == "ok"
        assert all(API_KEY not in out for out in seen), f"the API key leaked during {row.id}"
