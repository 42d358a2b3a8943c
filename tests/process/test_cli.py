"""The installed command, run for real: `python -m kvtop` and the `kvtop` console script.

Every test starts a subprocess with stdout and stderr as pipes (never a terminal), so these are
exactly what a shell pipeline or a CI job sees.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.ports import refused_url

ROOT = Path(__file__).resolve().parents[2]
STORY_NAME = "kimi-k25-tp8-eagle3-hicache-0.5.8.log"
KVTOP_SCRIPT = Path(sys.executable).with_name("kvtop")
ANSI = re.compile(r"\x1b[\[\]]")
TIMEOUT = 60


def story_log() -> Path:
    """The 8-rank Kimi story log: shipped in tui/kvtop/data (older trees: tests/fixtures)."""
    for place in (ROOT / "tui" / "kvtop" / "data", ROOT / "tests" / "fixtures"):
        if (place / STORY_NAME).is_file():
            return place / STORY_NAME
    pytest.fail(f"{STORY_NAME} is in neither tui/kvtop/data nor tests/fixtures")


ENTRY_POINTS = {
    "python -m kvtop": [sys.executable, "-m", "kvtop"],
    "kvtop": [str(KVTOP_SCRIPT)],
}


@pytest.fixture(params=list(ENTRY_POINTS), ids=list(ENTRY_POINTS))
def command(request: pytest.FixtureRequest) -> list[str]:
    if request.param == "kvtop" and not KVTOP_SCRIPT.exists():
        pytest.skip(f"no kvtop console script next to {sys.executable}")
    return ENTRY_POINTS[request.param]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in {"FORCE_COLOR", "CLICOLOR_FORCE"}}
    env["TERM"] = "xterm-256color"  # a colour terminal type: output must still be plain in a pipe
    env["PYTHONIOENCODING"] = "utf-8"
    return env


def kvtop(
    *args: str | os.PathLike[str],
    command: list[str] | None = None,
    stdin: bytes | None = None,
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [*(command or ENTRY_POINTS["python -m kvtop"]), *map(str, args)],
        input=stdin,
        capture_output=True,
        timeout=TIMEOUT,
        env=_env(),
        cwd=ROOT,
    )
    return subprocess.CompletedProcess(
        result.args,
        result.returncode,
        result.stdout.decode("utf-8"),
        result.stderr.decode("utf-8", errors="replace"),
    )


def _no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr, result.stderr
    assert "Traceback" not in result.stdout
    assert "Exception ignored" not in result.stderr, result.stderr


def _json(result: subprocess.CompletedProcess[str], code: int = 0) -> dict[str, object]:
    assert result.returncode == code, result.stderr
    _no_traceback(result)
    data = json.loads(result.stdout)
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def no_server() -> Iterator[list[str]]:
    """`--url` where nothing answers. Without a URL of its own a run scrapes the server its log
    names (the story log's server_args: port 30000), else SGLang's default port: whatever
    listens there on this machine would change the report. One port for the whole module, so
    that two runs' reports compare equal."""
    with refused_url() as url:
        yield ["--url", url]


@pytest.fixture(scope="module")
def story_json(no_server: list[str]) -> dict[str, object]:
    return _json(kvtop("--once", "--json", "--log-file", story_log(), *no_server))


# --------------------------------------------------------------------------- JSON report

RANK_MODEL_KEYS = {
    "init_dist_gib",
    "avail_before_load_gib",
    "avail_after_load_gib",
    "weights_gib",
    "kv_tokens",
    "k_gib",
    "v_gib",
    "kv_gib",
    "avail_after_pool_gib",
    "avail_before_graph_gib",
    "avail_after_graph_gib",
    "graph_gib",
    "graph_s",
}


def test_json_report_from_both_entry_points(command: list[str], no_server: list[str]) -> None:
    data = _json(kvtop("--once", "--json", "--log-file", story_log(), *no_server, command=command))
    assert data["schema"] == "kvtop/1"
    assert data["summary"]["max_total_num_tokens"] == 159277  # type: ignore[index]


def test_json_schema_and_startup(story_json: dict[str, object]) -> None:
    assert story_json["schema"] == "kvtop/1"
    startup = story_json["startup"]
    assert isinstance(startup, dict)
    assert {"state", "failure", "restarts"} <= startup.keys()
    assert startup["state"] == "ready"
    assert startup["failure"] is None
    assert startup["restarts"] == 0


def test_json_server_args(story_json: dict[str, object]) -> None:
    args = story_json["server_args"]
    assert isinstance(args, dict)
    assert args["mem_fraction_static"] == 0.88
    assert args["tp_size"] == 8


def test_json_summary(story_json: dict[str, object]) -> None:
    summary = story_json["summary"]
    assert isinstance(summary, dict)
    assert summary["max_total_num_tokens"] == 159277
    for key in (
        "chunked_prefill_size",
        "max_prefill_tokens",
        "max_running_requests",
        "context_len",
    ):
        assert isinstance(summary[key], int), key
        assert summary[key] > 0
    assert summary["available_gpu_mem_gib"] == pytest.approx(7.40)


def test_json_ranks(story_json: dict[str, object]) -> None:
    ranks = story_json["ranks"]
    assert isinstance(ranks, list)
    assert [r["rank"] for r in ranks] == [f"TP{i}" for i in range(8)]
    for i, rank in enumerate(ranks):
        assert rank["tp"] == i
        assert type(rank["tp"]) is int
        assert rank["dp"] is None
        for model in ("target", "draft"):
            assert isinstance(rank[model], dict), (rank["rank"], model)
            assert rank[model].keys() >= RANK_MODEL_KEYS, (rank["rank"], model)
        assert rank["host_kv_gb"] == pytest.approx(44.77)
    tp0 = ranks[0]
    assert tp0["target"]["kv_tokens"] == 159277
    assert tp0["target"]["kv_gib"] == pytest.approx(10.42)
    assert tp0["target"]["avail_after_pool_gib"] == pytest.approx(11.18)
    assert tp0["target"]["weights_gib"] == pytest.approx(71.57)
    assert tp0["draft"]["weights_gib"] == pytest.approx(0.95)


def test_json_sizing(story_json: dict[str, object]) -> None:
    sizing = story_json["sizing"]
    assert isinstance(sizing, list)
    assert len(sizing) == 8
    assert [s["rank"] for s in sizing] == [f"TP{i}" for i in range(8)]
    for entry in sizing:
        assert {
            "rank",
            "reserve_gib",
            "rest_gib",
            "cell_size_bytes",
            "cell_size_source",
            "predicted_tokens",
        } <= entry.keys()
        assert entry["cell_size_source"] in {"config", "inferred"}
        assert isinstance(entry["predicted_tokens"], int)
        assert entry["reserve_gib"] == pytest.approx(11.18, abs=0.01)
    assert sizing[0]["predicted_tokens"] == pytest.approx(159277, abs=200)


def test_json_has_no_nan_or_infinity(story_json: dict[str, object]) -> None:
    json.dumps(story_json, allow_nan=False)


def test_json_from_stdin_matches_the_file(
    command: list[str], story_json: dict[str, object], no_server: list[str]
) -> None:
    piped = _json(
        kvtop(
            "--once",
            "--json",
            "--log-file",
            "-",
            *no_server,
            command=command,
            stdin=story_log().read_bytes(),
        )
    )
    assert piped["source"]["log"] == "stdin"  # type: ignore[index]
    file_source = dict(story_json["source"])  # type: ignore[arg-type]
    piped_source = dict(piped["source"])  # type: ignore[arg-type]
    file_source.pop("log")
    piped_source.pop("log")
    assert piped_source == file_source
    # host RAM is read live at each run, and each source's age (seconds since its last good
    # reading) is a measurement of the run: everything else must be identical
    assert _ageless(piped.pop("sources")) == _ageless(story_json["sources"])
    # The verdict and the timeline carry kvtop's clock (since when, at what time): the same
    # judgement, at another moment.
    for data in (piped, story_json):
        for alert in data["verdict"]["alerts"]:  # type: ignore[index]
            alert["since"] = "<time>"
        for seen in data["timeline"]:  # type: ignore[attr-defined]
            seen["time"] = "<time>"
    assert {k: v for k, v in piped.items() if k not in ("source", "host")} == {
        k: v for k, v in story_json.items() if k not in ("source", "host", "sources")
    }


def _ageless(sources: object) -> list[dict[str, object]]:
    """The sources without their `age_s` (which every source has, a number or null)."""
    assert isinstance(sources, list)
    assert all("age_s" in s for s in sources)
    return [{k: v for k, v in s.items() if k != "age_s"} for s in sources]


# --------------------------------------------------------------------------- text report


def test_text_report(command: list[str], no_server: list[str]) -> None:
    result = kvtop("--once", "--log-file", story_log(), *no_server, command=command)
    assert result.returncode == 0, result.stderr
    _no_traceback(result)
    assert "159,277" in result.stdout
    assert "11.18" in result.stdout
    assert "reserve" in result.stdout
    assert not ANSI.search(result.stdout), "ANSI escape codes in piped output"
    assert result.stderr == ""


def test_rich_markup_in_the_log_is_shown_literally(tmp_path: Path, no_server: list[str]) -> None:
    line = "[2026-02-27 09:06:31] Scheduler hit an exception: [bold]boom[/] [red]x"
    log = tmp_path / "markup.log"
    log.write_text(story_log().read_text(encoding="utf-8") + line + "\n", encoding="utf-8")
    text = kvtop("--once", "--log-file", log, *no_server)
    assert text.returncode == 0, text.stderr
    _no_traceback(text)
    assert "[bold]boom[/]" in text.stdout
    assert "[red]x" in text.stdout
    data = _json(kvtop("--once", "--json", "--log-file", log, *no_server))
    failure = data["startup"]["failure"]  # type: ignore[index]
    assert isinstance(failure, str)
    assert "[bold]boom[/] [red]x" in failure


def test_markup_in_the_file_name_is_shown_literally(tmp_path: Path, no_server: list[str]) -> None:
    log = tmp_path / "[bold]x[red].log"
    log.write_bytes(story_log().read_bytes())
    result = kvtop("--once", "--log-file", log, *no_server)
    assert result.returncode == 0, result.stderr
    assert "[bold]x[red].log" in result.stdout


# --------------------------------------------------------------------------- exit codes


def _one_line_error(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, (result.returncode, result.stderr)
    _no_traceback(result)
    message = result.stderr.strip()
    assert message, "no message on stderr"
    assert result.stdout == ""
    return message


def test_missing_file(command: list[str], tmp_path: Path) -> None:
    missing = tmp_path / "no-such.log"
    message = _one_line_error(kvtop("--once", "--log-file", missing, command=command), 1)
    assert "\n" not in message
    assert message.startswith("kvtop:")
    assert str(missing) in message


def test_missing_file_with_json(tmp_path: Path) -> None:
    message = _one_line_error(kvtop("--once", "--json", "--log-file", tmp_path / "nope"), 1)
    assert "\n" not in message


def test_directory(tmp_path: Path) -> None:
    message = _one_line_error(kvtop("--once", "--log-file", tmp_path), 1)
    assert "\n" not in message
    assert "directory" in message


def test_error_messages_only_name_real_options(tmp_path: Path) -> None:
    help_text = kvtop("--help").stdout
    message = _one_line_error(kvtop("--once", "--log-file", tmp_path), 1)
    for flag in re.findall(r"--[a-z][a-z-]+", message):
        assert flag in help_text, f"{flag} is suggested but does not exist"


# As root (how CI runs) the command runs as `nobody`: root reads any file. The interpreter and
# the venv live under /root, which nobody may not enter, so the child first runs the real entry
# point as root on a readable copy (importing all it needs, output discarded), then drops its
# rights and runs it on the file under test.
AS_NOBODY = """
import contextlib, io, os, sys
from kvtop.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    assert main(["--once", "--no-gpus", "--no-metrics", "--log-file", sys.argv[1]]) == 0
os.setgroups([]); os.setgid(65534); os.setuid(65534)
raise SystemExit(main(sys.argv[2:]))
"""


def test_unreadable_file(tmp_path_factory: pytest.TempPathFactory) -> None:
    # A folder anyone may enter (pytest's own temporary root is root's alone), a file no one
    # but its owner may read.
    folder = tmp_path_factory.mktemp("unreadable")
    folder.chmod(0o755)
    for parent in folder.parents:
        if parent == Path(tempfile.gettempdir()):
            break
        parent.chmod(parent.stat().st_mode | 0o711)
    log = folder / "secret.log"
    log.write_bytes(story_log().read_bytes())
    log.chmod(0)
    command = [sys.executable, "-c", AS_NOBODY, str(story_log())] if os.geteuid() == 0 else None
    try:
        message = _one_line_error(kvtop("--once", "--log-file", log, command=command), 1)
    finally:
        log.chmod(0o600)
    assert "\n" not in message
    assert "permission" in message
    assert str(log) in message  # the file it could not read, named


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["--json"], 2, "--once"),
        (["--json", "--log-file", "x.log"], 2, "--once"),
        (["--once"], 2, "--log-file"),
        (["--once", "--json"], 2, "--log-file"),
        (["--once", "--demo", "--what-if", "1.5"], 2, "--what-if"),
        (["--once", "--demo", "--what-if", "0"], 2, "--what-if"),
        (["--once", "--demo", "--what-if", "-0.5"], 2, "--what-if"),
        (["--once", "--demo", "--what-if", "nan"], 2, "--what-if"),
        (["--once", "--demo", "--what-if", "lots"], 2, "--what-if"),
        (["--once", "--demo", "--request-len", "0"], 2, "--request-len"),
        (["--once", "--demo", "--log-file", "x.log"], 2, "--demo"),
        (["--no-such-flag"], 2, "--no-such-flag"),
        (["--once", "--demo", "extra"], 2, "extra"),
        ([], 2, "--once"),  # the live view needs a terminal; these pipes are not one
        (["--demo"], 2, "needs a terminal"),
        (["--demo", "--demo-speed", "0"], 2, "--demo-speed"),
        (["--demo", "--demo-speed", "nan"], 2, "--demo-speed"),
        (["--log-file", "-"], 2, "stdin"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else str(v),
)
def test_usage_errors(args: list[str], code: int, needle: str) -> None:
    result = kvtop(*args)
    message = _one_line_error(result, code)
    assert needle in message
    assert "usage: kvtop" in message


@pytest.mark.slow  # sets up the environment the way a fresh clone does
def test_demo_script_without_a_terminal_prints_the_report() -> None:
    """The README's first command in CI or a pipe: the one-shot report, not a broken TUI."""
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "demo.sh")],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=300,
        env=_env(),
    )
    assert result.returncode == 0, result.stderr
    assert "no terminal here" in result.stderr
    assert "159,277" in result.stdout
    # What the scripts say goes to stderr (on a prepared env only the demo's line; a set-up
    # step, if one was due, says "kvtop setup"); the report alone goes to stdout.
    said = result.stderr.splitlines()
    assert said[-1].startswith("kvtop demo: no terminal here"), said
    assert all(line.startswith(("kvtop setup", "kvtop demo")) for line in said), said
    assert "kvtop setup" not in result.stdout
    assert "kvtop demo" not in result.stdout
    assert "159,277" not in result.stderr


