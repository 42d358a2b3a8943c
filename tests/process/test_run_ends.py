"""How a run ends, in SGLang's, Python's, the shell's and the log shippers' own words: crashes
without a traceback, exits with only the interpreter's words, a shipper's header on every line,
a launch that fails before any rank, the failing rank's own phase, ranks counted from any line.
Each goes through the real parser, tracker and JSON report.
"""

from __future__ import annotations

import pytest

from kvtop.model.analysis import analyse
from kvtop.report.json_report import to_json
from kvtop.sglang.story import fold_lines
from tests.support.paths import STORY_LOG

STORY = STORY_LOG.read_text().splitlines()
# The story up to its first `Load weight end`: every rank is loading its weights.
LOADING = STORY[: next(i for i, line in enumerate(STORY) if "Load weight end" in line)]


def startup_json(lines: list[str]) -> dict[str, object]:
    data = to_json(analyse(fold_lines(lines), "test.log"))["startup"]
    assert isinstance(data, dict)
    return data


# -- a crash without a traceback ---------------------------------------------------------------
CRASHES = {
    "0.5.10+ watchdog, abort": [
        "Fatal Python error: Aborted",
        "",
        "Thread 0x00007f2a5dfff640 (most recent call first):",
        '  File "/usr/lib/python3.10/threading.py", line 324 in wait',
        "[2026-02-27 09:10:02] Subprocess scheduler_0 (pid=41822) crashed with exit code -6. "
        "Triggering SIGQUIT for cleanup...",
        "[2026-02-27 09:10:02] SIGQUIT received. signum=None, frame=None. It usually means one "
        "child failed.",
    ],
    "0.5.10+ watchdog, segfault": [
        "[2026-02-27 09:10:02] Subprocess detokenizer (pid=41830) crashed with exit code -11. "
        "Triggering SIGQUIT for cleanup...",
    ],
    "0.4.6 SIGCHLD": [
        "[2026-02-27 09:10:02] Child process unexpectedly failed with an exit code 9. pid=52910",
    ],
    "SIGQUIT handler alone": [
        "[2026-02-27 09:10:02] SIGQUIT received. signum=None, frame=None. It usually means one "
        "child failed.",
    ],
    "0.5.8+ scheduler watchdog": [
        "[2026-02-27 09:10:02 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, "
        "self.soft=False)",
    ],
    "0.4.6 watchdog": ["[2026-02-27 09:10:02 TP0] Watchdog timeout (self.watchdog_timeout=300)"],
    "NCCL watchdog": [
        "[rank3]:[E227 09:10:02.123 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=88, OpType=ALLREDUCE) ran for 600000 milliseconds",
    ],
    "node 1's terminated": [
        "[2026-02-27 09:10:02] Scheduler or DataParallelController 41822 terminated with -9",
    ],
    "ROCm fault": [
        "Memory access fault by GPU node-8 (Agent handle: 0x5617e0) on address 0x7f. Reason: "
        "Unknown.",
    ],
}
KIND = {"0.5.8+ scheduler watchdog": "watchdog", "0.4.6 watchdog": "watchdog"}
KIND["NCCL watchdog"] = "watchdog"


@pytest.mark.parametrize("name", list(CRASHES))
def test_a_crash_without_a_traceback_ends_a_serving_run(name: str) -> None:
    startup = startup_json([*STORY, *CRASHES[name]])
    assert startup["state"] == "failed"
    assert startup["failure_kind"] == KIND.get(name, "crash")
    assert startup["failed_phase"] == "serving"


def test_a_crash_during_loading_is_failed_in_load_weights() -> None:
    startup = startup_json([*LOADING, *CRASHES["0.5.10+ watchdog, segfault"]])
    assert startup["state"] == "failed"
    assert startup["failed_phase"] == "load weights"


