"""Failures with their cause and the phase they hit.

Real excerpts (tests/fixtures/sglang-logs/30-36, sources in their sidecars) and lines in the
exact formats of SGLang's source for each version (its exception handlers) go through the real
parser, tracker, analysis and reports; two through the real command line (`--once --json`).
Each test states the values an operator reads: the cause line, the kind, the OOM sizes, the
phase, and the next step's key words.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvtop.model.analysis import Analysis, analyse
from kvtop.model.status.server_status import server_status
from kvtop.model.timeline import recent_events
from kvtop.report.json_report import to_json
from kvtop.report.text import render_snapshot
from kvtop.sglang.startup import StartupTracker
from kvtop.sglang.story import fold_lines
from tests.support.paths import REAL_LOGS, ROOT
from tests.support.tui_support import analysis_snapshot

FAILURE_LOGS = sorted(REAL_LOGS.glob("3[0-9]-*.log"))


def _fold(lines: list[str]) -> StartupTracker:
    return fold_lines(lines)


def _analysis(lines: list[str], source: str = "test.log") -> Analysis:
    return analyse(fold_lines(lines), source)


def _plain(report: Analysis) -> str:
    import io

    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=400, color_system=None).print(
        render_snapshot(analysis_snapshot(report))
    )
    return out.getvalue()


def _startup_json(lines: list[str]) -> dict[str, object]:
    data = to_json(_analysis(lines))["startup"]
    assert isinstance(data, dict)
    return data


# --- real excerpts: every sidecar value ------------------------------------------------------


@pytest.mark.parametrize("log", FAILURE_LOGS, ids=[p.stem[:2] for p in FAILURE_LOGS])
def test_failure_excerpt_matches_its_sidecar(log: Path) -> None:
    sidecar = json.loads(log.with_suffix(".json").read_text())
    with log.open(encoding="utf-8") as handle:
        report = analyse(fold_lines(handle), log.name)
    startup = to_json(report)["startup"]
    assert isinstance(startup, dict)
    if sidecar["failure"] is None:
        assert startup["state"] == "starting"
        assert startup["failure"] is None and startup["failed_phase"] is None
        return
    assert startup["state"] == "failed"
    assert startup["failure_kind"] == sidecar["failure_kind"]
    assert startup["failed_phase"] == sidecar["failed_phase"]
    assert startup["oom"] == sidecar["oom"]
    # JSON `failure`: the traceback's last line when the excerpt has it, else the line itself.
    cause = sidecar["failure_cause"]
    if cause is not None:
        assert startup["failure"] == cause
    else:
        assert str(startup["failure"]).startswith(sidecar["failure"])
    assert str(startup["failure_line"]).startswith(sidecar["failure"])
    if "profiled_tokens" in sidecar:
        assert report.startup.failure is not None
        assert report.startup.failure.profiled_tokens == sidecar["profiled_tokens"]
    if "minimum_viable_mfs" in sidecar:
        assert startup["minimum_viable_mfs"] == pytest.approx(sidecar["minimum_viable_mfs"])


def _excerpt(prefix: str) -> list[str]:
    (log,) = REAL_LOGS.glob(prefix + "-*.log")
    return log.read_text(encoding="utf-8").splitlines()


def test_graph_capture_oom_excerpt_next_step() -> None:
    """30: the torch OOM inside `Capture cuda graph failed`: lower mfs or the graph batch size."""
    report = _analysis(_excerpt("30"))
    assert report.next_step is not None
    assert "--mem-fraction-static" in report.next_step
    assert "--cuda-graph-max-bs" in report.next_step
    text = _plain(report)
    assert "FAILED: Exception: Capture cuda graph failed: CUDA out of memory." in text
    assert "phase: cuda graph" in text
    assert "out of memory: tried to allocate 448.00 MiB" in text


def test_npu_pool_oom_excerpt_next_step() -> None:
    """34: NPU out of memory allocating the KV buffer (frames in mem_cache/memory_pool.py)."""
    report = _analysis(_excerpt("34"))
    assert report.next_step is not None
    assert report.next_step.startswith("The KV cache did not fit: lower --mem-fraction-static")
    assert "tried to allocate 98.71 GiB, 35.47 GiB free of 60.96 GiB" in _plain(report)


def test_warmup_excerpt_says_warmup_not_serving() -> None:
    """32: a prefill batch ran, then the warmup request got 502 from a proxy."""
    report = _analysis(_excerpt("32"))
    assert report.next_step is not None
    assert "warmup request failed (AssertionError: res=<Response [502]>" in report.next_step
    assert "proxy" in report.next_step
    assert report.insights[0].startswith("startup failed in warmup: Initialization failed. ")


def test_negative_profiled_capacity_excerpt() -> None:
    """33: `larger than the profiled value -561981` is a refused start, with its numbers."""
    report = _analysis(_excerpt("33"))
    assert report.next_step is not None
    assert "Raise --mem-fraction-static above 0.885" in report.next_step
    assert "-561,981 tokens" in report.next_step
    text = _plain(report)
    assert "profiled KV capacity: -561,981 tokens" in text
    assert "minimum viable mem_fraction_static: 0.8846" in text


def test_capture_that_began_and_crashed_is_in_progress() -> None:
    """36: `Capture cuda graph begin` without its end, then the scheduler's exception."""
    lines = _excerpt("36")
    startup = _startup_json(lines)
    assert startup["failed_phase"] == "decode graph"
    assert startup["failure"] == "Scheduler hit an exception: Traceback (most recent call last):"
    text = _plain(_analysis(lines))
    assert (
        "FAILED: Scheduler hit an exception (the traceback's last line is not in the log)" in text
    )


