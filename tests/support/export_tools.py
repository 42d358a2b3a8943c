"""Helpers for the `kvtop --export` tests and bench/bench_export.py: an exposition body read
back by prometheus_client's own parser, promtool's lint, and the real `kvtop --export` process
started on a port of the system's choosing (port 0; kvtop prints the one it got on stderr).
"""

from __future__ import annotations

import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
KVTOP = Path(sys.executable).with_name("kvtop")
SERVING = re.compile(r"^kvtop: serving Prometheus metrics on (http://\S+/metrics) ")
# The Accept header Prometheus 2.42 scrapes with, as seen on the wire.
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"

Key = tuple[str, frozenset[tuple[str, str]]]


def samples(body: str) -> dict[Key, float]:
    """(sample name, its labels) -> value, as prometheus_client's parser reads the text format.
    A series twice in one body fails (Prometheus would keep one silently)."""
    found: dict[Key, float] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in found, f"duplicate series {key}"
            found[key] = sample.value
    return found


def of(found: Mapping[Key, float], name: str, **labels: str) -> dict[frozenset, float]:
    """The samples of one name whose labels include `labels`: labels -> value."""
    want = set(labels.items())
    return {lab: v for (n, lab), v in found.items() if n == name and want <= lab}


def one(found: Mapping[Key, float], name: str, **labels: str) -> float:
    match = of(found, name, **labels)
    assert len(match) == 1, (name, labels, match)
    return next(iter(match.values()))


def promtool_check(body: str) -> subprocess.CompletedProcess[str]:
    """`promtool check metrics` over the body (rc 0 and no output: clean)."""
    return subprocess.run(
        [PROMTOOL, "check", "metrics"], input=body, capture_output=True, text=True, timeout=30
    )


def fake_nvml_env(lib_dir: Path, state: Path) -> dict[str, str]:
    from tests.support.fake_nvml import STATE_ENV

    return {"LD_LIBRARY_PATH": str(lib_dir), STATE_ENV: str(state)}


def read_line(stream, pattern: re.Pattern[str], deadline: float) -> tuple[re.Match[str], str]:  # type: ignore[no-untyped-def]
    """The first line of `stream` (a pipe) that matches, and everything read up to it."""
    seen = ""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([stream], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        line = stream.readline()
        if not line:
            break  # the process ended
        seen += line
        match = pattern.match(line)
        if match:
            return match, seen
    raise AssertionError(f"no line matching {pattern.pattern!r} in time; stderr so far:\n{seen}")


class Exporter:
    """A running `kvtop --export`: its process, the /metrics URL it printed, its stderr."""

    def __init__(self, proc: subprocess.Popen[str], url: str, stderr: str) -> None:
        self.proc, self.url, self.stderr = proc, url, stderr

    def scrape(self, headers: Mapping[str, str] | None = None) -> httpx.Response:
        return httpx.get(self.url, headers=dict(headers or {}), timeout=10)

    def scrape_until(
        self, what: str, predicate: Callable[[dict[Key, float]], bool], timeout_s: float = 20
    ) -> tuple[str, dict[Key, float]]:
        """Scrape until the parsed body satisfies `predicate` (what: said on failure)."""
        deadline = time.monotonic() + timeout_s
        body = ""
        while time.monotonic() < deadline:
            body = self.scrape().text
            found = samples(body)
            if predicate(found):
                return body, found
            time.sleep(0.05)
        raise AssertionError(f"never saw {what}; last body:\n{body}")

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 20) -> tuple[int, str]:
        """Send `sig`, wait for the exit: (exit status, the rest of stderr)."""
        self.proc.send_signal(sig)
        _, rest = self.proc.communicate(timeout=timeout_s)
        return self.proc.returncode, rest


def kvtop_command(*args: str) -> list[str]:
    assert KVTOP.exists(), f"no kvtop console script next to {sys.executable}"
    return [str(KVTOP), *args]


@contextmanager
def exporter(
    *args: str,
    env: Mapping[str, str] | None = None,
    command: list[str] | None = None,
    timeout_s: float = 30,
) -> Iterator[Exporter]:
    """`kvtop --export 127.0.0.1:0 ARGS` (or `command`) until it says where it serves; killed
    at the end if the test did not stop it."""
    argv = command or kvtop_command("--export", "127.0.0.1:0", *args)
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=ROOT,
    )
    try:
        match, seen = read_line(proc.stderr, SERVING, time.monotonic() + timeout_s)
        yield Exporter(proc, match.group(1), seen)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)
