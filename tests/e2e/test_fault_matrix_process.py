"""The fault matrix's rows that need a process of their own (same shape as test_fault_matrix.py).

- the NVML library missing, then installed: the real `kvtop` in a tmux pane, its dynamic loader
  looking in an empty directory that the library is copied into mid-run;
- the journal without permission, then granted: the real app under Pilot in a child that has
  dropped to `nobody` (root reads every file), the files made readable mid-run;
- stdin closed: `kvtop --once --log-file -` started with descriptor 0 closed;
- the terminal: resized to 40×12 and back and 300 columns wide under Pilot; NO_COLOR, TERM=dumb
  and the terminal going away with the real command in tmux, all on the healthy host's real
  sources.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from kvtop.live.app import KvtopApp
from kvtop.live.screens.help import HelpScreen
from tests.support.fake_nvml import LIB_NAME, STATE_ENV, gcc_path
from tests.support.fault_host import (
    API_KEY,
    FRESH,
    FaultHost,
    once_reports,
    wait_screen,
)
from tests.support.journal_tools import (
    invocation,
    journal_remote_missing,
    sglang_entries,
    write_journal,
)
from tests.support.tmux_tools import (
    SGR,
    Tmux,
    alive,
    descendants,
    foreground_colours,
    is_grey,
)

ROOT = Path(__file__).resolve().parents[2]
TMUX = shutil.which("tmux")
KVTOP = Path(sys.executable).with_name("kvtop")
STORY = (ROOT / "tui/kvtop/data/kimi-k25-tp8-eagle3-hicache-0.5.8.log").read_text().splitlines()
GPU_ROW = re.compile(r"(?m)^\S?\s*\d+\s+TP\d+\s.*?\d+\.\d/\d+\.\d")
GPU_ROW_NO_LOG = re.compile(r"(?m)^\S?\s*\d+\s+—\s.*?\d+\.\d/\d+\.\d")  # no rank known

pytestmark = pytest.mark.skipif(gcc_path() is None, reason="gcc not found: no fake NVML")
needs_tmux = pytest.mark.skipif(
    TMUX is None or not KVTOP.exists(), reason="tmux or the kvtop script is missing"
)


def kvtop_line(
    host: FaultHost, *extra: str, env: dict[str, str] | None = None, lib_dir: Path
) -> str:
    """The pane's command: the real kvtop on the host's sources, its pid and status in files."""
    key_file = host.tmp / "api-key"
    key_file.write_text(API_KEY + "\n")
    settings = {
        "LD_LIBRARY_PATH": str(lib_dir),
        STATE_ENV: str(host.state_path),
        **(env or {}),
    }
    assign = " ".join(f"{k}={shlex.quote(v)}" for k, v in settings.items())
    args = [
        "--log-file", str(host.log), "--url", host.server.url,
        "--api-key-file", str(key_file), "--interval", "0.2", *extra,
    ]  # fmt: skip
    core = f"env -u NO_COLOR -u COLUMNS -u LINES {assign} {shlex.quote(str(KVTOP))} "
    core += " ".join(shlex.quote(a) for a in args)
    pid, status = host.tmp / "pid", host.tmp / "status"
    script = f"echo $$ > {shlex.quote(str(pid))}; {core}; echo $? > {shlex.quote(str(status))}"
    return f"sh -c {shlex.quote(script)}"


def once(host: FaultHost, lib_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**host.command_env(), "LD_LIBRARY_PATH": str(lib_dir)}
    return subprocess.run(
        [str(KVTOP), "--once", "--log-file", str(host.log), "--url", host.server.url, *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


# -- NVML: the library missing, then installed ------------------------------------------------
@needs_tmux
def test_nvml_library_missing_then_installed(host: FaultHost, tmux: Tmux, fake_lib: Path) -> None:
    empty = host.tmp / "no-driver"
    empty.mkdir()
    tmux.new_session("nolib", kvtop_line(host, lib_dir=empty))
    screen = tmux.wait_for(
        "nolib",
        "the library-missing sentence",
        lambda s: "NVML library not found" in flat(s) and "○NVML" in s and "●metrics" in s,
    )
    assert "install the NVIDIA driver" in flat(screen)
    done = once(host, empty)
    assert done.returncode == 0, done.stderr
    assert "NVML library not found (libnvidia-ml.so.1): install the NVIDIA driver" in flat(
        done.stdout
    )
    as_json = once(host, empty, "--json")
    sources = {s["name"]: s for s in json.loads(as_json.stdout)["sources"]}
    assert sources["nvml"]["state"] == "off"

    shutil.copy(fake_lib, empty / LIB_NAME)  # the driver is installed while kvtop runs
    screen = tmux.wait_for(
        "nolib",
        "GPU rows after the library appeared",
        lambda s: "●NVML" in s and len(GPU_ROW.findall(s)) == 8,
    )
    for out in (screen, done.stdout, done.stderr, as_json.stdout):
        assert API_KEY not in out
    tmux.send("nolib", "q")
    deadline = time.monotonic() + 10
    while not (host.tmp / "status").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (host.tmp / "status").read_text().strip() == "0"


# -- journal: no permission, then granted -----------------------------------------------------
AS_NOBODY = textwrap.dedent(
    """\
    import asyncio, json, os, re, select, sys
    from kvtop.live.app import KvtopApp
    from kvtop.session import Options, Session
    from tests.support.tui_support import screen_text, make_app, demo_snapshot
    import systemd.journal, kvtop.sources.journal

    def say(what, text):
        print(json.dumps({"at": what, "screen": text}), flush=True)

    async def until(app, pilot, ok, seconds=20):
        for _ in range(int(seconds / 0.05)):
            await pilot.pause(0.05)
            text = screen_text(app)
            if ok(text):
                return text
        return screen_text(app)

    async def main(directory):
        # Everything imported as root first: the interpreter lives under /root.
        async with make_app(demo_snapshot()).run_test(size=(120, 40)) as pilot:
            await pilot.pause(0.2)
        os.setgroups([]); os.setgid(65534); os.setuid(65534)
        session = Session(Options(unit="sglang-kimi", journal_dir=directory, nvml=False,
                                  metrics=False, interval_s=0.1))
        app = KvtopApp(session, source_label="journal", host_name="gpu-host")
        async with app.run_test(size=(120, 40)) as pilot:
            flat = lambda t: re.sub(r"\\s+", " ", t)
            say("denied", await until(app, pilot, lambda t: "◐journal" in t and "permission denied" in flat(t)))
            sys.stdin.readline()  # the parent made the files readable
            say("granted", await until(app, pilot, lambda t: "●journal" in t and "ready" in t))

    asyncio.run(main(sys.argv[1]))
    """
)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to nobody")
@pytest.mark.skipif(journal_remote_missing() is not None, reason=journal_remote_missing() or "")
def test_journal_no_permission_then_granted() -> None:
    directory = Path(tempfile.mkdtemp(prefix="kvtop-fault-journal-"))
    try:
        directory.chmod(0o755)
        write_journal(
            directory,
            sglang_entries("sglang-kimi.service", invocation(2), STORY, 1_700_000_100_000_000),
        )
        for path in directory.iterdir():
            path.chmod(0o600)  # root's: nobody may not read them
        child = subprocess.Popen(
            [sys.executable, "-c", AS_NOBODY, str(directory)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert child.stdin is not None and child.stdout is not None

        def read() -> dict[str, str]:
            ready, _, _ = select.select([child.stdout], [], [], 40)
            assert ready, "the child said nothing within 40 s"
            line = child.stdout.readline()
            assert line, child.stderr.read() if child.stderr else ""
            return json.loads(line)

        denied = read()
        assert "◐journal" in denied["screen"]
        assert (
            "cannot read the journal for sglang-kimi.service: permission denied. Add your user "
            "to the systemd-journal group"
        ) in flat(denied["screen"])
        for path in directory.iterdir():
            path.chmod(0o644)  # the operator was added to the group
        child.stdin.write("go\n")
        child.stdin.flush()
        granted = read()
        assert "●journal" in granted["screen"] and "ready" in granted["screen"], granted["screen"]
        rc = child.wait(timeout=20)
        assert rc == 0, child.stderr.read() if child.stderr else ""
        assert "Traceback" not in (child.stderr.read() if child.stderr else "")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


# -- log: stdin closed ----------------------------------------------------------------------
def test_stdin_closed() -> None:
    def close_stdin() -> None:
        os.close(0)

    done = subprocess.run(
        [str(KVTOP), "--once", "--log-file", "-", "--no-gpus", "--no-metrics"],
        preexec_fn=close_stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("kvtop: stdin is closed, so there is no log to read: pipe")
    # ... and an empty stdin (closed by the writer at once) is a report that says so.
    empty = subprocess.run(
        [str(KVTOP), "--once", "--log-file", "-", "--no-gpus", "--no-metrics"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # Nothing to judge: the report says UNKNOWN and why, and the status 1 (nothing read).
    assert empty.returncode == 1, empty.stderr
    assert "Traceback" not in empty.stderr
    assert empty.stdout.startswith("verdict: UNKNOWN - no source could be read")


# -- terminal -------------------------------------------------------------------------------
@pytest.mark.parametrize("size", [(40, 12), (300, 50)], ids=["40x12", "300-columns"])
async def test_terminal_resize_and_back(host: FaultHost, size: tuple[int, int]) -> None:
    session = host.session()
    app = KvtopApp(session, source_label="fault matrix", host_name="gpu-host")

    def healthy(text: str, snap: object) -> bool:
        return "●NVML" in text and "●metrics" in text and len(GPU_ROW.findall(text)) == 8

    async with app.run_test(size=(120, 40)) as pilot:
        await wait_screen(app, pilot, "healthy start", healthy, 20, host.outputs)
        await pilot.resize_terminal(*size)
        bumped = host.bump()

        def resized(text: str, snap: object) -> bool:
            lines = text.splitlines()
            return (
                len(lines) <= size[1]
                and all(len(line) <= size[0] for line in lines)
                and all(FRESH[s](app.state.latest, bumped) for s in ("nvml", "metrics", "log"))
            )

        text = await wait_screen(app, pilot, f"{size} screen", resized, 10, host.outputs)
        assert "●log" in text.splitlines()[0]  # the status line on top, markers kept
        if size[0] >= 120:
            assert len(GPU_ROW.findall(text)) == 8
            assert max(len(line) for line in text.splitlines()) > 200  # bars use the width
        else:
            assert GPU_ROW.search(text), text  # the selected GPU's row at least
        await pilot.resize_terminal(120, 40)
        await wait_screen(app, pilot, "120×40 again", healthy, 10, host.outputs)
    assert all(API_KEY not in out for out in host.outputs)


@needs_tmux
def test_terminal_no_color_on_real_sources(host: FaultHost, tmux: Tmux, fake_lib: Path) -> None:
    tmux.new_session("mono", kvtop_line(host, env={"NO_COLOR": "1"}, lib_dir=fake_lib.parent))
    # The screen waited for is the one asserted on: eight rows whose bars show the KV segment
    # (readable by its glyph) on live NVML; then none of it may be in colour.
    coloured = tmux.wait_for(
        "mono",
        "eight rows with their KV segments on live NVML",
        lambda s: (
            len(GPU_ROW.findall(SGR.sub("", s))) == 8 and "●NVML" in SGR.sub("", s) and "▓" in s
        ),
        escapes=True,
    )
    chromatic = sorted(c for c in foreground_colours(coloured) if not is_grey(c))
    assert not chromatic, f"NO_COLOR=1 still draws colours {chromatic}"
    tmux.send("mono", "q")


@needs_tmux
def test_terminal_dumb_is_refused(host: FaultHost, tmux: Tmux, fake_lib: Path) -> None:
    tmux.new_session("dumb", kvtop_line(host, env={"TERM": "dumb"}, lib_dir=fake_lib.parent))
    status = host.tmp / "status"
    deadline = time.monotonic() + 20
    while not status.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert status.read_text().strip() == "2"
    screen = tmux.capture("dumb", history=True)
    assert "TERM=dumb" in screen and "--once" in screen and "Traceback" not in screen
    assert API_KEY not in screen


@needs_tmux
def test_terminal_gone_exits_without_children(host: FaultHost, tmux: Tmux, fake_lib: Path) -> None:
    tmux.new_session("hup", kvtop_line(host, lib_dir=fake_lib.parent))
    tmux.wait_for("hup", "eight rows", lambda s: len(GPU_ROW.findall(s)) == 8 and "●NVML" in s)
    shell = int((host.tmp / "pid").read_text())
    tree = {shell} | descendants(shell)
    tmux.kill_session("hup")  # the SSH session drops: SIGHUP to the pane's processes
    # Behaviour, not speed: every process ends by itself (the exit watchdog fires at 2 s); the
    # limit leaves room for a loaded machine, a hang would run far past it.
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline and any(alive(p) for p in tree):
        time.sleep(0.05)
    left = sorted(p for p in tree if alive(p))
    for pid in left:
        os.kill(pid, 9)
    assert not left, f"still running 10 s after the terminal went away: {left}"


# -- the server URL from the log, and the API key -------------------------------------------
def _log_names(host: FaultHost, address: str, port: int) -> None:
    text = host.log.read_text()
    assert text.count("host='0.0.0.0', port=30000") == 1
    host.log.write_text(
        text.replace("host='0.0.0.0', port=30000", f"host='{address}', port={port}")
    )


def in_box(screen: str) -> str:
    """The text inside the help modal's borders, its wrapped lines joined."""
    inside = [line.split("│")[1] for line in screen.splitlines() if line.count("│") >= 2]
    return flat(" ".join(inside))


