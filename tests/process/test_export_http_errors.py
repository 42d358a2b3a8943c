"""An error the exporter's HTTP server did not expect (tui/kvtop/export/http.py), on real loopback
sockets: one sentence on stderr (once for each kind, never a traceback), that connection closed,
and the serving goes on."""

from __future__ import annotations

import io
import socket
import time

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily

from kvtop.export import http


class One:
    def collect(self) -> list[GaugeMetricFamily]:
        return [GaugeMetricFamily("kvtop_one", "a test gauge", value=1)]


def closed_without_answer(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        return sock.recv(4096)  # b"" once the server closes it; a timeout if it never does


def test_an_unexpected_error_is_one_sentence_and_the_serving_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry = CollectorRegistry()
    registry.register(One())
    err = io.StringIO()
    server = http.MetricsHttpServer("127.0.0.1", 0, registry, err=err)
    try:

        def broken(data: bytes) -> object:
            raise ValueError("a bug in the parser")

        monkeypatch.setattr(http, "parse_request", broken)
        assert closed_without_answer(server.port) == b""
        assert closed_without_answer(server.port) == b""
        monkeypatch.undo()
        answer = httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=5)
        assert answer.status_code == 200 and "kvtop_one 1.0" in answer.text
    finally:
        server.close()
    said = err.getvalue().splitlines()
    assert said == [
        "kvtop: the HTTP server closed a connection after an unexpected error (ValueError: a bug "
        "in the parser); it goes on serving. If it repeats, report it with the command you ran."
    ]


def test_a_turn_that_fails_is_said_and_the_next_one_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = CollectorRegistry()
    registry.register(One())
    err = io.StringIO()
    server = http.MetricsHttpServer("127.0.0.1", 0, registry, err=err)
    try:
        calls = []

        def expire_once(now: float) -> None:
            calls.append(now)
            if len(calls) == 1:
                raise RuntimeError("a bug in a turn")

        monkeypatch.setattr(server, "_expire", expire_once)
        deadline = time.monotonic() + 5
        while len(calls) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        answer = httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=5)
        assert answer.status_code == 200
    finally:
        server.close()
    assert err.getvalue() == (
        "kvtop: the HTTP server passed over a turn of its reading thread after an unexpected "
        "error (RuntimeError: a bug in a turn); it goes on serving. If it repeats, report it "
        "with the command you ran.\n"
    )
