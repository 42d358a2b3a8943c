"""kvtop only reads: no signals, no writes to the server, no shell, no files; the API key stays secret.

The command runs for real (`python -m kvtop`, the `kvtop` script, the live view in a pseudo
terminal) against FakeSGLang on loopback and the story log, under a Python audit hook that a
`sitecustomize.py` on PYTHONPATH installs in the child before kvtop is imported. The hook records
every process start, signal sent, file opened for writing, file removed, renamed or created,
and socket connection; the tests assert none happened except the loopback scrapes. A static scan
of tui/kvtop/ backs this up for paths the runs do not reach.
"""

from __future__ import annotations

import ast
import contextlib
import fcntl
import json
import os
import re
import secrets
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from kvtop.sources.metrics import FETCH_TIMEOUT_S, MetricsSource
from tests.support.ports import refused_url
from tests.support.sglang_http import FakeSGLang

ROOT = Path(__file__).resolve().parents[2]
STORY_LOG = ROOT / "tui" / "kvtop" / "data" / "kimi-k25-tp8-eagle3-hicache-0.5.8.log"
KVTOP_SCRIPT = Path(sys.executable).with_name("kvtop")
TIMEOUT = 60

# Installed in the child by site.py before kvtop's first import. The output file is opened
# before the hook exists, so writing the record is not itself recorded.
SITECUSTOMIZE = r"""
import atexit, json, os, sys

_path = os.environ.get("KVTOP_AUDIT_OUT")
if _path:
    _out = open(_path, "w", encoding="utf-8")
    _events = []
    _state = {"on": True}
    _WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
    _WATCH = {
        "os.kill", "os.killpg", "signal.pthread_kill", "os.system", "os.exec", "os.spawn",
        "os.posix_spawn", "os.fork", "os.forkpty", "pty.spawn", "subprocess.Popen",
        "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown",
        "os.truncate", "os.utime", "os.link", "os.symlink", "os.startfile",
        "shutil.rmtree", "shutil.copyfile", "shutil.copymode", "shutil.copystat",
        "shutil.move", "shutil.make_archive", "shutil.unpack_archive",
        "tempfile.mkstemp", "tempfile.mkdtemp", "socket.connect", "socket.bind",
        "socket.sendto", "sqlite3.connect", "webbrowser.open",
    }

    def _plain(value):
        if isinstance(value, (str, int, float, bool)) or value is None:
            return value
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        if isinstance(value, (list, tuple)):
            return [_plain(v) for v in value]
        return repr(value)

    def _hook(event, args):
        if not _state["on"]:
            return
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & _WRITE
            )
            if writes and not isinstance(path, int):
                _events.append(["open", _plain(path), _plain(mode), flags])
        elif event in _WATCH:
            if event == "socket.connect":  # (socket, address)
                _events.append([event, _plain(args[1])])
            else:
                _events.append([event, _plain(args)])

    def _dump():
        _state["on"] = False
        json.dump(_events, _out)
        _out.close()

    atexit.register(_dump)
    sys.addaudithook(_hook)
"""


@pytest.fixture(scope="module")
def audit_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("audit-site")
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return site


def _env(audit_site: Path | None = None, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"FORCE_COLOR", "CLICOLOR_FORCE", "SGLANG_API_KEY", "TEXTUAL"}
    }
    env.update(TERM="xterm-256color", PYTHONIOENCODING="utf-8", PYTHONDONTWRITEBYTECODE="1")
    if audit_site is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(audit_site), env.get("PYTHONPATH", "")) if p
        )
    env.update(extra)
    return env


def _events(record: Path) -> list[list[object]]:
    assert record.exists(), "the audit hook did not run in the child"
    return json.loads(record.read_text())


def _not_allowed(events: list[list[object]], server: FakeSGLang | None) -> list[list[object]]:
    """Everything recorded except opening /dev/null or the tty, and connecting to the fake."""
    allowed_addresses = []
    if server is not None:
        host, port = server._server.server_address[:2]
        allowed_addresses.append([host, port])
    bad = []
    for event in events:
        name = event[0]
        if name == "open" and event[1] in ("/dev/null", "/dev/tty"):
            continue
        if name == "socket.connect" and event[1] in allowed_addresses:
            continue
        bad.append(event)
    return bad


