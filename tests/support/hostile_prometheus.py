"""A loopback server that answers Prometheus' API paths the way a hostile or broken one might:
each path's answer is (status, headers, body) or a callable that writes the answer itself
(dripping, compressed, endless). Real HTTP, real sockets; `answers` can be swapped mid-test.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

Writer = Callable[[BaseHTTPRequestHandler], None]
Answer = "tuple[int, dict[str, str], bytes] | Writer"

BUILDINFO = {"status": "success", "data": {"version": "2.42.0"}}
TARGETS: dict[str, Any] = {"status": "success", "data": {"activeTargets": []}}


def vector(*samples: tuple[Mapping[str, object], object]) -> dict[str, Any]:
    """An instant query's success envelope with these (labels, value) samples."""
    result = [{"metric": dict(labels), "value": [1700000000.0, value]} for labels, value in samples]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def as_json(body: object, status: int = 200) -> tuple[int, dict[str, str], bytes]:
    return status, {"Content-Type": "application/json"}, json.dumps(body).encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # A listen backlog like a real server's (Prometheus' is the system's), not socketserver's 5:
    # the fleet reader opens seven connections at once, and a SYN past a backlog of 5 is
    # dropped and sent again a second later.
    request_queue_size = 128


class HostilePrometheus:
    """`answers[path]` answers that path; `query(promql)` (when set) answers /api/v1/query by
    its query, before answers["/api/v1/query"]."""

    def __init__(self) -> None:
        self.answers: dict[str, object] = {
            "/api/v1/status/buildinfo": as_json(BUILDINFO),
            "/api/v1/targets": as_json(TARGETS),
            "/api/v1/query": as_json(vector()),
            "/api/v1/query_range": as_json(
                {"status": "success", "data": {"resultType": "matrix", "result": []}}
            ),
        }
        self.query: Callable[[str], object | None] | None = None
        self.requests = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                owner.requests += 1
                parts = urlsplit(self.path)
                answer = owner.answers.get(parts.path)
                if owner.query is not None and parts.path == "/api/v1/query":
                    promql = parse_qs(parts.query).get("query", [""])[0]
                    answer = owner.query(promql) or answer
                if answer is None:
                    answer = (404, {}, b"not found")
                if callable(answer):
                    answer(self)
                    return
                status, headers, body = answer  # type: ignore[misc]
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(OSError):
                    self.wfile.write(body)

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def __enter__(self) -> HostilePrometheus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
