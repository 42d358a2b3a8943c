"""Fixtures and hooks every level shares; the helpers themselves are in tests/support."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvtop.options import Deadline
from tests.support.fake_nvml import build_fake_nvml
from tests.support.paths import STORY_LOG
from tests.support.tmux_tools import Tmux, private_server


@pytest.fixture
def story_log() -> Path:
    return STORY_LOG


@pytest.fixture
def utc_zone() -> Iterator[None]:
    """Log times are local times: a module whose screens or reports show them pins the zone
    (`pytestmark = pytest.mark.usefixtures("utc_zone")`), so they read the same on every
    machine. Opt-in: the tmux servers and child processes of the other modules keep the
    machine's zone."""
    from tests.support.tui_support import utc

    with utc():
        yield


@pytest.fixture(scope="session")
def rocm_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake AMD SMI (tests/support/fake_amdsmi) built once for the session: the folder to
    give as ROCM_PATH, where the amdsmi binding finds lib/libamd_smi.so."""
    from tests.support.fake_amdsmi import build_fake_amdsmi

    return build_fake_amdsmi(tmp_path_factory.mktemp("fake-amdsmi"))


@pytest.fixture(scope="session")
def lib_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of the fake libnvidia-ml.so.1 (tests/support/fake_nvml), built once for the
    session: child processes find it through LD_LIBRARY_PATH. Only read, never written, by the
    tests."""
    return build_fake_nvml(tmp_path_factory.mktemp("fake-nvml")).parent


@pytest.fixture(scope="session")
def fake_lib(lib_dir: Path) -> Path:
    """The fake libnvidia-ml.so.1 loaded into this process under its soname, for the tests that
    poll NVML in-process through the real nvidia-ml-py (tests/support/fault_host.py: loading
    it is one-way for the process)."""
    from tests.support.fault_host import preload_fake_nvml  # the app's modules: loaded on use

    return preload_fake_nvml(lib_dir)


@pytest.fixture(scope="module")
def tmux_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Tmux]:
    """A private tmux server for the module (tests/support/tmux_tools.py), killed after it."""
    module = request.module.__name__.rsplit(".", 1)[-1]
    with private_server(f"kvtop-{module}", tmp_path_factory.mktemp("tmux")) as server:
        yield server


@pytest.fixture
def tmux(tmux_server: Tmux) -> Iterator[Tmux]:
    """The module's tmux server; the sessions a test opened are killed after it, passed or
    not, so the next test starts on a server with only its holder session."""
    yield tmux_server
    listed = tmux_server.run("list-sessions", "-F", "#{session_name}", check=False).stdout
    for name in listed.split():
        if name != "holder":
            tmux_server.kill_session(name)


@pytest.fixture(autouse=True)
def no_deadline_outlives_its_test(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`main([... "--check" or "--once" ...])` called in this process starts the deadline's
    watchdog (tui/kvtop/options.py), which ends the process with os._exit once --deadline (60 s)
    has passed: in a real kvtop run the process has long exited by then, but here it would end
    the whole test session a minute after the test (seen under load, exit status 3 at 98 %).
    Each deadline a test starts is cancelled when the test ends."""
    started: list[Deadline] = []
    start = Deadline.start

    def tracked(self: Deadline) -> Deadline:
        started.append(self)
        return start(self)

    monkeypatch.setattr(Deadline, "start", tracked)
    yield
    for deadline in started:
        deadline.cancel()


# -- the machine's own settings stay out ----------------------------------------------------------
# kvtop reads settings from the environment: a config file under XDG_CONFIG_HOME (a `url` in it
# would point every run at a server), the API key, the CUDA devices that place ranks by order,
# the Hugging Face cache that gives the sizing a config.json, the folder views are saved in.
# The suite runs on what each test sets, never on what the machine it runs on has: these point
# at an empty folder (or are unset) for the whole run, child processes included; a test that
# needs one sets it itself (monkeypatch, or the env of its subprocess).
_UNSET = ("SGLANG_API_KEY", "CUDA_VISIBLE_DEVICES", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE")
_EMPTY_DIRS = ("XDG_CONFIG_HOME", "XDG_STATE_HOME", "HF_HOME")
_saved_environ: dict[str, str] = {}


def pytest_configure(config: pytest.Config) -> None:
    import tempfile

    _saved_environ.update(os.environ)
    empty = tempfile.mkdtemp(prefix="kvtop-tests-env-")
    for name in _UNSET:
        os.environ.pop(name, None)
    for name in _EMPTY_DIRS:
        os.environ[name] = os.path.join(empty, name.lower())


def pytest_unconfigure(config: pytest.Config) -> None:
    os.environ.clear()
    os.environ.update(_saved_environ)


# -- no skips in CI --------------------------------------------------------------------------
# CI's machine has everything the suite needs (.ci/run installs it), so a test that skips there
# hides a broken set-up or a test that no longer runs. Under CI=true a skip fails the run; the
# skip reasons are printed by `-rs` in .ci/run.
def _skipped(config: pytest.Config) -> int:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    return len(reporter.stats.get("skipped", [])) if reporter is not None else 0


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _in_ci() and _skipped(session.config) and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:  # type: ignore[no-untyped-def]
    if _in_ci() and _skipped(config):
        terminalreporter.write_line(
            f"CI: {_skipped(config)} test(s) skipped (reasons above): on CI's machine every "
            "test must run, so this run fails."
        )


@pytest.fixture(scope="session")
def prometheus():  # type: ignore[no-untyped-def]
    """One real Prometheus for the session, with every target of
    tests/support/prometheus_server.SESSION_PLAN declared (their body servers start in the
    tests)."""
    from tests.support.prometheus_server import session_prometheus

    server = session_prometheus()
    yield server
    server.stop()