def _only_reads(server: FakeSGLang) -> None:
    assert server.methods, "kvtop never reached the server: the test proves nothing"
    assert {m for m, _ in server.methods} == {"GET"}, server.methods
    assert {p for _, p in server.methods} <= {"/metrics", "/server_info", "/get_server_info"}


# --------------------------------------------------------------------------- the report, audited


def test_the_audit_hook_sees_what_it_must(audit_site: Path, tmp_path: Path) -> None:
    """The harness itself: a child that does each forbidden thing is caught at each one."""
    record = tmp_path / "audit.json"
    child = """
import os, signal, subprocess, pathlib, shutil
pathlib.Path("new.txt").write_text("x")
open("new.txt", "a").close()
os.rename("new.txt", "moved.txt")
os.remove("moved.txt")
os.mkdir("d")
shutil.rmtree("d")
os.kill(os.getpid(), 0)
subprocess.run(["true"])
subprocess.run("true", shell=True)
os.system("true")
open(os.devnull, "w").close()
"""
    result = subprocess.run(
        [sys.executable, "-c", child],
        capture_output=True,
        timeout=TIMEOUT,
        env=_env(audit_site, KVTOP_AUDIT_OUT=str(record)),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr.decode()
    bad = _not_allowed(_events(record), None)
    names = [e[0] for e in bad]
    for name in ("open", "os.rename", "os.remove", "os.mkdir", "shutil.rmtree", "os.kill"):
        assert name in names, (name, bad)
    assert names.count("subprocess.Popen") == 2 and "os.system" in names
    assert sum(e[0] == "open" and str(e[1]).endswith("new.txt") for e in bad) == 2
    assert not any(e[0] == "open" and e[1] == os.devnull for e in bad)


@pytest.mark.parametrize(
    ("entry", "fmt"),
    [("python -m kvtop", "json"), ("kvtop", "text")],
)
def test_report_only_reads(
    entry: str, fmt: str, audit_site: Path, tmp_path: Path, story_log: Path
) -> None:
    if entry == "kvtop" and not KVTOP_SCRIPT.exists():
        pytest.skip(f"no kvtop console script next to {sys.executable}")
    command = [sys.executable, "-m", "kvtop"] if entry != "kvtop" else [str(KVTOP_SCRIPT)]
    key_file = tmp_path / "key"
    key_file.write_text("sk-audit-key\n")
    record = tmp_path / "audit.json"
    with FakeSGLang() as server:
        server.switches.api_key = "sk-audit-key"
        # NVML stays on: loading the library (absent here, or the driver's) only reads.
        args = ["--once", "--log-file", str(story_log), "--url", server.url]
        args += ["--api-key-file", str(key_file)] + (["--json"] if fmt == "json" else [])
        result = subprocess.run(
            [*command, *args],
            capture_output=True,
            timeout=TIMEOUT,
            env=_env(audit_site, KVTOP_AUDIT_OUT=str(record)),
            cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr.decode()
        _only_reads(server)
        assert ("GET", "/server_info") in server.methods
    events = _events(record)
    assert any(e[0] == "socket.connect" for e in events), "the hook saw no scrape: it is not on"
    assert _not_allowed(events, server) == []


def test_exporter_only_reads_and_listens_where_asked(
    audit_site: Path, tmp_path: Path, story_log: Path
) -> None:
    """`kvtop --export`: one listening socket on the address asked for (nothing else bound),
    the scrapes of the server, no file written, no process started; SIGTERM ends it (0)."""
    import httpx

    from tests.support.export_tools import SERVING, read_line

    record = tmp_path / "audit.json"
    with FakeSGLang() as server:
        args = ["--export", "127.0.0.1:0", "--log-file", str(story_log), "--url", server.url]
        proc = subprocess.Popen(
            [str(KVTOP_SCRIPT), *args, "--no-gpus"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(audit_site, KVTOP_AUDIT_OUT=str(record)),
            cwd=tmp_path,
        )
        try:
            # where it serves, on stderr (a deadline: a child that says nothing fails the test)
            match, _ = read_line(proc.stderr, SERVING, time.monotonic() + TIMEOUT)
            body = ""
            deadline = time.monotonic() + TIMEOUT
            while "kvtop_kv_pool_tokens{" not in body and time.monotonic() < deadline:
                body = httpx.get(match.group(1), timeout=10).text
            assert "kvtop_kv_pool_tokens{" in body  # the body of the log and the scrape
            proc.terminate()
            assert proc.wait(timeout=TIMEOUT) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=TIMEOUT)
        _only_reads(server)
    events = _events(record)
    binds = [e for e in events if e[0] == "socket.bind"]
    assert [b[1][1] for b in binds] == [["127.0.0.1", 0]], binds
    assert _not_allowed([e for e in events if e[0] != "socket.bind"], server) == []


def test_fleet_view_only_reads(audit_site: Path, tmp_path: Path) -> None:
    """`kvtop --prometheus URL --once --json`: one connection, to the Prometheus asked for
    (here nothing listens: the report says so), no file written, no process started."""
    record = tmp_path / "audit.json"
    with refused_url() as url:
        result = subprocess.run(
            [str(KVTOP_SCRIPT), "--prometheus", url, "--once", "--json"],
            capture_output=True,
            timeout=TIMEOUT,
            env=_env(audit_site, KVTOP_AUDIT_OUT=str(record)),
            cwd=tmp_path,
        )
    assert result.returncode == 1, result.stderr.decode()  # no fleet: Prometheus is down
    assert json.loads(result.stdout)["prometheus"]["problem"]
    events = _events(record)
    asked = ["socket.connect", ["127.0.0.1", int(url.rsplit(":", 1)[1])]]
    assert asked in events, "the hook saw no request: it is off"
    others = [e for e in events if e != asked]
    assert _not_allowed(others, None) == []


def _read_until(master: int, proc: subprocess.Popen[bytes], done, limit_s: float) -> bytes:  # type: ignore[no-untyped-def]
    """Drain the pty (the app must never block on a full terminal) until done() or limit_s."""
    seen = b""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and proc.poll() is None:
        ready, _, _ = select.select([master], [], [], 0.05)
        if ready:
            with contextlib.suppress(OSError):
                seen += os.read(master, 65536)
        if done(seen):
            break
    return seen


def test_live_view_only_reads(audit_site: Path, tmp_path: Path, story_log: Path) -> None:
    """The live view in a real pseudo terminal: following a log, scraping, drawing, then `q`."""
    log = tmp_path / "sglang.log"
    log.write_bytes(story_log.read_bytes())
    record = tmp_path / "audit.json"
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    with FakeSGLang() as server:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kvtop",
                "--log-file",
                str(log),
                "--url",
                server.url,
                "--no-gpus",
                "--interval",
                "0.25",
            ],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=_env(audit_site, KVTOP_AUDIT_OUT=str(record), SGLANG_API_KEY="sk-live-key"),
            cwd=tmp_path,
            start_new_session=True,
        )
        os.close(slave)
        try:
            scrapes = lambda: sum(p == "/metrics" for _, p in server.methods)  # noqa: E731
            screen = _read_until(
                master, proc, lambda seen: scrapes() >= 2 and b"TP0" in seen, limit_s=30
            )
            assert proc.poll() is None, screen.decode(errors="replace")[-2000:]
            assert scrapes() >= 2, "the live view did not scrape twice in 30 s"
            os.write(master, b"q")
            _read_until(master, proc, lambda _: proc.poll() is not None, limit_s=15)
            assert proc.wait(timeout=5) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            os.close(master)
        _only_reads(server)
    events = _events(record)
    assert _not_allowed(events, server) == []


