"""The exporter's HTTP server: one thread reads requests for every connection (non-blocking,
with a deadline), a few handler threads render and write the answers.

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

Paths: /metrics (GET or HEAD, text 0.0.4 or OpenMetrics as Accept asks, gzip when asked,
`name[]` filters), / (a short page naming /metrics), anything else 404. Every connection is
closed after its one answer.

A request's own words are read leniently and never trusted: Accept and Accept-Encoding with their
q-values (an item or a weight that does not read is passed over, and the text format without
gzip always works: never a 500), versions and weights in ASCII digits only, a header sent twice
as one list; an answer quotes a request only in a short form with its control and non-ASCII
characters escaped (`shown`).
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import re
import selectors
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import parse_qs

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, choose_encoder, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

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
_ALLOW = "GET, HEAD, OPTIONS"
# How much of a request an answer may quote (the method of a 405), escapes included.
SHOWN_MAX = 32
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110's token
_MEDIA_RANGE = re.compile(r"(?:\*|[!#$%&'*+.^_`|~0-9a-z-]+)/(?:\*|[!#$%&'*+.^_`|~0-9a-z-]+)")
_QVALUE = re.compile(r"[0-9]{1,3}(?:\.[0-9]{0,6})?")  # ASCII: float() takes any script's digits
_VERSION = re.compile(r"[0-9]{1,6}\.[0-9]{1,6}\.[0-9]{1,6}")
# The versions prometheus_client's encoders write, by media type; another version asked for
# passes that item over (prometheus_client would claim it in Content-Type, or fail on a
# malformed one).
_OPENMETRICS_VERSIONS = ("", "1.0.0")
_TEXT_VERSIONS = ("", "0.0.4", "1.0.0")
_PAGE = (
    b"<html><head><title>kvtop exporter</title></head><body><h1>kvtop exporter</h1>"
    b'<p>Metrics are at <a href="/metrics">/metrics</a>.</p></body></html>\n'
)
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: str
    headers: dict[str, str]  # lower-case names


def response(
    status: int, body: bytes = b"", headers: list[tuple[str, str]] | None = None, *, head: bool
) -> bytes:
    """One HTTP/1.1 answer that closes the connection (HEAD: the headers of GET, no body)."""
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}"]
    lines += [f"{k}: {v}" for k, v in headers or ()]
    lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1") + (b"" if head else body)


def shown(text: str, limit: int = SHOWN_MAX) -> str:
    """`text` from a request as an answer may quote it: printable ASCII, every other character
    (and the backslash) escaped as \\xNN, at most `limit` characters, ending `...` when cut."""
    pieces = [c if " " <= c <= "~" and c != "\\" else f"\\x{ord(c) & 0xFF:02x}" for c in text]
    if sum(map(len, pieces)) <= limit:
        return "".join(pieces)
    out, size = [], 0
    for piece in pieces:
        if size + len(piece) > limit - 3:
            break
        out.append(piece)
        size += len(piece)
    return "".join(out) + "..."


def _plain(status: int, sentence: str, extra: list[tuple[str, str]] | None = None) -> bytes:
    body = f"{sentence}\n".encode()
    headers = [("Content-Type", "text/plain; charset=utf-8"), *(extra or [])]
    return response(status, body, headers, head=False)


def parse_request(data: bytes) -> Request | bytes:
    """The request in `data` (line and headers, up to the blank line), or the answer that
    refuses it."""
    head = data.split(b"\r\n\r\n", 1)[0].split(b"\n\n", 1)[0]
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # latin-1 decodes every byte; kept for clarity
        return _plain(400, "Bad request.")
    lines = text.replace("\r\n", "\n").split("\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return _plain(400, "Bad request line; ask GET /metrics HTTP/1.1.")
    method, target, version = parts
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        return _plain(505, "Only HTTP/1.0 and HTTP/1.1 are served.")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            return _plain(400, "Bad request header.")
        key, value = name.lower(), value.strip()
        # A header sent twice is one comma-separated list (RFC 9110), Accept-Encoding included.
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    path, _, query = target.partition("?")
    return Request(method, path, query, headers)


@dataclass(frozen=True, slots=True)
class _Item:
    """One item of an Accept or Accept-Encoding list."""

    value: str  # lower-case: "gzip", "*", "text/plain"
    params: dict[str, str]  # lower-case names, values unquoted; q taken out
    q: float


def _items(header: str) -> list[_Item]:
    """The items of an Accept or Accept-Encoding value, the most wanted first (equal weights in
    the client's order), q=0 ones included (they say "not this"). An item or a parameter that
    does not read is passed over, never an error: what follows still counts."""
    items: list[_Item] = []
    for part in header.split(","):
        value, *rest = part.split(";")
        params: dict[str, str] = {}
        for param in rest:
            name, sep, text = param.partition("=")
            name = name.strip().lower()
            if sep and _TOKEN.fullmatch(name):
                text = text.strip()
                if len(text) >= 2 and text[0] == text[-1] == '"':
                    text = text[1:-1]
                params.setdefault(name, text)
        weight = params.pop("q", "1")
        if not _QVALUE.fullmatch(weight):
            continue  # a weight that does not read: the item's meaning is unknown
        value = value.strip().lower()
        if value:
            items.append(_Item(value, params, min(1.0, float(weight))))
    items.sort(key=lambda item: -item.q)  # stable: equal weights keep the client's order
    return items


def choose_format(accept: str) -> tuple[Callable[[Collector], bytes], str]:
    """The encoder and Content-Type for an Accept header: OpenMetrics 1.0.0 or the text format
    (0.0.4, or 1.0.0 when asked by name), as prometheus_client's choose_encoder answers a
    well-formed header. An item with a version these encoders do not write, or one that does
    not read, is passed over; with none left, the text format 0.0.4 (what every Prometheus
    reads)."""
    for item in _items(accept):
        if item.q <= 0 or not _MEDIA_RANGE.fullmatch(item.value):
            continue
        version = item.params.get("version", "")
        if version and not _VERSION.fullmatch(version):
            continue
        if item.value == "application/openmetrics-text" and version in _OPENMETRICS_VERSIONS:
            return choose_encoder(_rebuilt(item))
        if item.value == "text/plain" and version in _TEXT_VERSIONS:
            return choose_encoder(_rebuilt(item))
        if item.value in ("text/*", "*/*"):
            break
    return generate_latest, CONTENT_TYPE_PLAIN_0_0_4


def _rebuilt(item: _Item) -> str:
    """The item as choose_encoder reads it: the parameters it knows, checked, nothing else."""
    params = [f"{k}={item.params[k]}" for k in ("version", "escaping") if item.params.get(k)]
    return ";".join([item.value, *params])


def gzip_wanted(accept_encoding: str) -> bool:
    """Whether Accept-Encoding accepts gzip: named with a weight above 0, or not named and `*`
    is (q=0 means "not this"). Anything else, a weight that does not read included: the body
    as it is (identity), which every client takes."""
    weights: dict[str, float] = {}
    for item in _items(accept_encoding):
        weights.setdefault(item.value, item.q)
    if "gzip" in weights:
        return weights["gzip"] > 0
    return weights.get("*", 0.0) > 0


class _Named(Collector):
    """The registry's families narrowed to `names`, as prometheus_client's own exposition
    narrows by `name[]`: a name is a sample's (`kvtop_restarts_total`, `kvtop_info`), and a
    family left without samples is left out. Done here on what the registry collects, as
    prometheus_client's narrowing finds only collectors that describe their families up
    front, and kvtop's cannot before its first snapshot."""

    def __init__(self, registry: CollectorRegistry, names: list[str]) -> None:
        self._registry = registry
        self._names = frozenset(names)

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            kept = [sample for sample in family.samples if sample.name in self._names]
            if kept:
                narrowed = Metric(family.name, family.documentation, family.type, family.unit)
                narrowed.samples = kept
                yield narrowed


def answer(request: Request, registry: CollectorRegistry) -> bytes:
    """The bytes to write for `request`."""
    head = request.method == "HEAD"
    if request.method == "OPTIONS":
        return response(200, headers=[("Allow", _ALLOW)], head=True)
    if request.method not in ("GET", "HEAD"):
        allow = [("Allow", _ALLOW)]
        return _plain(405, f"{shown(request.method)} is not served; use GET.", allow)
    if request.path == "/":
        return response(200, _PAGE, [("Content-Type", "text/html; charset=utf-8")], head=head)
    if request.path != "/metrics":
        body = b"Not found; the metrics are at /metrics.\n"
        return response(404, body, [("Content-Type", "text/plain; charset=utf-8")], head=head)
    encoder, content_type = choose_format(request.headers.get("accept", ""))
    names = parse_qs(request.query).get("name[]")
    body = encoder(_Named(registry, names) if names else registry)
    headers = [("Content-Type", content_type)]
    if gzip_wanted(request.headers.get("accept-encoding", "")):
        body = gzip.compress(body)
        headers.append(("Content-Encoding", "gzip"))
    return response(200, body, headers, head=head)


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
    """Serves `registry` on `host`:`port` (0: any free port) until close()."""

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
    ) -> None:
        self.registry = registry
        self.request_deadline_s = request_deadline_s
        self.max_handlers = max_handlers
        self.max_waiting = max_waiting
        self._clock = clock
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

    # -- the reading thread -----------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stopping:
            try:
                self._turn()
            except Exception:  # one bad turn must not stop the serving for good
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
                self._read(sock)

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
        _send_now(waiting.sock, _plain(503, "Too many connections waiting; try again."))

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
            _send_now(waiting.sock, _plain(408, sentence))

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
            _send_now(sock, _plain(431, "The request's headers are too large."))
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
                _plain(503, "Busy answering other scrapes; try again.", [("Retry-After", "1")]),
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
                data = _plain(500, f"kvtop could not render the metrics ({type(exc).__name__}).")
            sock.setblocking(True)
            sock.settimeout(WRITE_DEADLINE_S)  # the whole sendall, not each send
            with contextlib.suppress(OSError):
                sock.sendall(data)
        finally:
            _close(sock)
            with self._busy_lock:
                self._busy -= 1
