"""The exporter's HTTP server (tui/kvtop/export/http.py) on real loopback sockets: the deadline for a
request, the cap on handlers, the listen backlog, the paths and methods it serves."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily

from kvtop.export.http import BACKLOG, MetricsHttpServer


class Gate:
    """A collector that waits on an event before it answers: a handler kept busy."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.entered = threading.Semaphore(0)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        self.entered.release()
        self.open.wait(10)
        yield GaugeMetricFamily("kvtop_gate", "a test gauge", value=1)


def registry_with(collector: object | None = None) -> CollectorRegistry:
    registry = CollectorRegistry()
    if collector is None:
        collector = Gate()
        collector.open.set()
    registry.register(collector)  # type: ignore[arg-type]
    return registry


@pytest.fixture
def server() -> Iterator[MetricsHttpServer]:
    httpd = MetricsHttpServer("127.0.0.1", 0, registry_with(), request_deadline_s=0.5)
    yield httpd
    httpd.close()


def raw(port: int, data: bytes, timeout: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def test_an_unfinished_request_is_closed_at_its_deadline(server: MetricsHttpServer) -> None:
    started = time.monotonic()
    answer = raw(server.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert 0.4 <= time.monotonic() - started < 3.0


def test_a_dripping_request_is_closed_at_its_deadline_too(server: MetricsHttpServer) -> None:
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\n")
        answer = b""
        for _ in range(40):
            try:
                sock.sendall(b"X: 1\r\n")
            except OSError:
                break
            time.sleep(0.1)
            sock.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                answer += sock.recv(4096)
            sock.setblocking(True)
            if answer:
                break
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert time.monotonic() - started < 2.0


def test_past_the_handler_cap_the_answer_is_503() -> None:
    gate = Gate()
    httpd = MetricsHttpServer("127.0.0.1", 0, registry_with(gate), max_handlers=1)
    try:
        url = f"http://127.0.0.1:{httpd.port}/metrics"
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(httpx.get, url, timeout=10)
            assert gate.entered.acquire(timeout=5)  # the one handler is busy
            second = httpx.get(url, timeout=5)
            assert second.status_code == 503 and second.headers["retry-after"] == "1"
            gate.open.set()
            assert first.result().status_code == 200
        assert httpx.get(url, timeout=5).status_code == 200  # the handler is free again
    finally:
        gate.open.set()
        httpd.close()


def test_the_listen_backlog_is_the_systems(server: MetricsHttpServer) -> None:
    listening = subprocess.run(
        ["ss", "-Hltn", f"sport = :{server.port}"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert int(listening[2]) == BACKLOG >= 128  # Send-Q of a listening socket: its backlog
    # 200 scrapes at once: every one is answered (200, or 503 past the handler cap), none hangs
    # in a full backlog waiting for SYN retries.
    socks = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(200)]
    try:
        for sock in socks:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        heads = [sock.recv(12) for sock in socks]
    finally:
        for sock in socks:
            sock.close()
    assert all(h in (b"HTTP/1.1 200", b"HTTP/1.1 503") for h in heads), heads


@pytest.mark.parametrize(
    ("request_line", "status"),
    [
        (b"GET /metrics HTTP/1.1", 200),
        (b"GET /metrics?name[]=kvtop_gate HTTP/1.1", 200),
        (b"GET / HTTP/1.1", 200),
        (b"GET /../../etc/passwd HTTP/1.1", 404),
        (b"GET /metricsx HTTP/1.1", 404),
        (b"POST /metrics HTTP/1.1", 405),
        (b"GET /metrics HTTP/2.0", 505),
        (b"GARBAGE", 400),
    ],
)
def test_paths_and_methods(server: MetricsHttpServer, request_line: bytes, status: int) -> None:
    answer = raw(server.port, request_line + b"\r\nHost: x\r\n\r\n")
    assert answer.startswith(f"HTTP/1.1 {status} ".encode()), answer


def test_head_is_get_without_a_body(server: MetricsHttpServer) -> None:
    get = httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=5)
    head = httpx.head(f"http://127.0.0.1:{server.port}/metrics", timeout=5)
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == get.headers["content-length"]
    assert head.headers["content-type"] == get.headers["content-type"]
    root = httpx.get(f"http://127.0.0.1:{server.port}/", timeout=5)
    assert "/metrics" in root.text and "kvtop_gate" not in root.text


def test_headers_too_large_are_refused(server: MetricsHttpServer) -> None:
    answer = raw(server.port, b"GET /metrics HTTP/1.1\r\n" + b"X: " + b"a" * 20000)
    assert answer.startswith(b"HTTP/1.1 431 "), answer