def test_no_arguments(command: list[str]) -> None:
    result = kvtop(command=command)
    message = _one_line_error(result, 2)
    assert "--once" in message.splitlines()[-1]


def test_help(command: list[str]) -> None:
    result = kvtop("--help", command=command)
    assert result.returncode == 0
    _no_traceback(result)
    assert "--once" in result.stdout
    assert "--log-file" in result.stdout


def test_version() -> None:
    result = kvtop("--version")
    assert result.returncode == 0
    assert result.stdout.startswith("kvtop ")


# --------------------------------------------------------------------------- demo


def test_demo(command: list[str]) -> None:
    result = kvtop("--once", "--demo", command=command)
    assert result.returncode == 0, result.stderr
    _no_traceback(result)
    assert "Kimi" in result.stdout
    assert "159,277" in result.stdout
    assert not ANSI.search(result.stdout)


def _without_clock(value: object) -> object:
    """The demo stamps the replayed lines with today's clock: compare everything else."""
    if isinstance(value, dict):
        return {k: _without_clock(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_clock(v) for v in value]
    if isinstance(value, str):
        return re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "<time>", value)
    return value


def test_demo_json(story_json: dict[str, object]) -> None:
    data = _json(kvtop("--once", "--json", "--demo"))
    assert "Kimi" in json.dumps(data)
    # The startup analysis is the story file's, with the clock moved to now; the live parts
    # are the demo's simulated GPUs, host and /metrics one minute after the server got ready.
    live = {"source", "sources", "host", "gpus", "metrics", "notes", "rank_mapping", "runtime"}
    live |= {"server"}  # the demo scrapes no server
    live |= {"verdict", "timeline"}  # the judgement of those live parts
    live |= {"processes"}  # the simulated schedulers on the simulated GPUs
    live |= {"binding_limit"}  # judged from the simulated /metrics' load
    live |= {"growth"}  # the simulated GPUs' and schedulers' memory over the session
    assert _without_clock({k: v for k, v in data.items() if k not in live}) == _without_clock(
        {k: v for k, v in story_json.items() if k not in live}
    )
    gpus = data["gpus"]
    assert len(gpus) == 8  # type: ignore[arg-type]
    assert [g["ranks"] for g in gpus] == [[f"TP{i}"] for i in range(8)]  # type: ignore[index]
    assert data["rank_mapping"] == "process"
    processes = data["processes"]
    assert [(p["gpu"], p["rank"], p["foreign"], p["readable"]) for p in processes] == [  # type: ignore[index, union-attr]
        (i, f"TP{i}", False, True) for i in range(8)
    ]
    assert data["metrics"]["max_total_num_tokens"] == 159277  # type: ignore[index]
    assert [s["name"] for s in data["sources"]] == ["log", "nvml", "metrics"]  # type: ignore[index]
    assert all(s["state"] == "ok" for s in data["sources"])  # type: ignore[index]
    assert "demo" in json.dumps(data["sources"])
    assert data["verdict"]["level"] == "ok"  # type: ignore[index]  # a healthy server