async def _help_says(host: FaultHost, session_options: dict[str, object], check) -> str:  # type: ignore[no-untyped-def]
    app = KvtopApp(host.session(**session_options), source_label="fault matrix", host_name="h")
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_screen(app, pilot, "eight rows", lambda t, s: len(GPU_ROW.findall(t)) == 8)
        await pilot.press("question_mark")
        await wait_screen(app, pilot, "the help", lambda t, s: isinstance(app.screen, HelpScreen))
        await pilot.press("end")  # the sources close the help, after every view's keys
        return await wait_screen(app, pilot, "the server line in help", check, 10, host.outputs)


async def test_log_server_args_loopback(host: FaultHost) -> None:
    """No --url: the log's server_args name the server on 127.0.0.1; that is loopback, so the
    key goes to /server_info, and help and the report say where the URL came from."""
    port = int(host.server.url.rsplit(":", 1)[1])
    _log_names(host, "127.0.0.1", port)
    text = await _help_says(
        host,
        {"url": None},
        lambda t, s: (
            "from the log's server_args); the API key is sent to /server_info" in in_box(t)
        ),
    )
    assert f"http://127.0.0.1:{port} (from the log's server_args)" in in_box(text)
    sent = [h.get("authorization") for path, h in host.server.requests if path == "/server_info"]
    assert sent and set(sent) == {f"Bearer {API_KEY}"}
    report, data = await once_reports(host.options(url=None))
    assert data["server"]["url_source"] == "log server_args" and data["server"]["api_key_sent"]
    assert all(API_KEY not in out for out in [*host.outputs, report, json.dumps(data)])


