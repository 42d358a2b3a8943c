"""One real Prometheus (Debian's 2.42, /usr/bin/prometheus) on loopback, for a test session or
a benchmark.

Prometheus batches target discovery every 5 s (no flag in 2.42), so one server per session with
every target port declared up front: a target whose body server is not running yet is just
`down`, and tests start and stop the body servers (tests/support/fleet_bodies.py). Each target gets
its `host` label by relabeling its address (one rule per simulated host, as production maps
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


def reserve_ports(count: int) -> dict[int, socket.socket]:
    """Ports bound (not listening: a connection is refused) and kept until a body server takes
    its socket, so nothing else in the session (a test's own server on port 0, a client's
    ephemeral port) can be given the same port while Prometheus scrapes it."""
    sockets = {}
    for _ in range(count):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        sockets[s.getsockname()[1]] = s
    return sockets


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


# --- the test session's Prometheus -----------------------------------------------------------

# Every target the tests use, declared before Prometheus starts: (job, host, target labels).
# Ports are picked when the session's Prometheus starts; tests serve bodies on them.
SESSION_PLAN: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = (
    # one host with all four exporters; only its node target carries cluster="eu"
    ("kvtop", "solo-01", ()),
    ("dcgm", "solo-01", ()),
    ("sglang", "solo-01", ()),
    ("node", "solo-01", (("cluster", "eu"),)),
    # a host without kvtop: DCGM (main's `hostname` spelling), SGLang and node only
    ("dcgm", "plain-02", ()),
    ("sglang", "plain-02", ()),
    ("node", "plain-02", ()),
    # a two-node deployment: SGLang only on node 0 (0.5.23 returns early on node_rank >= 1)
    ("kvtop", "pair-n0", ()),
    ("dcgm", "pair-n0", ()),
    ("sglang", "pair-n0", ()),
    ("node", "pair-n0", ()),
    ("kvtop", "pair-n1", ()),
    ("dcgm", "pair-n1", ()),
    ("node", "pair-n1", ()),
    # a host whose kvtop exporter never answers (its DCGM does)
    ("kvtop", "down-04", ()),
    ("dcgm", "down-04", ()),
    # a host a test serves and then stops ("last seen")
    ("kvtop", "gone-05", ()),
    # the real exporter's body for a real Session's snapshot (tests/e2e/test_fleet_export.py)
    ("kvtop", "real-06", ()),
    ("sglang", "real-06", ()),
    # real `kvtop --export` processes, one per host (tests/e2e/test_fleet_end_to_end.py): a
    # two-node TP16 deployment (DCGM on both, SGLang and node on node 0) and a single host
    ("kvtop", "e2e-n0", ()),
    ("dcgm", "e2e-n0", ()),
    ("sglang", "e2e-n0", ()),
    ("node", "e2e-n0", ()),
    ("kvtop", "e2e-n1", ()),
    ("dcgm", "e2e-n1", ()),
    ("kvtop", "e2e-solo", ()),
    # a host whose KV usage history is read with query_range (tests/e2e/test_fleet_history.py)
    ("sglang", "hist-07", ()),
)


@dataclass
class SessionPrometheus(PrometheusServer):
    """The session's Prometheus with SESSION_PLAN's targets; port(job, host) finds a port and
    take(ports) hands over the sockets bound to them (for fleet_bodies.serve_bodies)."""

    reserved: dict[int, socket.socket] = field(default_factory=dict)

    def take(self, ports: Iterable[int]) -> dict[int, socket.socket]:
        taken = {}
        for port in ports:
            if port not in self.reserved:
                raise KeyError(f"port {port} was taken already (serve it without a socket)")
            taken[port] = self.reserved.pop(port)
        return taken

    def stop(self) -> None:
        super().stop()
        for s in self.reserved.values():
            s.close()
        self.reserved.clear()

    def port(self, job: str, host: str) -> int:
        for t in self.targets:
            if (t.job, t.host) == (job, host):
                return t.port
        raise KeyError(f"no {job} target for {host} in SESSION_PLAN")


def session_prometheus() -> SessionPrometheus:
    reserved = reserve_ports(len(SESSION_PLAN))
    targets = tuple(
        Target(job, host, port, labels)
        for (job, host, labels), port in zip(SESSION_PLAN, reserved, strict=True)
    )
    server = SessionPrometheus(targets, reserved=reserved)
    server.start()
    return server


# --- odd servers on loopback ------------------------------------------------------------------


class RecordingServer:
    """A loopback HTTP server that records each request's headers and answers with `answer`
    (status, content type, body), or forwards to `forward` (a real Prometheus, as an auth proxy
    in front of it would), or never answers (`hang=True`: a stuck server)."""

    def __init__(
        self,
        answer: tuple[int, str, bytes] = (200, "text/plain", b""),
        *,
        forward: str | None = None,
        hang: bool = False,
    ) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.headers: list[dict[str, str]] = []
        self._release = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def _any(self) -> None:
                owner.headers.append(dict(self.headers.items()))
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if hang:
                    owner._release.wait(60)
                    return
                if forward:
                    status, ctype, out = owner._forward(self.command, self.path, body)
                else:
                    status, ctype, out = answer
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = _any
            do_POST = _any

        self._forward_to = forward
        self._client = httpx.Client(timeout=10.0, trust_env=False)

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            request_queue_size = 128  # a real server's backlog, not socketserver's 5

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def _forward(self, method: str, path: str, body: bytes) -> tuple[int, str, bytes]:
        headers = {"Content-Type": "application/x-www-form-urlencoded"} if body else {}
        r = self._client.request(method, self._forward_to + path, content=body, headers=headers)
        return r.status_code, r.headers.get("content-type", "application/json"), r.content

    def close(self) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()
        self._client.close()