# --------------------------------------------------------------------------- read-only HOME


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    out = {".": (root.stat().st_mtime_ns, 0)}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            out[str(path.relative_to(root))] = (st.st_mtime_ns, st.st_size)
    return out


def test_report_with_a_read_only_home(tmp_path: Path, story_log: Path) -> None:
    home, cwd, tmpdir = tmp_path / "home", tmp_path / "cwd", tmp_path / "tmp"
    for d in (home, cwd, tmpdir):
        d.mkdir()
    (home / ".profile").write_text("# an existing file\n")
    home.chmod(0o555)
    before = {d: _tree(d) for d in (home, cwd, tmpdir)}
    xdg = {
        f"XDG_{name}_HOME": str(home / f".{name.lower()}")
        for name in ("CONFIG", "CACHE", "DATA", "STATE")
    }
    env = _env(HOME=str(home), TMPDIR=str(tmpdir), XDG_RUNTIME_DIR=str(home / "run"), **xdg)
    try:
        with FakeSGLang() as server:
            for extra in ([], ["--json"]):
                result = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "kvtop",
                        "--once",
                        "--no-gpus",
                        *extra,
                        "--log-file",
                        str(story_log),
                        "--url",
                        server.url,
                    ],
                    capture_output=True,
                    timeout=TIMEOUT,
                    env=env,
                    cwd=cwd,
                )
                assert result.returncode == 0, result.stderr.decode()
                assert b"Traceback" not in result.stderr
                assert result.stdout.strip()
            _only_reads(server)
        after = {d: _tree(d) for d in (home, cwd, tmpdir)}
    finally:
        home.chmod(0o755)
    assert after == before
    assert not any(tmpdir.iterdir())