# --- a chained traceback, line by line ------------------------------------------------------

# SGLang 0.4.9 around excerpt 31: the scheduler's failure line before it, and the wrapper
# `raise Exception(f"Capture cuda graph failed: {e}\n{CUDA_GRAPH_CAPTURE_FAILED_MSG}")` after.
FAILED_049 = (
    "[2025-07-11 10:00:03 TP0] Scheduler hit an exception: Traceback (most recent call last):"
)
WRAPPER_049 = [
    '  File "/opt/conda/lib/python3.10/site-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 338, in __init__',
    "    raise Exception(",
    "Exception: Capture cuda graph failed: CUDA error: operation not permitted when stream is capturing",
    "Possible solutions:",
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)",
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)",
    "3. disable torch compile by not using --enable-torch-compile",
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)",
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose ",
]


def test_chained_traceback_cause_follows_the_lines_as_they_arrive() -> None:
    tracker = StartupTracker()
    fold_lines([FAILED_049], tracker)
    assert tracker.current.failure is not None
    assert tracker.current.failure.cause is None  # the traceback has not said anything yet
    fold_lines(_excerpt("31"), tracker)
    failure = tracker.current.failure
    assert failure is not None
    assert (
        failure.cause
        == "RuntimeError: CUDA error: operation not permitted when stream is capturing"
    )
    assert failure.kind == "scheduler_exception"
    fold_lines(WRAPPER_049, tracker)
    failure = tracker.current.failure
    assert failure is not None
    # The last exception of the chain is the cause; "Possible solutions" lines are not.
    assert failure.cause == (
        "Exception: Capture cuda graph failed: CUDA error: operation not permitted when stream "
        "is capturing"
    )
    assert failure.kind == "graph_capture"
    assert failure.phase == "cuda graph"
    report = analyse(tracker, "x.log")
    assert report.next_step is not None and "--disable-cuda-graph" in report.next_step
    assert len(tracker.current.failures) == 1  # one failure, not one per exception line


