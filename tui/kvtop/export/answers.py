"""What the exporter's HTTP server answers: a request's line and headers read (parse_request),
and the bytes of the answer (answer): /metrics (GET or HEAD, text 0.0.4 or OpenMetrics as
Accept asks, gzip when asked, `name[]` filters), / (a short page naming /metrics), anything else
404. Every answer closes its connection. No sockets here: tui/kvtop/export/http.py reads and
writes them.

A request's own words are read leniently and never trusted: Accept and Accept-Encoding with their
q-values (an item or a weight that does not read is passed over, and the text format without
gzip always works: never a 500), versions and weights in ASCII digits only, a header sent twice
as one list; an answer quotes a request only in a short form with its control and non-ASCII
characters escaped (`shown`). Read here rather than by h11, which refuses what this reads
leniently: a control byte in a method (this answers 405 naming it escaped), a NUL in an Accept
header (this passes the item over and answers 200), an HTTP/1.1 request without Host.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import parse_qs

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, choose_encoder, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

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


def plain(status: int, sentence: str, extra: list[tuple[str, str]] | None = None) -> bytes:
    """An answer of one sentence in plain text."""
    body = f"{sentence}\n".encode()
    headers = [("Content-Type", "text/plain; charset=utf-8"), *(extra or [])]
    return response(status, body, headers, head=False)


def parse_request(data: bytes) -> Request | bytes:
    """The request in `data` (line and headers, up to the blank line), or the answer that
    refuses it."""
    head = data.split(b"\r\n\r\n", 1)[0].split(b"\n\n", 1)[0]
    text = head.decode("latin-1")  # every byte is a character: nothing to refuse here
    lines = text.replace("\r\n", "\n").split("\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return plain(400, "Bad request line; ask GET /metrics HTTP/1.1.")
    method, target, version = parts
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        return plain(505, "Only HTTP/1.0 and HTTP/1.1 are served.")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            return plain(400, "Bad request header.")
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
        return plain(405, f"{shown(request.method)} is not served; use GET.", allow)
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