# --------------------------------------------------------------------------- static scan of tui/kvtop/

# (module, function) calls that signal, spawn, or change files; any shutil/subprocess/tempfile.
_FORBIDDEN = {
    "os": {
        "system", "popen", "kill", "killpg", "fork", "forkpty", "remove", "unlink", "rename",
        "renames", "replace", "rmdir", "removedirs", "mkdir", "makedirs", "truncate", "chmod",
        "chown", "lchown", "symlink", "link", "utime", "open", "mkfifo", "mknod", "write",
        "setsid", "putenv", "startfile",
    },
    "signal": {"pthread_kill", "raise_signal", "killpg"},
    "pty": {"spawn", "fork"},
    "socket": {"socket", "create_connection", "create_server", "socketpair"},
}  # fmt: skip
_FORBIDDEN_PREFIX = {"os": ("exec", "spawn", "posix_spawn")}
_WHOLE_MODULES = {"subprocess", "tempfile", "shutil", "webbrowser", "pickle"}
_ALLOWED_ATTRS = {("shutil", "which")}  # looking a program up in PATH only reads
_FORBIDDEN_IMPORTS = {"requests", "urllib.request", "http.client", "aiohttp", "urllib3", "ftplib"}
_WRITE_METHODS = {
    "write_text", "write_bytes", "mkdir", "unlink", "touch", "rmdir", "symlink_to",
    "hardlink_to", "chmod", "lchmod", "post", "patch", "delete", "create_subprocess_shell",
}  # fmt: skip
_SIGNAL_METHODS = {"kill", "terminate", "send_signal"}
# The one place that starts a process: the journal source runs `journalctl` (fixed options, an
# argv list, no shell) when the systemd module is missing, and ends that child of its own.
_SPAWNS = {"tui/kvtop/sources/journal_ctl.py"}
# A byte into the process's own pipe, to wake its input thread when the app leaves; the
# exporter's own listening socket and the pair that wakes its reading thread (it answers GET and
# HEAD only, tests/process/test_export_http.py).
_OWN_PIPE = {
    ("tui/kvtop/live/quiet_driver.py", "os", "write"),
    ("tui/kvtop/export/http.py", "socket", "socket"),
    ("tui/kvtop/export/http.py", "socket", "socketpair"),
}
_HTTP_VERBS = {"POST", "PUT", "PATCH", "DELETE", "CONNECT", "TRACE"}


def _mode_writes(node: ast.Call, position: int) -> bool | None:
    """True/False for a constant open mode; None when the mode is not a constant."""
    mode: ast.expr | None = None
    if len(node.args) > position:
        mode = node.args[position]
    for kw in node.keywords:
        if kw.arg == "mode":
            mode = kw.value
    if mode is None:
        return False
    if isinstance(mode, ast.Constant) and isinstance(mode.value, str):
        return any(c in mode.value for c in "wax+")
    return None