def test_a_soft_watchdog_and_node_1s_clean_exit_are_no_failure() -> None:
    startup = startup_json(
        [
            *STORY,
            "[2026-02-27 09:10:02 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, "
            "self.soft=True)",
            "[2026-02-27 09:10:02] Scheduler or DataParallelController 41822 terminated with 0",
        ]
    )
    assert startup["state"] == "ready" and startup["failure"] is None


# -- the interpreter's or the shell's last words ------------------------------------------------
ENDS = {
    "resource_tracker": [
        "/usr/lib/python3.10/multiprocessing/resource_tracker.py:224: UserWarning: "
        "resource_tracker: There appear to be 1 leaked semaphore objects to clean up at shutdown",
        "  warnings.warn('resource_tracker: There appear to be %d '",
    ],
    "Killed": ["Killed"],
    "script's job line": [
        "./launch.sh: line 31:  2467 Killed                  python3 -m sglang.launch_server "
        '--model-path "$MODEL_PATH" --port 30000'
    ],
    "container": ["sglang-1 exited with code 137"],
}


@pytest.mark.parametrize("name", list(ENDS))
def test_an_exit_after_ready_is_a_stop(name: str) -> None:
    startup = startup_json([*STORY, *ENDS[name]])
    assert startup["state"] == "stopped"
    assert startup["failure"] is None


@pytest.mark.parametrize("name", list(ENDS))
def test_an_exit_during_startup_fails_in_its_phase(name: str) -> None:
    startup = startup_json([*LOADING, *ENDS[name]])
    assert startup["state"] == "failed"
    assert startup["failure_kind"] == "exited"
    assert startup["failed_phase"] == "load weights"
    assert startup["failure"] == "exited during load weights; the log does not say why"
    assert startup["note"] == "the log does not say why it exited"


def test_killed_of_another_program_is_not_an_exit() -> None:
    startup = startup_json([*STORY, "Killed actor 4f2 (ray::Worker) with signal 9"])
    assert startup["state"] == "ready"


# -- a shipper's header on every line -----------------------------------------------------------
FAILING = [
    "[2026-01-05 10:00:01 TP0] Load weight begin. avail mem=78.50 GB",
    "[2026-01-05 10:00:09 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2417, in run_scheduler_process',
    "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, pp_rank, dp_rank)",
    '  File "/sgl/python/sglang/srt/model_loader/loader.py", line 381, in load_model',
    "    model.load_weights(self._get_all_weights(model_config, model))",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total "
    "capacity of 79.10 GiB of which 512.00 MiB is free.",
    "",
    "[2026-01-05 10:00:09] Received sigquit from a child process. It usually means the child "
    "failed.",
]
SHIPPERS = {
    "epoch tab time": lambda i: f"176760720{i % 10}.{i:03d}\t2026-01-05T10:00:0{i % 10}.000Z\t",
    "CRI": lambda i: f"2026-01-05T10:00:0{i % 10}.123456789Z stderr F ",
    "docker -t": lambda i: f"2026-01-05T10:00:0{i % 10}.123456789Z ",
    "loki": lambda i: f'2026-01-05T10:00:0{i % 10}Z {{app="sglang", pod="sglang-0"}} ',
    "compose": lambda i: "sglang-1  | ",
    "kubectl --prefix": lambda i: "[pod/sglang-0/server] ",
    "journal short": lambda i: f"Jan 05 10:00:0{i % 10} gpu-01 python3[4242]: ",
}


@pytest.mark.parametrize("name", list(SHIPPERS))
def test_a_shippers_header_is_stripped_from_every_line(name: str) -> None:
    lines = [SHIPPERS[name](i) + line for i, line in enumerate(FAILING)]
    startup = startup_json(lines)
    assert startup["failure_kind"] == "out_of_memory"
    assert str(startup["failure"]).startswith("torch.OutOfMemoryError: CUDA out of memory.")
    assert startup["failed_phase"] == "load weights"
    assert startup["oom"] == {"tried_gib": 1.0, "free_gib": 0.5, "total_gib": 79.1}