# --------------------------------------------------------------------------- non-SGLang input


def _binary_junk() -> bytes:
    return random.Random(20260227).randbytes(200 * 1024)


@pytest.mark.parametrize("content", [b"", _binary_junk()], ids=["empty", "binary"])
def test_input_without_sglang_lines(tmp_path: Path, content: bytes, no_server: list[str]) -> None:
    log = tmp_path / "junk.log"
    log.write_bytes(content)
    result = kvtop("--once", "--log-file", log, *no_server)
    # An empty log gives no line to judge: the report says UNKNOWN and the exit status 1 (the
    # input could not be read); junk is lines read, judged OK with nothing of SGLang in them.
    expected = 1 if not content else 0
    assert result.returncode == expected, result.stderr
    _no_traceback(result)
    assert "No SGLang startup lines found" in result.stdout
    data = _json(kvtop("--once", "--json", "--log-file", log, *no_server), expected)
    assert data["ranks"] == []
    assert data["startup"]["failure"] is None  # type: ignore[index]
    json.dumps(data, allow_nan=False)


def test_binary_junk_on_stdin(no_server: list[str]) -> None:
    result = kvtop("--once", "--log-file", "-", *no_server, stdin=_binary_junk())
    assert result.returncode == 0, result.stderr
    _no_traceback(result)
    assert "No SGLang startup lines found" in result.stdout