def _import_finds(node: ast.Import | ast.ImportFrom) -> list[str]:
    """What an import brings in that could signal, spawn, write or send."""
    found: list[str] = []
    names = (
        [a.name for a in node.names]
        if isinstance(node, ast.Import)
        else [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
    )
    found += [f"imports {name}" for name in names if name in _FORBIDDEN_IMPORTS]
    if isinstance(node, ast.ImportFrom) and node.module in (*_FORBIDDEN, *_WHOLE_MODULES):
        for alias in node.names:
            if alias.name in _FORBIDDEN.get(node.module, ()) or (
                node.module in _WHOLE_MODULES and (node.module, alias.name) not in _ALLOWED_ATTRS
            ):
                found.append(f"from {node.module} import {alias.name}")
    return found


def _method_find(node: ast.Call, attr: str, rel: str) -> str | None:
    """What a method call (`x.attr(...)` on anything but a module) could do, if anything."""
    if attr in _WRITE_METHODS:
        return f".{attr}()"
    if attr == "open" and _mode_writes(node, 0) is not False:
        return ".open() for writing (or a mode that is not a constant)"
    if attr in ("stream", "request", "build_request") and node.args:
        verb = node.args[0]
        if not (isinstance(verb, ast.Constant) and verb.value == "GET"):
            return f".{attr}() with a method other than a constant GET"
        return None
    if attr in _SIGNAL_METHODS and rel not in _SPAWNS:
        return f".{attr}() (sends a signal)"
    if attr == "create_subprocess_exec" and rel not in _SPAWNS:
        return "starts a process"
    return None


_READ_FLAGS = {"O_RDONLY", "O_NONBLOCK", "O_CLOEXEC", "O_NOFOLLOW", "O_NOCTTY"}


def _read_only_flags(node: ast.Call) -> bool:
    """os.open's flags written out as `os.O_RDONLY | os.O_…` with only reading flags."""
    if len(node.args) < 2:
        return False
    names: list[str] = []

    def collect(expr: ast.expr) -> bool:
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.BitOr):
            return collect(expr.left) and collect(expr.right)
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            names.append(expr.attr)
            return expr.value.id == "os"
        return False

    return collect(node.args[1]) and "O_RDONLY" in names and set(names) <= _READ_FLAGS


def _call_finds(node: ast.Call, rel: str) -> list[str]:
    """What a call could do: open for writing, a forbidden module function, a method that
    writes, signals, spawns or sends a non-GET."""
    found: list[str] = []
    func = node.func
    if isinstance(func, ast.Name) and func.id == "open" and _mode_writes(node, 1) is not False:
        found.append("open() for writing (or a mode that is not a constant)")
    if not isinstance(func, ast.Attribute):
        return found
    attr, base = func.attr, func.value
    module = base.id if isinstance(base, ast.Name) else None
    if module is not None and (rel, module, attr) in _OWN_PIPE:
        return found
    if (module, attr) == ("os", "open") and _read_only_flags(node):
        return found  # os.open(path, os.O_RDONLY | os.O_NONBLOCK): a read, never a write
    if module is not None and (
        attr in _FORBIDDEN.get(module, ())
        or attr.startswith(_FORBIDDEN_PREFIX.get(module, ("\0",)))
        or (module in _WHOLE_MODULES and (module, attr) not in _ALLOWED_ATTRS)
    ):
        return [*found, f"{module}.{attr}()"]
    method = _method_find(node, attr, rel)
    return found if method is None else [*found, method]