def test_chained_oom_keeps_the_sizes_of_the_inner_error() -> None:
    """torch OOM, then the wrapper (0.5.x): kind out_of_memory, sizes from either."""
    lines = [
        "[2026-02-27 09:05:52 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=11.12 GB",
        "[2026-02-27 09:05:55 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl/srt/model_executor/cuda_graph_runner.py", line 380, in capture',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.04 GiB memory in use.",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "/sgl/srt/managers/scheduler.py", line 2810, in run_scheduler_process',
        "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB.",
        "Possible solutions:",
    ]
    startup = _startup_json(lines)
    assert startup["failure"] == (
        "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB."
    )
    assert startup["failure_kind"] == "out_of_memory"
    assert startup["failed_phase"] == "decode graph"
    assert startup["oom"] == {"tried_gib": 2.0, "free_gib": 1.06, "total_gib": 79.11}


# --- synthetic lines in SGLang's formats, by version -------------------------------------------

P = "[2026-02-27 09:05:{:02d} TP0] "
LOADED = [
    "[2026-02-27 09:02:05] server_args=ServerArgs(model_path='/m', tp_size=1, page_size=1, "
    "mem_fraction_static=0.88, context_length=8192)",
    P.format(10) + "Load weight begin. avail mem=93.17 GB",
    P.format(49)
    + "Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=5.60 GB, mem usage=87.57 GB.",
]
TRACE = '  File "/sgl/srt/model_executor/model_runner.py", line 207, in initialize'
SCHED_FAILED = P.format(50) + "Scheduler hit an exception: Traceback (most recent call last):"


@pytest.mark.parametrize(
    ("version", "cause"),
    [
        (
            "0.4.6-0.5.2",
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
        ),
        (
            "0.5.8",
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            "Current value: self.server_args.mem_fraction_static=0.88",
        ),
        (
            "0.5.10-0.5.23",
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            "Current value: mem_fraction_static=0.88",
        ),
    ],
)
def test_not_enough_memory_by_version(version: str, cause: str) -> None:
    startup = _startup_json([*LOADED, SCHED_FAILED, TRACE, cause])
    assert startup["failure"] == cause, version
    assert startup["failure_kind"] == "not_enough_memory"
    assert startup["failed_phase"] == "memory pool"  # weights loaded, the pool not allocated
    assert startup["oom"] is None
    # 1 - 5.60 / 93.17 = 0.9399: the value where the KV cache gets 0 GiB.
    assert startup["minimum_viable_mfs"] == pytest.approx(0.9399)
    assert "Raise --mem-fraction-static (now 0.88) above 0.940" in str(startup["next_step"])


def test_loaded_weights_leave_no_memory_0_5_14() -> None:
    cause = (
        "ValueError: Loaded weights leave no GPU memory for the KV cache under "
        "--mem-fraction-static=0.88. Raise --mem-fraction-static above 0.940 (minimum viable = 1 - "
        "available/pre = 0.9399). If using speculative decoding, draft weights are now counted."
    )
    startup = _startup_json([*LOADED, SCHED_FAILED, TRACE, cause])
    assert startup["failure"] == cause
    assert startup["failure_kind"] == "not_enough_memory"
    assert startup["minimum_viable_mfs"] == pytest.approx(0.9399)
    assert startup["failed_phase"] == "memory pool"


OOM_CAUSES = {
    # torch >= 2.1 caching allocator (CUDA); HIP the same sentence; NPU and old torch the
    # parenthesised form; allocations outside the allocator carry no sizes.
    "cuda": (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.50 GiB. GPU 0 has a total "
        "capacity of 79.11 GiB of which 512.00 MiB is free. Process 3210 has 78.59 GiB memory in use.",
        {"tried_gib": 3.5, "free_gib": 0.5, "total_gib": 79.11},
    ),
    "hip": (
        "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 1024.00 MiB. GPU 3 has a total "
        "capacity of 191.98 GiB of which 0 bytes is free. Of the allocated memory 190.1 GiB is allocated by PyTorch",
        {"tried_gib": 1.0, "free_gib": 0.0, "total_gib": 191.98},
    ),
    "npu": (
        "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.96 GiB total capacity; "
        "55.91 GiB already allocated; 55.91 GiB current active; 1.80 GiB free; 58.73 GiB reserved in total by PyTorch)",
        {"tried_gib": 2.0, "free_gib": 1.8, "total_gib": 60.96},
    ),
    "driver": (
        "RuntimeError: CUDA error: out of memory",
        {"tried_gib": None, "free_gib": None, "total_gib": None},
    ),
    "accelerator": (
        "torch.AcceleratorError: CUDA error: out of memory",
        {"tried_gib": None, "free_gib": None, "total_gib": None},
    ),
    "hip-runtime": (
        "RuntimeError: HIP error: hipErrorOutOfMemory",
        {"tried_gib": None, "free_gib": None, "total_gib": None},
    ),
}