def test_empty_stdin(no_server: list[str]) -> None:
    data = _json(kvtop("--once", "--json", "--log-file", "-", *no_server, stdin=b""), 1)
    assert data["ranks"] == []
    assert data["verdict"]["level"] == "unknown"  # type: ignore[index]


def test_hostile_kv_line_does_not_crash_the_command(no_server: list[str]) -> None:
    result = kvtop(
        "--once",
        "--log-file",
        "-",
        *no_server,
        stdin=b"KV Cache is allocated. #tokens: -2, KV size: 1.0 GB\n",
    )
    assert result.returncode == 0
    _no_traceback(result)


@pytest.mark.parametrize("digits", [306, 400])
def test_huge_request_len_is_refused_or_answered(digits: int) -> None:
    result = kvtop("--once", "--demo", "--request-len", "1" + "0" * digits)
    _no_traceback(result)
    assert result.returncode in (0, 2)


# --------------------------------------------------------------------------- closed pipe


def _closed_pipe(args: list[str], read_first_line: bool) -> tuple[int, str, bytes]:
    proc = subprocess.Popen(
        [*ENTRY_POINTS["python -m kvtop"], *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        cwd=ROOT,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline() if read_first_line else b""
    proc.stdout.close()  # like `| head -1` exiting
    try:
        err = proc.stderr.read().decode("utf-8", errors="replace")
        code = proc.wait(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()
    return code, err, first


@pytest.mark.parametrize("read_first_line", [True, False], ids=["head-1", "closed-at-once"])
@pytest.mark.parametrize("json_output", [False, True], ids=["text", "json"])
def test_closing_the_pipe_early_prints_no_traceback(
    json_output: bool, read_first_line: bool, no_server: list[str]
) -> None:
    json_flag = ["--json"] if json_output else []
    args = ["--once", *json_flag, "--log-file", str(story_log()), *no_server]
    code, err, first = _closed_pipe(args, read_first_line)
    assert "Traceback" not in err, err
    assert "Exception ignored" not in err, err
    assert "BrokenPipeError" not in err, err
    assert code in (0, 1), (code, err)
    if read_first_line:
        assert first.strip(), "the first line came out empty"


def test_closed_pipe_json_exits_zero(no_server: list[str]) -> None:
    code, _, _ = _closed_pipe(
        ["--once", "--json", "--log-file", str(story_log()), *no_server], False
    )
    assert code == 0


def test_closed_pipe_text_exits_zero(no_server: list[str]) -> None:
    code, _, _ = _closed_pipe(["--once", "--log-file", str(story_log()), *no_server], False)
    assert code == 0


# --------------------------------------------------------------------------- what-if


def test_what_if_and_request_len(command: list[str], no_server: list[str]) -> None:
    data = _json(
        kvtop(
            "--once",
            "--json",
            "--log-file",
            story_log(),
            *no_server,
            "--what-if",
            "0.9",
            "--request-len",
            "32768",
            command=command,
        )
    )
    formula = data["formula"]
    assert isinstance(formula, dict)
    assert 0.9 in [w["mem_fraction_static"] for w in formula["what_if"]]
    reverse = json.dumps(formula["reverse"], ensure_ascii=False)
    assert "32,768" in reverse or "32768" in reverse


def test_what_if_adds_a_value_not_in_the_defaults(no_server: list[str]) -> None:
    plain = _json(kvtop("--once", "--json", "--log-file", story_log(), *no_server))
    asked = _json(
        kvtop("--once", "--json", "--log-file", story_log(), *no_server, "--what-if", "0.95")
    )
    before = [w["mem_fraction_static"] for w in plain["formula"]["what_if"]]  # type: ignore[index]
    after = [w["mem_fraction_static"] for w in asked["formula"]["what_if"]]  # type: ignore[index]
    assert 0.95 not in before
    assert 0.95 in after


def test_what_if_is_repeatable(no_server: list[str]) -> None:
    data = _json(
        kvtop(
            "--once",
            "--json",
            "--log-file",
            story_log(),
            *no_server,
            "--what-if",
            "0.5",
            "--what-if",
            "0.95",
        )
    )
    values = [w["mem_fraction_static"] for w in data["formula"]["what_if"]]  # type: ignore[index]
    assert 0.5 in values
    assert 0.95 in values


def test_request_len_in_the_text_report(no_server: list[str]) -> None:
    result = kvtop("--once", "--log-file", story_log(), *no_server, "--request-len", "32768")
    assert result.returncode == 0, result.stderr
    assert "32,768" in result.stdout