def scan(source: str, rel: str) -> list[str]:
    """Every call or import in `source` that could signal, spawn, write or send a non-GET."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            whats = _import_finds(node)
        elif isinstance(node, ast.Constant) and node.value in _HTTP_VERBS:
            whats = [f"HTTP method {node.value}"]
        elif isinstance(node, ast.keyword) and node.arg == "shell":
            whats = ["shell= keyword"]
        elif isinstance(node, ast.Call):
            whats = _call_finds(node, rel)
        else:
            continue
        found += [f"{rel}:{getattr(node, 'lineno', 0)}: {what}" for what in whats]
    return found


# The one module that writes files, each on the operator's request in the live view (the
# palette's Screenshot and Save theme to config); docs/reliability.md says which.
_ASKED_WRITES = "tui/kvtop/saved_files.py"


def test_static_scan_of_the_sources() -> None:
    files = sorted((ROOT / "tui" / "kvtop").rglob("*.py"))
    assert len(files) > 30
    found = []
    for path in files:
        found += scan(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())
    assert [f for f in found if not f.startswith(_ASKED_WRITES + ":")] == []
    # Even there: files only (no signal, process, socket or request).
    asked = {f.split(": ", 1)[1] for f in found if f.startswith(_ASKED_WRITES + ":")}
    assert asked <= {
        "open() for writing (or a mode that is not a constant)",
        ".mkdir()",
        "tempfile.mkstemp()",
        "tempfile.gettempdir()",
        "os.chmod()",
        "os.open()",  # a new file, 0600, never over one (O_CREAT | O_EXCL)
        "os.replace()",
        "os.unlink()",
    }


def test_static_scan_catches_each_kind() -> None:
    planted = {
        "import subprocess\nsubprocess.run(['ls'])": "subprocess.run()",
        "import os\nos.system('x')": "os.system()",
        "import os\nos.kill(1, 9)": "os.kill()",
        "import os\nos.open(p, os.O_WRONLY | os.O_NONBLOCK)": "os.open()",
        "import os\nos.open(p, os.O_RDONLY | os.O_CREAT)": "os.open()",
        "import os\nos.execv('/bin/sh', [])": "os.execv()",
        "import signal\nsignal.pthread_kill(1, 2)": "signal.pthread_kill()",
        "from os import kill": "from os import kill",
        "p.kill()": ".kill()",
        "asyncio.create_subprocess_exec('x', shell=False)": "shell=",
        "open('x', 'w')": "open() for writing",
        "open(path, mode)": "open() for writing",
        "Path('x').write_text('y')": ".write_text()",
        "Path('x').open('a')": ".open() for writing",
        "client.post(url)": ".post()",
        "client.stream('DELETE', url)": "HTTP method DELETE",
        "client.stream(verb, url)": "other than a constant GET",
        "import requests": "imports requests",
        "import shutil\nshutil.rmtree('x')": "shutil.rmtree()",
    }
    for source, needle in planted.items():
        found = scan(source, "tui/kvtop/planted.py")
        assert any(needle in f for f in found), (source, found)
    assert scan("import shutil\nshutil.which('journalctl')\nopen(p, encoding='utf-8')", "x") == []
    assert scan("client.stream('GET', url)\nq.put(1)\ns.replace('a', 'b')", "x") == []


# --------------------------------------------------------------------------- secrets

KEY_FILE = "sk-file-" + secrets.token_hex(12)
KEY_ENV = "sk-env-" + secrets.token_hex(12)


def _assert_secret_absent(text: str) -> None:
    for key in (KEY_FILE, KEY_ENV):
        for piece in (key, key[8:], key[-12:]):  # the whole key, or any recognisable part
            assert piece not in text, f"the API key leaked: {text[-3000:]}"


def _faulty(server: FakeSGLang, fault: str, refused: str) -> str:
    """Put the server into `fault`; returns the URL to give kvtop (`refused`: where nothing
    answers, so the key is offered to no one)."""
    sw = server.switches
    if fault == "key accepted":  # SGLang's /server_info then echoes server_args, api_key too
        sw.api_key = KEY_FILE
        server.restart(server.deployment)
    elif fault == "401 on /server_info":
        sw.api_key = "sk-the-server-wants-another-key"
    elif fault == "500 on /server_info":
        sw.status["/server_info"] = 500
    elif fault == "500 on /metrics":
        sw.status["/metrics"] = 500
    elif fault == "HTML body":
        sw.body = "html"
    elif fault == "timeout":
        sw.delay_s = FETCH_TIMEOUT_S + 0.3  # past kvtop's limit for one fetch
    elif fault == "refused":
        return refused
    return server.url


@pytest.mark.parametrize(
    "fault",
    [
        "key accepted",
        "401 on /server_info",
        "500 on /server_info",
        "500 on /metrics",
        "HTML body",
        pytest.param("timeout", marks=pytest.mark.slow),  # waits out kvtop's fetch timeout
        "refused",
    ],
)
def test_api_key_never_shown(fault: str, tmp_path: Path, story_log: Path) -> None:
    """Both key sources at once (file and SGLANG_API_KEY), text and JSON, in each fault; the
    log's server_args carry the keys too, as SGLang logs them when started with --api-key."""
    key_file = tmp_path / "key"
    key_file.write_text(KEY_FILE + "\n")
    text = story_log.read_text(encoding="utf-8")
    text, n = re.subn(r"(?<![a-z_])api_key=None", f"api_key='{KEY_FILE}'", text)
    text, m = re.subn(r"admin_api_key=None", f"admin_api_key='{KEY_ENV}'", text)
    assert n == 1 and m == 1
    story_log = tmp_path / "sglang.log"
    story_log.write_text(text, encoding="utf-8")
    base = [sys.executable, "-m", "kvtop", "--once", "--no-gpus", "--log-file", str(story_log)]
    with FakeSGLang() as server, refused_url() as refused:
        url = _faulty(server, fault, refused)
        runs = [
            ([*base, "--json", "--url", url, "--api-key-file", str(key_file)], "json"),
            ([*base, "--url", url, "--api-key-file", str(key_file)], "text"),
            ([*base, "--json", "--url", url], "json, key from the environment"),
        ]
        procs = [
            subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=_env(SGLANG_API_KEY=KEY_ENV),
                cwd=tmp_path,
            )
            for cmd, _ in runs
        ]
        outputs = [p.communicate(timeout=TIMEOUT) for p in procs]
        for proc, (out, err), (_, what) in zip(procs, outputs, runs, strict=True):
            text = out.decode("utf-8", "replace") + err.decode("utf-8", "replace")
            assert proc.returncode == 0, (what, text[-2000:])
            _assert_secret_absent(text)
            if what.startswith("json"):
                json.loads(out)  # a whole report, even in the fault
        if fault == "key accepted":
            # The key was really in use (else this case would prove nothing) ...
            bearers = [h.get("authorization") for p, h in server.requests if p == "/server_info"]
            assert f"Bearer {KEY_FILE}" in bearers and f"Bearer {KEY_ENV}" in bearers
        # ... and went nowhere but /server_info.
        for path, headers in server.requests:
            if path != "/server_info":
                assert "authorization" not in headers, path
        if url == server.url:
            _only_reads(server)