@pytest.mark.parametrize("backend", list(OOM_CAUSES))
def test_out_of_memory_on_every_backend_while_loading_weights(backend: str) -> None:
    cause, sizes = OOM_CAUSES[backend]
    lines = [
        *LOADED[:2],
        SCHED_FAILED,
        '  File "/sgl/srt/model_loader/loader.py", line 380, in load_model',
        cause,
    ]
    startup = _startup_json(lines)
    assert startup["failure"] == cause
    assert startup["failure_kind"] == "out_of_memory"
    assert startup["oom"] == sizes
    assert startup["failed_phase"] == "load weights"  # `Load weight begin` without its end
    step = str(startup["next_step"])
    assert "more GPUs (--tp-size)" in step and "quantiz" in step and "smaller model" in step


SERVING = [
    *LOADED,
    P.format(50) + "KV Cache is allocated. #tokens: 20000, K size: 1.22 GB, V size: 1.22 GB",
    P.format(51) + "Memory pool end. avail mem=3.10 GB",
    P.format(52)
    + "Capture cuda graph begin. This can take up to several minutes. avail mem=3.05 GB",
    P.format(59)
    + "Capture cuda graph end. Time elapsed: 6.83 s. mem usage=0.71 GB. avail mem=2.34 GB.",
    "[2026-02-27 09:06:31] The server is fired up and ready to roll!",
    "[2026-02-27 09:10:01 TP0] Decode batch. #running-req: 40, #token: 19000, token usage: 0.95, gen throughput (token/s): 800.00, #queue-req: 3",
    "[2026-02-27 09:10:02 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/sgl/srt/managers/scheduler.py", line 999, in event_loop_overlap',
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 93.17 GiB of which 1.02 GiB is free.",
]


def test_oom_while_serving_is_a_crash_while_serving() -> None:
    report = _analysis(SERVING)
    startup = to_json(report)["startup"]
    assert isinstance(startup, dict)
    assert startup["state"] == "failed"
    assert startup["failed_phase"] == "serving"
    assert startup["failure_kind"] == "out_of_memory"
    assert startup["oom"] == {"tried_gib": 1.5, "free_gib": 1.02, "total_gib": 93.17}
    step = str(startup["next_step"])
    assert "--chunked-prefill-size" in step and "--max-running-requests" in step
    # Never "startup failed" in the words: header, report, insights, events panel, alert.
    text = _plain(report)
    assert "startup failed" not in text.lower()
    title = next(line for line in text.splitlines() if line.startswith("kvtop report"))
    assert "failed while serving" in title
    assert "CRASHED while serving: Scheduler hit an exception: torch.OutOfMemoryError" in text
    assert report.insights[0].startswith("crashed while serving: Scheduler hit an exception: ")
    status = server_status(report.startup, report.startup.last_time)  # type: ignore[arg-type]
    assert status.text == "crashed while serving: out of memory"
    row = next(r for r in recent_events(report.startup) if r.failure)
    assert row.what == "out of memory while serving"
    assert row.message.startswith("Scheduler hit an exception: torch.OutOfMemoryError: CUDA out")


