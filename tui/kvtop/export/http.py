"""The exporter's HTTP server: one thread reads requests for every connection (non-blocking,
with a deadline), a few handler threads render and write the answers
(tui/kvtop/export/answers.py says what they are).

Bounded by construction, so idle or slow clients cannot exhaust the process:
- a connection must send its whole request (line and headers, at most MAX_REQUEST_BYTES) within
  REQUEST_DEADLINE_S of being accepted, else it is answered 408 and closed; waiting costs no
  thread, only a buffer;
- at most MAX_WAITING connections wait for their request; past it the oldest is closed, so the
  open descriptors stay far below systemd's default soft limit of 1,024 and a new scrape always
  gets in;
- at most MAX_HANDLERS requests are rendered and written at once; past it the answer is 503
  with Retry-After, written at once by the reading thread;
- an answer must be written within WRITE_DEADLINE_S;
- the listen backlog is the system's (SOMAXCONN), not socketserver's 5.

Written here rather than taken from prometheus_client (whose rendering it still uses:
choose_encoder): its threaded server keeps a thread per connection for as long as the client
holds it, listens with a backlog of 5 and reads a request without a deadline. Measured under
1,100 connections that never finish their request: 221 threads within 15 s, and at systemd's
1,024-descriptor limit the exporter died of EMFILE; this server kept 4 threads and answered
every scrape within 0.10 s for a minute (bench/bench_export_idle.py, docs/exporter.md).

A selector loop rather than asyncio, measured under the same flood (docs/exporter.md):
asyncio.start_server accepts a whole backlog before reading any of it, so making room evicts
connections whose request it has not yet read (every scrape answered 503) and the descriptors
reach the 1,024 limit; a coroutine for each waiting connection over the loop's own sockets held
the descriptors but accepted half as many connections, and a scrape waited past its bound.
"""

from __future__ import annotations

import contextlib
import errno
import selectors
import socket
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TextIO

from prometheus_client import CollectorRegistry

from kvtop.export.answers import Request, answer, parse_request, plain

REQUEST_DEADLINE_S = 10.0
WRITE_DEADLINE_S = 10.0
MAX_HANDLERS = 8
MAX_WAITING = 256
MAX_REQUEST_BYTES = 16 * 1024
BACKLOG = socket.SOMAXCONN
# How long accepting pauses when the process is out of descriptors (EMFILE/ENFILE).
ACCEPT_PAUSE_S = 0.1
_TICK_S = 0.25
# How many of the oldest waiting connections are looked at for one that stopped mid-request.
_EVICTION_SCAN = 32


class _Waiting:
    __slots__ = ("data", "deadline", "sock")

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.data = bytearray()


def _send_now(sock: socket.socket, data: bytes) -> None:
    """A short answer written without waiting (it fits a fresh socket's buffer), then closed."""
    with contextlib.suppress(OSError):
        sock.setblocking(False)
        sock.send(data)
    _close(sock)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