async def test_log_server_args_foreign_host(host: FaultHost) -> None:
    """No --url, a key given, and the log's server_args name 192.0.2.1 (TEST-NET-1): the key
    would go nowhere near it. Tests may reach only loopback, so metrics are off (nothing is
    contacted) and help and the report show the plan; the session's plan with metrics on is
    checked in tests/process/test_server_url.py (the metrics source is built without the key)."""
    _log_names(host, "192.0.2.1", 30000)
    want = (
        "http://192.0.2.1:30000 (from the log's server_args), not contacted (--no-metrics); the "
        "API key would not be sent to http://192.0.2.1:30000: that address comes from the log's "
        "server_args and is not loopback. Give --url"
    )
    await _help_says(host, {"url": None, "metrics": False}, lambda t, s: want in in_box(t))
    report, data = await once_reports(host.options(url=None, metrics=False))
    assert want in flat(report)
    assert data["server"] == {
        "url": "http://192.0.2.1:30000",
        "url_source": "log server_args",
        "loopback": False,
        "contacted": False,
        "api_key_sent": False,
    }
    assert host.server.requests == []  # the healthy host's server was not asked either


# -- log: pipes, FIFOs and files that never end ----------------------------------------------
def bare_once(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """`kvtop --once ARGS --no-gpus --no-metrics`, its output as text."""
    return subprocess.run(
        [str(KVTOP), "--once", *args, "--no-gpus", "--no-metrics"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        **kwargs,  # type: ignore[call-overload]
    )


def catches(pid: int, signum: int) -> bool:
    """The process has a handler for SIGNUM (its SigCgt mask in /proc says so)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = int(re.search(r"SigCgt:\s*([0-9a-f]+)", status).group(1), 16)  # type: ignore[union-attr]
    return bool(caught & (1 << (signum - 1)))


@pytest.mark.parametrize(
    ("signum", "code", "sentence"),
    [
        (signal.SIGINT, 130, "kvtop: interrupted before the report was ready"),
        (signal.SIGTERM, 143, "kvtop: stopped by SIGTERM before the report was ready"),
    ],
    ids=["SIGINT", "SIGTERM"],
)
def test_once_on_a_fifo_without_writer_ends_on_a_signal(
    tmp_path: Path, signum: int, code: int, sentence: str
) -> None:
    """`kvtop --once --log-file FIFO` blocks until a writer comes; Ctrl-C or SIGTERM end it at
    once, with a sentence and 130 or 143 (no hang on the blocked read, no traceback)."""
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    child = subprocess.Popen(
        [str(KVTOP), "--once", "--log-file", str(fifo), "--no-gpus", "--no-metrics"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not catches(child.pid, signal.SIGTERM) and time.monotonic() < deadline:
            time.sleep(0.02)  # until its handlers are in: it is reading (blocked on the FIFO)
        assert catches(child.pid, signal.SIGTERM), "kvtop never installed its handlers"
        child.send_signal(signum)
        out, err = child.communicate(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == code, (child.returncode, err)
    assert err.startswith(sentence) and "nothing was printed" in err, err
    assert "Traceback" not in err and out == ""


def test_once_on_process_substitution(tmp_path: Path) -> None:
    """`--log-file <(cmd)`: a pipe at /dev/fd/N, read to its end like the file itself."""
    story = ROOT / "tui/kvtop/data/kimi-k25-tp8-eagle3-hicache-0.5.8.log"
    line = f"{shlex.quote(str(KVTOP))} --once --json --no-gpus --no-metrics --log-file"
    piped = subprocess.run(
        ["bash", "-c", f"{line} <(cat {shlex.quote(str(story))})"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    direct = bare_once("--json", "--log-file", str(story))
    assert piped.returncode == 0, piped.stderr
    got, want = json.loads(piped.stdout), json.loads(direct.stdout)
    assert got["source"]["log"].startswith("/dev/fd/")
    assert got["source"]["lines"] == want["source"]["lines"] > 300
    for key in ("startup", "server_args", "ranks", "memory", "sizing", "sources"):
        assert got[key] == want[key], key


def test_once_on_an_endless_device_stops_and_says_so() -> None:
    done = bare_once("--log-file", "/dev/zero")
    assert done.returncode == 0, done.stderr
    assert "/dev/zero did not end within 1 GiB" in flat(done.stdout), done.stdout
    assert "log ◐ degraded" in done.stdout and "Traceback" not in done.stderr


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_api_key_file_that_never_ends_is_refused(device: str) -> None:
    done = bare_once("--demo", "--api-key-file", device)
    assert done.returncode == 1
    assert done.stderr.startswith(f"kvtop: the API key file {device}") or done.stderr.startswith(
        f"kvtop: cannot read the API key file {device}: it is not a readable text file"
    ), done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_model_config_that_never_ends_is_refused() -> None:
    """A sibling of the endless log: `--model-config /dev/zero` read everything (memory grew
    until the kernel killed kvtop); now a note says the file is too big, from the log instead."""
    story = ROOT / "tui/kvtop/data/kimi-k25-tp8-eagle3-hicache-0.5.8.log"
    done = bare_once("--log-file", str(story), "--model-config", "/dev/zero")
    assert done.returncode == 0, done.stderr
    assert "model config /dev/zero is over 16 MiB: a config.json is a few KB" in flat(done.stdout)
    assert "inferred from the KV Cache line" in flat(done.stdout)


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_report_to_a_full_device_says_it_cannot_write(as_json: bool) -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [str(KVTOP), "--once", "--demo", *(["--json"] if as_json else [])],
            stdout=full, stderr=subprocess.PIPE, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr == (
        "kvtop: cannot write the report to standard output: no space left on device.\n"
    )


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_report_on_a_stdout_without_unicode(encoding: str) -> None:
    env = {**os.environ, "PYTHONIOENCODING": encoding}
    text = subprocess.run(
        [str(KVTOP), "--once", "--demo"], capture_output=True, timeout=60, env=env, check=False
    )
    assert text.returncode == 0, text.stderr
    assert all(b < 0x80 for b in text.stdout), "non-ASCII bytes in the plain report"
    plain = text.stdout.decode("ascii")
    assert "sources: log * ok  nvml * ok  metrics * ok" in plain
    as_json = subprocess.run(
        [str(KVTOP), "--once", "--json", "--demo"],
        capture_output=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    assert as_json.returncode == 0, as_json.stderr
    assert all(b < 0x80 for b in as_json.stdout)
    data = json.loads(as_json.stdout)
    assert "–" in data["sglang_version"]["range"]  # the same JSON, as \u escapes


def test_closed_pipe_stays_quiet() -> None:
    """`kvtop --once | head -1`: the first line, then nothing on stderr, status 0."""
    done = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {shlex.quote(str(KVTOP))} --once --demo | head -1"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.startswith("verdict: OK - ")  # the verdict comes first


# -- the live view on a FIFO and a pipe: `q` ends it at once; the writer finishing is a
# sentence, and the other sources carry on ---------------------------------------------------
def wait_status(host: FaultHost, seconds: float = 10.0) -> str:
    status = host.tmp / "status"
    deadline = time.monotonic() + seconds
    while not status.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return status.read_text().strip() if status.exists() else "(still running)"


@needs_tmux
@pytest.mark.parametrize("writer", ["no-writer", "quiet-writer"])
def test_q_ends_the_live_view_on_a_quiet_fifo(
    host: FaultHost, tmux: Tmux, fake_lib: Path, writer: str
) -> None:
    fifo = host.tmp / "sglang.fifo"
    os.mkfifo(fifo)
    held = None
    if writer == "quiet-writer":
        held = os.open(fifo, os.O_RDWR)  # a writer that never writes (Linux: never blocks)
    try:
        line = kvtop_line(host, lib_dir=fake_lib.parent).replace(
            shlex.quote(str(host.log)), shlex.quote(str(fifo))
        )
        tmux.new_session(f"fifo-{writer}", line)
        want = "FIFO with no writer" if held is None else "●log"
        tmux.wait_for(
            f"fifo-{writer}",
            f"eight GPU rows, and the log {want}",
            lambda s: len(GPU_ROW_NO_LOG.findall(s)) == 8 and "●NVML" in s and want in flat(s),
        )
        tmux.send(f"fifo-{writer}", "q")
        assert wait_status(host) == "0"
    finally:
        if held is not None:
            os.close(held)
        else:  # let the thread parked in open() go
            os.close(os.open(fifo, os.O_RDWR))


@needs_tmux
def test_live_view_on_a_pipe_whose_writer_finishes(
    host: FaultHost, tmux: Tmux, fake_lib: Path
) -> None:
    """`--log-file <(cat LOG)`: the startup is read, the end is a sentence (log ◐), NVML and
    metrics keep going; no false truncation, no failed seek, no stopped session."""
    line = kvtop_line(host, lib_dir=fake_lib.parent)
    inner = shlex.split(line)[2]  # the script `sh -c` runs
    inner = inner.replace(shlex.quote(str(host.log)), f"<(cat {shlex.quote(str(host.story))})")
    tmux.new_session("procsub", f"bash -c {shlex.quote(inner)}")
    screen = tmux.wait_for(
        "procsub",
        "the end of the pipe said, the GPUs still there",
        lambda s: "◐log" in s and "ended: the program writing it closed it" in flat(s)
        and len(GPU_ROW.findall(s)) == 8 and "●NVML" in s and "●metrics" in s,
    )  # fmt: skip
    assert "truncated" not in flat(screen) and "failed" not in flat(screen)
    used = f"{host.bump({'nvml'})['gpu7_mib'] / 1024:.1f}/"  # GPU 7's row: used/total GiB
    tmux.wait_for(
        "procsub",
        "NVML still updating",
        lambda s: any(r.split()[0] == "7" and used in r for r in GPU_ROW.findall(s)),
    )
    tmux.send("procsub", "q")
    assert wait_status(host) == "0"


def test_matrix_rows_are_documented() -> None:
    """docs/reliability.md carries one table row per fault in both matrix files."""
    from tests.e2e.test_fault_matrix import ROWS

    doc = (ROOT / "docs" / "reliability.md").read_text()
    ids = [row.id for row in ROWS] + [
        "nvml-library-missing",
        "journal-no-permission",
        "log-stdin-closed",
        "terminal-40x12",
        "terminal-300-columns",
        "terminal-no-color",
        "terminal-dumb",
        "terminal-gone",
        *SIGNAL_ROWS,
        "log-server-args-loopback",
        "log-server-args-foreign-host",
        "log-once-fifo-sigint",
        "log-once-fifo-sigterm",
        "log-once-process-substitution",
        "log-once-endless-device",
        "api-key-file-endless",
        "model-config-endless",
        "output-disk-full",
        "output-no-unicode",
        "output-closed-pipe",
        "log-fifo-no-writer-q",
        "log-fifo-quiet-writer-q",
        "log-pipe-writer-finishes",
    ]
    missing = [i for i in ids if f"`{i}`" not in doc]
    assert not missing, f"not in docs/reliability.md: {missing}"


# -- signals ------------------------------------------------------------------------------------
def _child_of(shell: int) -> int:
    """The pane shell's one child: the kvtop process."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == shell:
                    return int(entry.name)
        time.sleep(0.05)
    pytest.fail(f"the pane's shell {shell} started no kvtop within 20 s")


def _state(pid: int) -> str:
    """The process's state letter in /proc (T: stopped), "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _gpu7_gib(screen: str) -> str | None:
    for line in screen.splitlines():
        match = re.match(r"^\S?\s*7\s+TP7\s.*?(\d+\.\d)/\d+\.\d", line)
        if match:
            return match[1]
    return None


def _exit_status(host: FaultHost, seconds: float) -> str | None:
    status = host.tmp / "status"
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if status.exists() and status.read_text().strip():
            return status.read_text().strip()
        time.sleep(0.02)
    return None


SIGNAL_ROWS = {
    "signal-stop-cont": (signal.SIGSTOP, signal.SIGCONT),
    "signal-cont": (signal.SIGCONT,),
    "signal-tstp-cont": (signal.SIGTSTP, signal.SIGCONT),
    "signal-term-cont": (signal.SIGTERM, signal.SIGCONT),
    "signal-hup": (signal.SIGHUP,),
    "signal-int": (signal.SIGINT,),  # a supervisor's `kill -INT` (Ctrl+C itself is a key)
}


@needs_tmux
@pytest.mark.slow  # a live view on the real sources, then its exit watched
@pytest.mark.parametrize("row", list(SIGNAL_ROWS))
def test_signals(host: FaultHost, tmux: Tmux, fake_lib: Path, row: str) -> None:
    """Each signal as a shell's `fg`, systemd's stop or a dropped SSH session sends it, to the
    real kvtop in tmux: it keeps drawing and `q` ends it (STOP/CONT, CONT, TSTP/CONT), or it
    leaves at once (TERM+CONT, HUP, INT): status 0, the process gone. The exit grace is set to a
    minute, so an exit that waited for the watchdog instead of a clean shutdown fails the 10 s
    wait."""
    name = row.removeprefix("signal-")
    env = {"KVTOP_EXIT_GRACE_S": "60"}
    tmux.new_session(name, kvtop_line(host, env=env, lib_dir=fake_lib.parent))
    tmux.wait_for(name, "eight rows", lambda s: len(GPU_ROW.findall(s)) == 8 and "●NVML" in s)
    pid = _child_of(int((host.tmp / "pid").read_text()))
    sent = time.monotonic()
    for sig in SIGNAL_ROWS[row]:
        os.kill(pid, sig)
        if sig in (signal.SIGSTOP, signal.SIGTSTP):
            deadline = time.monotonic() + 10
            while _state(pid) != "T" and time.monotonic() < deadline:
                time.sleep(0.02)
            assert _state(pid) == "T"
    try:
        if {signal.SIGTERM, signal.SIGHUP, signal.SIGINT} & set(SIGNAL_ROWS[row]):
            status = _exit_status(host, 10)
            print(f"{row}: exited {time.monotonic() - sent:.2f} s after the signal")
        else:
            bumped = host.bump()
            want = f"{bumped['gpu7_mib'] / 1024:.1f}"
            screen = tmux.wait_for(name, f"GPU 7 at {want} GiB", lambda s: _gpu7_gib(s) == want)
            assert len(GPU_ROW.findall(screen)) == 8
            tmux.send(name, "q")
            status = _exit_status(host, 10)
        assert status == "0", f"no exit status 0 within 10 s: {tmux.capture(name)}"
        deadline = time.monotonic() + 5
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(pid)
        assert "Traceback" not in tmux.capture(name, history=True)
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