def test_exception_in_graph_capture_not_wrapped() -> None:
    """A TypeError (not a RuntimeError) escapes the capture unwrapped: the cause is the TypeError
    and the capture that began and never ended is the phase."""
    lines = [
        *SERVING[:7],
        P.format(52)
        + "Capture cuda graph begin. This can take up to several minutes. avail mem=3.05 GB",
        SCHED_FAILED,
        '  File "/sgl/srt/model_executor/cuda_graph_runner.py", line 380, in capture_one_batch_size',
        "TypeError: forward() got an unexpected keyword argument 'pp_proxy_tensors'",
    ]
    startup = _startup_json(lines[:4] + lines[7:])
    assert (
        startup["failure"]
        == "TypeError: forward() got an unexpected keyword argument 'pp_proxy_tensors'"
    )
    assert startup["failure_kind"] == "scheduler_exception"
    assert startup["failed_phase"] == "decode graph"
    assert "--disable-cuda-graph" in str(startup["next_step"])


def test_rank_scheduler_dead_then_eof_error_0_5_8() -> None:
    """≤0.5.8: the main process says a rank died, then an EOFError traceback: not the cause."""
    lines = [
        *LOADED[:2],
        "[2026-02-27 09:05:30] Rank 0 scheduler is dead. Please check if there are relevant logs.",
        "[2026-02-27 09:05:30] Exit code: -9",
        "Traceback (most recent call last):",
        '  File "<frozen runpy>", line 198, in _run_module_as_main',
        '  File "/sgl/srt/entrypoints/engine.py", line 700, in _launch_subprocesses',
        "    data = scheduler_pipe_readers[i].recv()",
        "EOFError",
    ]
    startup = _startup_json(lines)
    assert (
        startup["failure"] == "Rank 0 scheduler is dead. Please check if there are relevant logs."
    )
    assert startup["failure_kind"] == "scheduler_died"
    assert startup["failed_phase"] == "load weights"
    assert "dmesg" in str(startup["next_step"])


def test_scheduler_died_raised_in_the_launcher_0_5_10() -> None:
    """0.5.10+: the launcher raises; the uncaught traceback (outermost frame) is the failure."""
    cause = (
        "RuntimeError: Rank 0 scheduler died during initialization (exit code: -9). If exit code "
        "is -9 (SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check."
    )
    lines = [
        *LOADED[:2],
        "Traceback (most recent call last):",
        '  File "<frozen runpy>", line 198, in _run_module_as_main',
        '  File "/sgl/srt/entrypoints/engine.py", line 900, in _wait_for_scheduler_ready',
        cause,
    ]
    startup = _startup_json(lines)
    assert startup["failure"] == cause
    assert startup["failure_kind"] == "scheduler_died"
    assert startup["failed_phase"] == "load weights"


def test_a_raise_in_the_launcher_is_a_failure_a_logged_traceback_is_not() -> None:
    launcher = [
        "Traceback (most recent call last):",
        '  File "/usr/local/bin/sglang", line 8, in <module>',
        "    sys.exit(main())",
        "ValueError: --tp-size 3 does not divide the number of attention heads (32)",
    ]
    startup = _startup_json(launcher)
    assert startup["failure"] == launcher[-1]
    assert startup["failure_kind"] == "exception"
    assert str(startup["next_step"]).startswith("Fix what the error names (ValueError: --tp-size 3")
    # A handled exception logged with its traceback (not from a process's outermost frame), and
    # Ctrl-C: no failure.
    handled = [*LOADED, "Traceback (most recent call last):", TRACE, "ValueError: bad token"]
    assert _startup_json(handled)["failure"] is None
    ctrl_c = ["Traceback (most recent call last):", launcher[1], "KeyboardInterrupt"]
    assert _startup_json(ctrl_c)["failure"] is None  # a stop (the lifecycle's), not a failure