class MetricsHttpServer:
    """Serves `registry` on `host`:`port` (0: any free port) until close(). An error the server
    did not expect is one sentence on `err` (once for each kind), and the serving goes on."""

    def __init__(
        self,
        host: str,
        port: int,
        registry: CollectorRegistry,
        *,
        request_deadline_s: float = REQUEST_DEADLINE_S,
        max_handlers: int = MAX_HANDLERS,
        max_waiting: int = MAX_WAITING,
        clock: Callable[[], float] = time.monotonic,
        err: TextIO | None = None,
    ) -> None:
        self.registry = registry
        self.request_deadline_s = request_deadline_s
        self.max_handlers = max_handlers
        self.max_waiting = max_waiting
        self._clock = clock
        self._err = err
        self._reported: set[str] = set()
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                with contextlib.suppress(OSError):
                    self._listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            self._listener.bind((host, port))
            self._listener.listen(BACKLOG)
            self._listener.setblocking(False)
        except OSError:
            self._listener.close()
            raise
        self.server_address = self._listener.getsockname()
        self._waiting: OrderedDict[int, _Waiting] = OrderedDict()  # by fd, oldest first
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._busy = 0
        self._busy_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_handlers, thread_name_prefix="kvtop-http")
        self._stopping = False
        self._accept_paused_until = 0.0
        self.thread = threading.Thread(target=self._loop, name="kvtop-http-read", daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def close(self) -> None:
        self._stopping = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self.thread.join(timeout=5)
        self._pool.shutdown(wait=False, cancel_futures=True)
        for waiting in list(self._waiting.values()):
            _close(waiting.sock)
        self._waiting.clear()
        self._selector.close()
        for sock in (self._listener, self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                sock.close()

    def _unexpected(self, what: str, exc: Exception) -> None:
        """Say an error once for each kind: a journal line, never a flood or a traceback."""
        kind = type(exc).__name__
        if kind in self._reported:
            return
        self._reported.add(kind)
        detail = f"{kind}: {exc}" if str(exc) else kind
        with contextlib.suppress(ValueError, OSError):  # stderr closed: nowhere to say it
            print(
                f"kvtop: the HTTP server {what} after an unexpected error ({detail}); it goes "
                "on serving. If it repeats, report it with the command you ran.",
                file=self._err or sys.stderr,
                flush=True,
            )

    # -- the reading thread -----------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stopping:
            try:
                self._turn()
            except Exception as exc:  # one bad turn must not stop the serving for good
                self._unexpected("passed over a turn of its reading thread", exc)
                time.sleep(_TICK_S)

    def _turn(self) -> None:
        now = self._clock()
        self._expire(now)
        timeout = _TICK_S
        if self._accept_paused_until:
            timeout = min(timeout, max(0.0, self._accept_paused_until - now))
        if self._waiting:
            first = next(iter(self._waiting.values()))
            timeout = max(0.0, min(timeout, first.deadline - now))
        if self._accept_paused_until and now >= self._accept_paused_until:
            self._accept_paused_until = 0.0
            with contextlib.suppress(KeyError, ValueError, OSError):
                self._selector.register(self._listener, selectors.EVENT_READ)
        for key, _ in self._selector.select(timeout):
            sock = key.fileobj
            if sock is self._wake_r:
                with contextlib.suppress(OSError):
                    self._wake_r.recv(64)
            elif sock is self._listener:
                self._accept()
            else:
                assert isinstance(sock, socket.socket)
                try:
                    self._read(sock)
                except Exception as exc:  # that connection's bug closes that connection
                    self._unexpected("closed a connection", exc)
                    waiting = self._waiting.get(sock.fileno())
                    if waiting is not None and waiting.sock is sock:
                        self._finish_waiting(waiting)
                    self._forget(sock)
                    _close(sock)

    def _accept(self) -> None:
        for _ in range(64):  # a burst at a time, then the others get their turn
            try:
                sock, _addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # Out of descriptors: free the oldest waiting one and pause accepting,
                    # rather than spin on a listener that stays readable.
                    self._drop_oldest()
                    self._accept_paused_until = self._clock() + ACCEPT_PAUSE_S
                    self._forget(self._listener)
                return
            sock.setblocking(False)
            if len(self._waiting) >= self.max_waiting:
                self._drop_oldest()
            self._waiting[sock.fileno()] = _Waiting(sock, self._clock() + self.request_deadline_s)
            try:
                self._selector.register(sock, selectors.EVENT_READ)
            except (OSError, ValueError):
                self._waiting.pop(sock.fileno(), None)
                _close(sock)

    def _drop_oldest(self) -> None:
        """Close one connection waiting for its request to make room: among the oldest, the
        first that sent part of a request and stopped (what an idle-connection flood does),
        else the oldest. A connection whose request has arrived meanwhile (not yet read) is
        served instead, and one that has sent nothing yet (a scrape whose request is still on
        its way) is passed over while a partial one is there to close."""
        for waiting in list(self._waiting.values())[:_EVICTION_SCAN]:
            self._read(waiting.sock)  # a request that arrived is served, not dropped
            if self._waiting.get(waiting.sock.fileno()) is waiting and waiting.data:
                self._evict(waiting)
                return
        while self._waiting:
            waiting = next(iter(self._waiting.values()))
            self._read(waiting.sock)
            if self._waiting.get(waiting.sock.fileno()) is waiting:
                self._evict(waiting)
                return

    def _evict(self, waiting: _Waiting) -> None:
        self._finish_waiting(waiting)
        _send_now(waiting.sock, plain(503, "Too many connections waiting; try again."))

    def _forget(self, sock: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(sock)

    def _expire(self, now: float) -> None:
        while self._waiting:
            fd, waiting = next(iter(self._waiting.items()))
            if waiting.deadline > now:
                return
            del self._waiting[fd]
            self._forget(waiting.sock)
            sentence = f"The request did not arrive within {self.request_deadline_s:g} s."
            _send_now(waiting.sock, plain(408, sentence))

    def _read(self, sock: socket.socket) -> None:
        waiting = self._waiting.get(sock.fileno())
        if waiting is None or waiting.sock is not sock:
            self._forget(sock)
            _close(sock)
            return
        try:
            chunk = sock.recv(MAX_REQUEST_BYTES + 1)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:  # the client went away
            self._finish_waiting(waiting)
            _close(sock)
            return
        waiting.data += chunk
        data = bytes(waiting.data)
        complete = b"\r\n\r\n" in data or b"\n\n" in data
        if not complete and len(data) <= MAX_REQUEST_BYTES:
            return
        self._finish_waiting(waiting)
        if not complete:
            _send_now(sock, plain(431, "The request's headers are too large."))
            return
        parsed = parse_request(data)
        if isinstance(parsed, bytes):
            _send_now(sock, parsed)
            return
        with self._busy_lock:
            full = self._busy >= self.max_handlers
            if not full:
                self._busy += 1
        if full:
            _send_now(
                sock,
                plain(503, "Busy answering other scrapes; try again.", [("Retry-After", "1")]),
            )
            return
        try:
            self._pool.submit(self._handle, sock, parsed)
        except RuntimeError:  # shutting down
            with self._busy_lock:
                self._busy -= 1
            _close(sock)

    def _finish_waiting(self, waiting: _Waiting) -> None:
        self._waiting.pop(waiting.sock.fileno(), None)
        self._forget(waiting.sock)

    # -- the handler threads ----------------------------------------------------------------------
    def _handle(self, sock: socket.socket, request: Request) -> None:
        try:
            try:
                data = answer(request, self.registry)
            except Exception as exc:  # a collector's bug is one answer, not a dead server
                data = plain(500, f"kvtop could not render the metrics ({type(exc).__name__}).")
            with contextlib.suppress(OSError):
                sock.setblocking(True)
                sock.settimeout(WRITE_DEADLINE_S)  # the whole sendall, not each send
                sock.sendall(data)
        except Exception as exc:  # the pool would keep it in a future no one reads
            self._unexpected("closed a connection", exc)
        finally:
            _close(sock)
            with self._busy_lock:
                self._busy -= 1