def test_repr_of_the_metrics_source_hides_the_key() -> None:
    source = MetricsSource("http://127.0.0.1:30000", api_key=KEY_FILE)
    for text in (repr(source), str(source), f"{source!r}", f"{source}"):
        _assert_secret_absent(text)
        assert "api_key=set" in text


@pytest.mark.parametrize("where", ["file", "env"])
def test_key_a_header_cannot_carry_is_refused_without_quoting_it(
    tmp_path: Path, where: str
) -> None:
    """A key httpx cannot put in a header (it raised UnicodeEncodeError mid-scrape, a
    traceback quoting part of the key): refused up front, one sentence, nothing fetched."""
    key = "sk-ключ-" + KEY_FILE
    key_file = tmp_path / "key"
    key_file.write_text(key + "\n", encoding="utf-8")
    with FakeSGLang() as server:
        args = [sys.executable, "-m", "kvtop", "--once", "--json", "--no-gpus", "--url", server.url]
        if where == "file":
            args += ["--api-key-file", str(key_file)]
        result = subprocess.run(
            args,
            capture_output=True,
            timeout=TIMEOUT,
            env=_env(SGLANG_API_KEY=key if where == "env" else KEY_ENV),
            cwd=tmp_path,
        )
        assert server.methods == []
    text = result.stdout.decode("utf-8", "replace") + result.stderr.decode("utf-8", "replace")
    assert result.returncode == 1
    assert "Traceback" not in text
    assert "an HTTP header cannot carry" in text
    _assert_secret_absent(text)
    assert "ключ" not in text


def test_url_with_credentials_is_refused_without_echoing_them(tmp_path: Path) -> None:
    password = "pw-" + secrets.token_hex(8)
    result = subprocess.run(
        [sys.executable, "-m", "kvtop", "--once", "--url", f"http://admin:{password}@127.0.0.1:9"],
        capture_output=True,
        timeout=TIMEOUT,
        env=_env(),
        cwd=tmp_path,
    )
    assert result.returncode == 2
    err = result.stderr.decode()
    assert password not in err and "admin" not in err
    assert "--api-key-file" in err
    assert result.stdout == b""
