"""Clients that never finish their request: each connection sends a request line and one header,
then a further header line every `drip_s`, never the blank line that ends it. A connection the
server closes is opened again at once, so `count` are always pending (the idle-connection
attack on an exporter). Runs in a thread of its own; raises this process' descriptor limit to
its hard limit, so the clients are never the side that runs out.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import resource
import selectors
import socket
import threading
import time
from pathlib import Path

START = b"GET /metrics HTTP/1.1\r\nHost: kvtop\r\n"
DRIP = b"X-Wait: 1\r\n"


def raise_fd_limit(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))


class SlowClients:
    def __init__(self, host: str, port: int, count: int, drip_s: float = 1.0) -> None:
        raise_fd_limit(count + 256)
        self.address = (host, port)
        self.count = count
        self.drip_s = drip_s
        self.opened = 0  # connections opened, reopenings included
        self.closed_by_server = 0
        self.pending_at_end = 0
        self._stop = threading.Event()
        self._selector = selectors.DefaultSelector()
        self._socks: set[socket.socket] = set()
        self._thread = threading.Thread(target=self._run, name="slow-clients", daemon=True)

    def __enter__(self) -> SlowClients:
        for _ in range(self.count):
            self._open()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.pending_at_end = len(self._socks)  # read once the thread is still
        for sock in list(self._socks):
            self._drop(sock)
        self._selector.close()

    def pending(self) -> int:
        return len(self._socks)

    def _open(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            sock.connect(self.address)
        self._socks.add(sock)
        self._selector.register(sock, selectors.EVENT_WRITE, "connecting")
        self.opened += 1

    def _drop(self, sock: socket.socket) -> None:
        self._socks.discard(sock)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(sock)
        sock.close()

    def _run(self) -> None:
        next_drip = time.monotonic() + self.drip_s
        while not self._stop.is_set():
            for key, _events in self._selector.select(0.1):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if key.data == "connecting":
                    try:
                        sock.send(START)
                        self._selector.modify(sock, selectors.EVENT_READ, "waiting")
                    except OSError:
                        self._drop(sock)
                        self._open()
                    continue
                try:
                    data = sock.recv(4096)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data or data.startswith(b"HTTP/"):  # answered or closed: reopen
                    self.closed_by_server += 1
                    self._drop(sock)
                    self._open()
            if time.monotonic() >= next_drip:
                next_drip = time.monotonic() + self.drip_s
                for sock in list(self._socks):
                    try:
                        sock.send(DRIP)
                    except BlockingIOError:
                        pass
                    except OSError:
                        self._drop(sock)
                        self._open()


class SlowClientsProcess:
    """SlowClients in a process of their own: the flood's bookkeeping must not hold the GIL of
    the process that scrapes (a scrape starved of its GIL would be the test's own delay)."""

    def __init__(self, host: str, port: int, count: int, drip_s: float = 1.0) -> None:
        self._args = (host, port, count, drip_s)
        self.opened = 0
        self.pending_at_end = 0

    def __enter__(self) -> SlowClientsProcess:
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._ready = context.Event()
        self._parent, child = context.Pipe()
        self._process = context.Process(
            target=_flood, args=(*self._args, self._stop, self._ready, child), daemon=True
        )
        self._process.start()
        assert self._ready.wait(60), "the slow clients never connected"
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._parent.poll(30):
            self.opened, self.pending_at_end = self._parent.recv()
        self._process.join(timeout=10)
        if self._process.is_alive():
            self._process.kill()


def _flood(host, port, count, drip_s, stop, ready, pipe) -> None:  # type: ignore[no-untyped-def]
    with SlowClients(host, port, count, drip_s) as clients:
        ready.set()
        stop.wait()
    pipe.send((clients.opened, clients.pending_at_end))


def process_figures(pid: int) -> dict[str, float]:
    """RSS (MiB), threads and open descriptors of `pid`, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    fields = dict(line.split(":", 1) for line in status if ":" in line)
    return {
        "rss_mib": int(fields["VmRSS"].split()[0]) / 1024,
        "threads": int(fields["Threads"]),
        "fds": len(list(Path(f"/proc/{pid}/fd").iterdir())),
    }
