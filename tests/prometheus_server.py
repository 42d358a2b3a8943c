"""One real Prometheus (Debian's 2.42, /usr/bin/prometheus) on loopback, for a test session or
a benchmark.

Prometheus batches target discovery every 5 s (no flag in 2.42), so one server per session with
every target port declared up front: a target whose body server is not running yet is just
`down`, and tests start and stop the body servers (tests/fleet_bodies.py). Each target gets its
`host` label by relabeling its address (one rule per simulated host, as production maps
addresses to hosts), and target-group labels (e.g. `cluster`) from static_configs.

Started with `--web.listen-address=127.0.0.1:0`; the port is parsed from its log ("Listening
on"). Ready when `/-/ready` answers 200; a test then waits (`wait_query`) for exactly the state
it asserts. Stopped with terminate() + wait().
"""

from __future__ import annotations

import re
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

PROMETHEUS = "/usr/bin/prometheus"
_LISTENING = re.compile(r'msg="Listening on" address=([\d.]+:\d+)')


@dataclass(frozen=True)
class Target:
    job: str
    host: str
    port: int
    labels: tuple[tuple[str, str], ...] = ()  # extra target labels (e.g. cluster="eu")


def free_ports(count: int) -> list[int]:
    """Ports nothing listens on now (bound to 0, then released), all distinct."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def config_yaml(targets: Iterable[Target], interval_s: int = 1) -> str:
    """The scrape config: one job per exporter kind, one static group per label set, and one
    relabel rule per host mapping its ports to `host` (production: `([^:]+)(?::\\d+)?`)."""
    by_job: dict[str, list[Target]] = {}
    for t in targets:
        by_job.setdefault(t.job, []).append(t)
    lines = [
        "global:",
        f"  scrape_interval: {interval_s}s",
        f"  scrape_timeout: {interval_s}s",
        f"  evaluation_interval: {interval_s}s",
        "scrape_configs:",
    ]
    for job, members in by_job.items():
        lines += [f"  - job_name: {job}", "    static_configs:"]
        groups: dict[tuple, list[Target]] = {}
        for t in members:
            groups.setdefault(t.labels, []).append(t)
        for labels, group in groups.items():
            addresses = ", ".join(f"'127.0.0.1:{t.port}'" for t in group)
            lines.append(f"      - targets: [{addresses}]")
            if labels:
                pairs = ", ".join(f"{k}: '{v}'" for k, v in labels)
                lines.append(f"        labels: {{{pairs}}}")
        lines.append("    relabel_configs:")
        hosts: dict[str, list[int]] = {}
        for t in members:
            hosts.setdefault(t.host, []).append(t.port)
        for host, ports in hosts.items():
            alternatives = "|".join(str(p) for p in ports)
            lines += [
                "      - source_labels: [__address__]",
                f"        regex: '127\\.0\\.0\\.1:({alternatives})'",
                "        target_label: host",
                f"        replacement: '{host}'",
            ]
    return "\n".join(lines) + "\n"


@dataclass
class PrometheusServer:
    targets: tuple[Target, ...]
    interval_s: int = 1
    url: str = ""
    process: subprocess.Popen | None = None
    _dir: tempfile.TemporaryDirectory | None = None
    _log: Path | None = None
    _http: httpx.Client = field(default_factory=lambda: httpx.Client(timeout=5.0, trust_env=False))

    def start(self, deadline_s: float = 30.0) -> PrometheusServer:
        self._dir = tempfile.TemporaryDirectory(prefix="kvtop-prom-")
        root = Path(self._dir.name)
        config = root / "prometheus.yml"
        config.write_text(config_yaml(self.targets, self.interval_s), encoding="utf-8")
        self._log = root / "prometheus.log"
        with self._log.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={root / 'data'}",
                    "--web.listen-address=127.0.0.1:0",
                    "--web.enable-lifecycle",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        address = self._wait(self._listening, deadline_s, "Prometheus to log its address")
        self.url = f"http://{address}"
        self._wait(self._ready, deadline_s, "Prometheus' /-/ready")
        return self

    def _listening(self) -> str | None:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"Prometheus exited ({self.process.returncode}):\n{self.log()}")
        found = _LISTENING.search(self.log())
        return found.group(1) if found else None

    def _ready(self) -> bool:
        try:
            return self._http.get(self.url + "/-/ready").status_code == 200
        except httpx.HTTPError:
            return False

    def log(self) -> str:
        return self._log.read_text(encoding="utf-8", errors="replace") if self._log else ""

    def _wait(self, probe: Callable, deadline_s: float, what: str):
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            got = probe()
            if got:
                return got
            time.sleep(0.05)
        raise TimeoutError(f"waited {deadline_s:g} s for {what}; log:\n{self.log()[-3000:]}")

    def query(self, promql: str) -> list[dict]:
        body = self._http.get(self.url + "/api/v1/query", params={"query": promql}).json()
        assert body["status"] == "success", body
        return body["data"]["result"]

    def wait_query(
        self, promql: str, predicate: Callable[[list[dict]], bool], what: str, deadline_s=30.0
    ) -> list[dict]:
        """Poll an instant query until `predicate(result)`; a clear failure after the deadline."""
        end = time.monotonic() + deadline_s
        result: list[dict] = []
        while time.monotonic() < end:
            result = self.query(promql)
            if predicate(result):
                return result
            time.sleep(0.1)
        raise AssertionError(f"after {deadline_s:g} s, {promql!r} gave {result!r}: wanted {what}")

    def wait_up(self, ports: Iterable[int], up: int = 1, deadline_s: float = 30.0) -> None:
        """Wait until every target on `ports` has up == `up`."""
        wanted = {f"127.0.0.1:{p}" for p in ports}

        def done(result: list[dict]) -> bool:
            seen = {r["metric"]["instance"] for r in result if r["value"][1] == str(up)}
            return wanted <= seen

        self.wait_query("up", done, f"up == {up} on {sorted(wanted)}", deadline_s)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None
        self._http.close()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None