def test_warmup_error_0_4_6_get_model_info() -> None:
    """0.4.6-0.5.2: `/get_model_info` never answered 200; the cause is the last line."""
    lines = [
        *SERVING[:7],
        "[2026-02-27 09:06:10] INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
        "[2026-02-27 09:08:10] Initialization failed. warmup error: Traceback (most recent call last):",
        '  File "/sgl/srt/entrypoints/http_server.py", line 733, in _wait_and_warmup',
        '    assert res.status_code == 200, f"{res}"',
        "AssertionError: <Response [500]>",
    ]
    startup = _startup_json(lines)
    assert startup["failure"] == "AssertionError: <Response [500]>"
    assert startup["failure_kind"] == "warmup"
    assert startup["failed_phase"] == "warmup"


def test_control_characters_in_a_cause_are_made_visible() -> None:
    startup = _startup_json([SCHED_FAILED, TRACE, "RuntimeError: boom \x1b[2J\x07 end"])
    assert startup["failure"] == "RuntimeError: boom ␛[2J␇ end"


def test_no_failure_has_null_fields() -> None:
    startup = _startup_json(LOADED)
    assert startup["failure"] is None
    assert startup["failure_kind"] is None and startup["failed_phase"] is None
    assert startup["oom"] is None and startup["minimum_viable_mfs"] is None


# --- bounded memory for a huge traceback ------------------------------------------------------


def _huge_traceback(frames: int) -> Iterator[str]:
    yield SCHED_FAILED
    for i in range(frames):
        yield f'  File "/sgl/srt/layers/deep_{i}.py", line {i}, in forward'
        yield "    return self.forward_impl(x) " + "x" * 200
    yield "RuntimeError: the end"


def test_huge_traceback_keeps_memory_bounded() -> None:
    """A 200,000-line traceback is read one line at a time; nothing of it is kept but its cause."""
    tracemalloc.start()
    try:
        tracker = fold_lines(_huge_traceback(100_000))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert tracker.current.failure is not None
    assert tracker.current.failure.cause == "RuntimeError: the end"
    assert peak < 8 << 20, f"peak {peak / (1 << 20):.1f} MiB for a 22 MB traceback"


# --- the real command line -------------------------------------------------------------------


def _once_json(log: Path) -> dict[str, object]:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvtop",
            "--once",
            "--json",
            "--no-gpus",
            "--no-metrics",
            "--log-file",
            str(log),
        ],
        capture_output=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    data = json.loads(result.stdout)
    startup = data["startup"]
    assert isinstance(startup, dict)
    return startup


def test_cli_once_json_graph_capture_oom() -> None:
    (log,) = REAL_LOGS.glob("30-*.log")
    startup = _once_json(log)
    assert startup["failure"] == (
        "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 448.00 MiB. "
        "GPU 7 has a total capacity of 95.00"
    )
    assert startup["failure_kind"] == "out_of_memory"
    assert startup["failed_phase"] == "cuda graph"
    assert startup["oom"] == {"tried_gib": 0.4375, "free_gib": None, "total_gib": None}
    assert "--cuda-graph-max-bs" in str(startup["next_step"])


def test_cli_once_json_negative_profiled_capacity() -> None:
    (log,) = REAL_LOGS.glob("33-*.log")
    startup = _once_json(log)
    assert startup["state"] == "failed"
    assert startup["failure_kind"] == "not_enough_memory"
    assert startup["failed_phase"] == "memory pool"
    assert startup["oom"] is None
    assert startup["minimum_viable_mfs"] == pytest.approx(0.8846)
    assert str(startup["failure"]).startswith(
        "max_total_tokens=131072 is larger than the profiled value -561981"
    )


def test_a_failed_start_has_no_free_after_startup_insight() -> None:
    """Words follow the evidence: the what-if about memory free after startup needs a startup."""
    finished = [
        *SERVING[:7],
        "[2026-02-27 09:06:12 TP0] max_total_num_tokens=20000, chunked_prefill_size=8192, "
        "max_prefill_tokens=16384, max_running_requests=48, context_len=8192, available_gpu_mem=2.34 GB",
    ]
    ready = _analysis([*finished, SERVING[7]])
    assert any(line.startswith("free after startup is ") for line in ready.insights)
    failed = _analysis(
        [
            *finished,
            "[2026-02-27 09:08:10] Initialization failed. warmup error: Traceback (most recent call last):",
            "AssertionError: <Response [500]>",
        ]
    )
    assert failed.insights[0].startswith("startup failed in warmup: Initialization failed.")
    assert not any("free after startup" in line for line in failed.insights)