# -- a failure before any rank started ----------------------------------------------------------
def test_a_server_args_error_fails_in_launch() -> None:
    startup = startup_json(
        [
            "Traceback (most recent call last):",
            '  File "<frozen runpy>", line 198, in _run_module_as_main',
            '  File "/sgl/python/sglang/launch_server.py", line 11, in <module>',
            "    server_args = prepare_server_args(sys.argv[1:])",
            '  File "/sgl/python/sglang/srt/server_args.py", line 3012, in prepare_server_args',
            '  File "/sgl/python/sglang/srt/server_args.py", line 611, in __post_init__',
            "    self._handle_page_size()",
            "ValueError: page_size must be a power of 2",
        ]
    )
    assert startup["state"] == "failed"
    assert startup["failed_phase"] == "launch"


def test_an_import_error_fails_in_launch() -> None:
    startup = startup_json(
        [
            "Traceback (most recent call last):",
            '  File "<frozen runpy>", line 198, in _run_module_as_main',
            '  File "/sgl/python/sglang/launch_server.py", line 6, in <module>',
            "    from sglang.srt.entrypoints.http_server import launch_server",
            "ModuleNotFoundError: No module named 'sgl_kernel'",
        ]
    )
    assert startup["failed_phase"] == "launch"


# -- the failing rank's own phase ---------------------------------------------------------------
def test_the_phase_comes_from_the_failing_ranks_frames() -> None:
    """TP1 loaded its weights; TP0 is still loading. TP1's traceback names the attention
    backend: its phase is that, not TP0's load weights."""
    startup = startup_json(
        [
            "[2026-01-05 10:00:01 TP0] Load weight begin. avail mem=78.50 GB",
            "[2026-01-05 10:00:01 TP1] Load weight begin. avail mem=78.50 GB",
            "[2026-01-05 10:00:30 TP1] Load weight end. type=Qwen3ForCausalLM, dtype=torch."
            "bfloat16, avail mem=62.10 GB, mem usage=16.40 GB.",
            "[2026-01-05 10:00:31 TP1] Scheduler hit an exception: Traceback (most recent call "
            "last):",
            '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2417, in '
            "run_scheduler_process",
            '  File "/sgl/python/sglang/srt/model_executor/model_runner.py", line 412, in '
            "initialize",
            '  File "/sgl/python/sglang/srt/model_executor/model_runner.py", line 1822, in '
            "init_attention_backend",
            "RuntimeError: FlashAttention v3 needs compute capability 9.0",
        ]
    )
    assert startup["failed_phase"] == "attention backend"


def test_a_rank_that_logged_nothing_before_does_not_take_another_ranks_phase() -> None:
    startup = startup_json(
        [
            "[2026-01-05 10:00:01 TP0] Load weight begin. avail mem=78.50 GB",
            "[2026-01-05 10:00:31 TP5] Scheduler hit an exception: Traceback (most recent call "
            "last):",
            '  File "/sgl/python/sglang/srt/model_executor/model_runner.py", line 1900, in '
            "init_cuda_graphs",
            "RuntimeError: CUDA error: an illegal memory access was encountered",
        ]
    )
    assert startup["failed_phase"] == "cuda graph"


# -- ranks from any rank-tagged line ------------------------------------------------------------
def test_ranks_counted_from_any_rank_line() -> None:
    """PP4 x TP2: three ranks log startup steps, the other five only a warning."""
    steps = [
        f"[2026-01-05 10:00:01 PP{pp} TP{tp}] Load weight begin. avail mem=78.50 GB"
        for pp, tp in ((0, 0), (1, 0), (2, 1))
    ]
    warnings = [
        f"[2026-01-05 10:00:02 PP{pp} TP{tp}] Custom allreduce is disabled because this process "
        "group spans across nodes."
        for pp, tp in ((0, 1), (1, 1), (2, 0), (3, 0), (3, 1))
    ]
    tracker = fold_lines([*steps, *warnings])
    assert len(tracker.current.ranks) == 8
    data = to_json(analyse(tracker, "test.log"))
    assert len(data["ranks"]) == 8  # type: ignore[arg-type]
