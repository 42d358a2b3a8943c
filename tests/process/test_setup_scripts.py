"""The set-up scripts: docs/install.md names every system package they install, and the install step
says what pip is doing (scripts/pip_progress.py) while pip's own output goes to a log."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "scripts" / "setup-env.sh"
PIP_LOG = ROOT / "tests" / "fixtures" / "pip" / "install-cold.log"  # a real `pip install .`
sys.path.insert(0, str(ROOT / "scripts"))

import pip_progress  # noqa: E402


def _script_packages() -> dict[str, str]:
    """Each package setup-env.sh adds to `missing`, with "tests" inside its test-extras block."""
    found: dict[str, str] = {}
    in_tests = False
    for line in SETUP.read_text().splitlines():
        if re.match(r'\s*if \[ "\$extras" = test \]; then', line):
            in_tests = True
        elif in_tests and line.strip() == "fi":
            in_tests = False
        for name in re.findall(r"missing\+=\(([\w.+-]+)\)", line):
            found[name] = "tests" if in_tests else "install"
    return found


INSTALL_DOC = ROOT / "docs" / "install.md"


def _documented_packages() -> dict[str, str]:
    """The rows of docs/install.md's "System packages" table: package -> its "for" column."""
    text = INSTALL_DOC.read_text()
    section = text.split("## System packages", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| `([\w.+-]+)` \| (\w+) \| (.+) \|$", section, re.MULTILINE)
    assert all(why.strip() for _, _, why in rows), "every package says why it is needed"
    return {name: used_for for name, used_for, _ in rows}


def test_the_install_page_lists_every_system_package_the_scripts_install() -> None:
    script = _script_packages()
    assert {"gcc", "libsystemd-dev", "tmux", "systemd-journal-remote"} <= set(script)
    assert _documented_packages() == script


@pytest.mark.parametrize(
    ("page", "heading"),
    [("README.md", "## On the GPU host"), ("docs/install.md", "# Installing kvtop")],
)
def test_the_install_command_names_the_build_packages(page: str, heading: str) -> None:
    """Where the install is shown, its apt-get line installs what a `pipx install .` build
    needs."""
    text = (ROOT / page).read_text()
    install = text.split(heading, 1)[1].split("\n## ", 1)[0]
    command = re.search(r"sudo apt-get install -y ([\w .+-]+)\n", install)
    assert command is not None
    build = {name for name, used_for in _script_packages().items() if used_for == "install"}
    assert set(command[1].split()) == build


def test_progress_follows_a_real_pip_log() -> None:
    progress = pip_progress.Progress()
    stages = [progress.text for line in PIP_LOG.read_text().splitlines() if progress.feed(line)]
    assert stages == [
        "resolving and downloading packages (1 so far: textual)",
        "building kvtop",
        "compiling systemd-python (C, against libsystemd: a few seconds)",
        "installing 19 packages into .venv",
    ]
    assert progress.collected == 18  # every dependency, by name or by its file; not the project
    assert progress.installed == 19  # ... and kvtop itself


def _fake_pip(tmp_path: Path, status: int) -> dict[str, str]:
    """An environment whose `python -m pip` replays the real log and exits with STATUS.

    A stand-in for pip because the real one needs a package index and 10-60 s; it is found
    first through PYTHONPATH, as `python -m pip` looks it up."""
    fake = tmp_path / "fake" / "pip"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text(
        "import sys\n"
        f"sys.stdout.write(open({str(PIP_LOG)!r}).read())\n"
        "print('args:', *sys.argv[1:])\n"
        f"sys.exit({status})\n"
    )
    return dict(os.environ, PYTHONPATH=str(fake.parent))


def _command(tmp_path: Path) -> list[str]:
    script = str(ROOT / "scripts" / "pip_progress.py")
    pip_args = ["install", "-e", "."]
    return [sys.executable, script, str(tmp_path / "pip.log"), "kvtop setup [2/2]", "--", *pip_args]


def _run_with_pip_replaying(tmp_path: Path, status: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _command(tmp_path),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
        env=_fake_pip(tmp_path, status),
    )


def test_pip_progress_says_each_stage_on_stderr_and_logs_pip(tmp_path: Path) -> None:
    result = _run_with_pip_replaying(tmp_path, 0)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    said = result.stderr.splitlines()
    assert all(line.startswith("kvtop setup [2/2]: ") for line in said), said
    stages = [line.split(": ", 1)[1].rsplit(" · ", 1)[0] for line in said[:-1]]
    assert stages == [
        "resolving and downloading packages (1 so far: textual)",
        "building kvtop",
        "compiling systemd-python (C, against libsystemd: a few seconds)",
        "installing 19 packages into .venv",
    ]
    assert re.fullmatch(r"kvtop setup \[2/2\]: done, 19 packages installed in \d+ s", said[-1])
    log = (tmp_path / "pip.log").read_text()
    assert log.startswith(PIP_LOG.read_text())  # pip's output whole, in the log only
    assert log.endswith("args: install -e .\n")


def test_pip_progress_passes_on_a_failure(tmp_path: Path) -> None:
    result = _run_with_pip_replaying(tmp_path, 3)
    assert result.returncode == 3
    assert "done" not in result.stderr
    assert (tmp_path / "pip.log").read_text().endswith("args: install -e .\n")


def test_pip_progress_in_a_terminal_rewrites_one_line(tmp_path: Path) -> None:
    """With stderr on a terminal (a real pty) the stage line is rewritten in place and erased
    at the end, leaving the one "done" line."""
    controller, terminal = pty.openpty()
    try:
        with subprocess.Popen(
            _command(tmp_path),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=terminal,
            env=_fake_pip(tmp_path, 0),
        ) as process:
            os.close(terminal)
            out = b""
            while chunk := _read(controller):
                out += chunk
            assert process.wait(timeout=60) == 0
    finally:
        os.close(controller)
    text = out.decode()
    pieces = text.split("\r\x1b[K")
    assert len(pieces) >= 3, text  # rewritten at least once, then erased
    assert "installing 19 packages into .venv" in text
    assert re.fullmatch(
        r"kvtop setup \[2/2\]: done, 19 packages installed in \d+ s\r?\n", pieces[-1]
    )


def _read(fd: int) -> bytes:
    """What the pty gives, b"" once the writer has closed it (Linux raises EIO then)."""
    try:
        return os.read(fd, 4096)
    except OSError:
        return b""