# --- on screen ---------------------------------------------------------------------------------


async def test_the_cause_and_phase_on_screen() -> None:
    """Excerpt 34 in the app: the header names the kind and the phase, the events panel the
    failure line's cause literally and the next step for that phase."""
    from tests.support.tui_support import log_snapshot, make_app, screen_text, until

    (log,) = REAL_LOGS.glob("34-*.log")
    app = make_app(log_snapshot(log), demo=False, label=log.name)
    async with app.run_test(size=(220, 50)) as pilot:
        await until(pilot, "the failure on screen", lambda: "NPU out of memory" in screen_text(app))
        text = screen_text(app)
        assert "failed: out of memory in memory pool" in text.splitlines()[0], text
        assert "RuntimeError: NPU out of memory. Tried to allocate 98.71 GiB (NPU 0;" in text
        assert "→ The KV cache did not fit: lower --mem-fraction-static" in text


def test_interleaved_reports_the_start_takes_the_first_known_cause() -> None:
    """Two ranks' records written into each other: TP0's traceback is cut by TP1's failure
    line; the start's failure is the first one whose cause is known, each rank keeps its own."""
    lines = [
        *LOADED[:2],
        "[2026-02-27 09:05:20 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        TRACE,
        "[2026-02-27 09:05:20 TP1] Scheduler hit an exception: Traceback (most recent call last):",
        TRACE,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 93.17 GiB of which 1.00 GiB is free.",
    ]
    report = _analysis(lines)
    startup = to_json(report)["startup"]
    assert isinstance(startup, dict)
    assert str(startup["failure"]).startswith("torch.OutOfMemoryError: CUDA out of memory.")
    assert startup["failure_kind"] == "out_of_memory"
    ranks = {r["rank"]: r["failure"] for r in to_json(report)["ranks"]}  # type: ignore[index, union-attr]
    assert ranks["TP0"] == "Scheduler hit an exception: Traceback (most recent call last):"
    assert str(ranks["TP1"]).startswith("torch.OutOfMemoryError")


def test_crash_while_serving_excerpts() -> None:
    """37: batch lines of real traffic then the worker's exception (cause cut off); 38: the
    scheduler's event loop raised a kernel fault. Both are crashes while serving."""
    cut = _analysis(_excerpt("37"))
    assert cut.next_step is not None
    assert "does not name the cause" in cut.next_step and "memory" not in cut.next_step
    assert "CRASHED while serving: TpModelWorkerClient hit an exception (the traceback's last" in (
        _plain(cut)
    )
    assert "startup failed" not in _plain(cut).lower()
    fault = _analysis(_excerpt("38"))
    assert fault.next_step is not None
    assert fault.next_step.startswith(
        "The server crashed while serving (RuntimeError: CUDA error: an illegal memory access"
    )
    assert "not for a memory setting" in fault.next_step


def test_a_traceback_saved_with_journalctl_headers() -> None:
    """`journalctl -u sglang > log` puts the journal's header before every line of a record."""
    head = "Dec 01 10:00:03 gpu-host python3[4242]: "
    lines = [
        head + SCHED_FAILED,
        head + '  File "/sgl/srt/model_executor/model_runner.py", line 240, in init_memory_pool',
        head + "    self.token_to_kv_pool = MHATokenToKVPool(",
        head
        + "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of 79.11 GiB of which 18.20 GiB is free.",
    ]
    startup = _startup_json(lines)
    assert startup["failure"] == lines[-1][len(head) :]
    assert startup["failed_phase"] == "memory pool"
    assert startup["oom"] == {"tried_gib": 20.0, "free_gib": 18.2, "total_gib": 79.11}
