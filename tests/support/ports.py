"""Loopback addresses where nothing answers, for tests that must reach no server.

A fixed port (SGLang's 30000, Prometheus's 9090, the discard port 9) is closed only on an idle
machine: whatever listens there elsewhere would answer a test. `refused_url()` binds a port of
the system's choosing and never listens on it, so a connection is refused, and holds it while
the test runs, so nothing else on the machine can take it meanwhile.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def refused_url() -> Iterator[str]:
    """`http://127.0.0.1:PORT` with PORT bound by this process and never listening."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
