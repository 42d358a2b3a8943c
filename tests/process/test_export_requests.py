"""What the exporter's HTTP server (tui/kvtop/export/http.py) makes of a request's own words, on
real loopback sockets: `name[]` narrows the body as prometheus_client's own exposition does,
Accept and Accept-Encoding are read leniently with their q-values (never a 500), and no answer
quotes more of a request than a short, visible form."""

from __future__ import annotations

import gzip
import re
import socket
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, choose_encoder
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from kvtop.export import families as ff
from kvtop.export.http import MetricsHttpServer
from tests.support.export_tools import PROMETHEUS_ACCEPT, exporter, of, samples

OPENMETRICS_1 = "application/openmetrics-text; version=1.0.0; charset=utf-8"
# Prometheus 3's default scrape_protocols, as its Accept header writes them.
PROMETHEUS_3_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
    "application/openmetrics-text;version=0.0.1;q=0.4,"
    "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,"
    "text/plain;version=0.0.4;q=0.2,*/*;q=0.1"
)


class Families:
    """A gauge, a counter and an info family with fixed values: the same body every scrape."""

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily | InfoMetricFamily]:
        gauge = GaugeMetricFamily("kvtop_a", "a gauge", labels=["gpu"])
        gauge.add_metric(["0"], 1)
        gauge.add_metric(["1"], 2)
        yield gauge
        yield GaugeMetricFamily("kvtop_b", "another gauge", value=3)
        yield CounterMetricFamily("kvtop_c", "a counter", value=4)
        yield InfoMetricFamily("kvtop", "an info", value={"host": "h"})
        yield GaugeMetricFamily("kvtop_empty", "a gauge without samples")


class Described(Families):
    """Families with the names prometheus_client's registry needs to narrow by `name[]`."""

    def describe(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily | InfoMetricFamily]:
        return self.collect()


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    registry = CollectorRegistry()
    registry.register(Families())  # type: ignore[arg-type]
    httpd = MetricsHttpServer("127.0.0.1", 0, registry)
    yield httpd.port
    httpd.close()


def get(port: int, query: str = "", **headers: str) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{port}/metrics{query}", headers=headers, timeout=10)


def raw(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def prometheus_clients(query: str, accept: str) -> tuple[str, bytes]:
    """prometheus_client's own exposition (its WSGI app) of the same families: content type
    and body."""
    registry = CollectorRegistry()
    registry.register(Described())  # type: ignore[arg-type]
    app = make_wsgi_app(registry, disable_compression=True)
    status: list[tuple[str, list[tuple[str, str]]]] = []
    environ = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/metrics",
        "QUERY_STRING": query,
        "HTTP_ACCEPT": accept,
    }
    body = b"".join(app(environ, lambda s, h: status.append((s, h))))
    assert status[0][0] == "200 OK"
    return dict(status[0][1])["Content-Type"], body


NAMED = [
    ("name[]=kvtop_a", {"kvtop_a"}),
    ("name[]=kvtop_a&name[]=kvtop_c_total", {"kvtop_a", "kvtop_c_total"}),
    ("name%5B%5D=kvtop_b", {"kvtop_b"}),
    ("name[]=kvtop_info", {"kvtop_info"}),
    ("name[]=kvtop_b&name[]=kvtop_b", {"kvtop_b"}),
    # A family is named by its samples' name, as prometheus_client does: the counter's
    # family name alone selects nothing.
    ("name[]=kvtop_c", set()),
    ("name[]=kvtop_nope", set()),
    ("name[]=kvtop_empty", set()),
]


@pytest.mark.parametrize(("query", "names"), NAMED)
@pytest.mark.parametrize("accept", ["", PROMETHEUS_ACCEPT], ids=["text", "openmetrics"])
@pytest.mark.parametrize("coding", ["identity", "gzip"])
def test_name_selects_exactly_the_named_families(
    port: int, query: str, names: set[str], accept: str, coding: str
) -> None:
    answer = get(port, f"?{query}", accept=accept, **{"accept-encoding": coding})
    assert answer.status_code == 200
    assert answer.headers.get("content-encoding", "identity") == coding
    body = answer.content  # httpx took the gzip off
    if accept:
        assert body.endswith(b"# EOF\n")
        found = {s.name for f in openmetrics_families(body.decode()) for s in f.samples}
    else:
        found = {s.name for f in text_string_to_metric_families(body.decode()) for s in f.samples}
    assert found == names
    # Byte for byte what prometheus_client's own exposition answers.
    assert (answer.headers["content-type"], body) == prometheus_clients(query, accept)


def test_without_name_every_family_is_there(port: int) -> None:
    for query in ("", "?", "?name[]=", "?other=kvtop_a"):
        found = samples(get(port, query).text)
        assert {name for name, _ in found} == {"kvtop_a", "kvtop_b", "kvtop_c_total", "kvtop_info"}


def test_name_narrows_the_real_exporter() -> None:
    with exporter("--demo") as running:
        _, whole = running.scrape_until("the GPUs' up samples", lambda f: bool(of(f, ff.GPU_UP)))
        narrowed = httpx.get(f"{running.url}?name[]={ff.GPU_UP}", timeout=10)
        assert narrowed.status_code == 200
        assert set(samples(narrowed.text)) == {key for key in whole if key[0] == ff.GPU_UP}
        both = httpx.get(
            f"{running.url}?name[]={ff.GPU_UP}&name[]={ff.INFO}",
            headers={"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"},
            timeout=10,
        )
        assert both.headers["content-encoding"] == "gzip"
        names = {s.name for f in openmetrics_families(both.text) for s in f.samples}
        assert names == {ff.GPU_UP, ff.INFO}


MALFORMED_ACCEPT = [
    "application/openmetrics-text; version=abc",
    "application/openmetrics-text;version=1.x",
    "application/openmetrics-text;version=1.0.0.0.0",
    "application/openmetrics-text;version=",
    "application/openmetrics-text;version",
    "application/openmetrics-text;version=9.9.9",
    "application/openmetrics-text;version=0.0.1",
    "application/openmetrics-text;version=-1",
    "application/openmetrics-text;version=1.0.0;escaping=bogus;q=abc",
    "application/openmetrics-text;;;=;==;version==1.0.0",
    "text/plain;version=abc",
    "text/plain;version=1.x",
    "text/plain;version=9.9.9",
    ";;;,,,;",
    "=,=;=",
    "*/*;q=",
    "garbage",
    "application/openmetrics-text;version=" + "1." * 2000 + "0",
    "application/openmetrics-text," * 500,
]


@pytest.mark.parametrize("accept", MALFORMED_ACCEPT, ids=lambda a: a[:40])
def test_a_malformed_accept_gets_a_format_prometheus_reads(port: int, accept: str) -> None:
    answer = get(port, accept=accept)
    assert answer.status_code == 200, answer.text
    content_type = answer.headers["content-type"]
    assert content_type == CONTENT_TYPE_PLAIN_0_0_4 or content_type.startswith(OPENMETRICS_1)
    if content_type.startswith(OPENMETRICS_1):
        assert {f.name for f in openmetrics_families(answer.text)} >= {"kvtop_a", "kvtop"}
    else:
        assert {name for name, _ in samples(answer.text)} >= {"kvtop_a", "kvtop_info"}


@pytest.mark.parametrize(
    "accept",
    [
        b"application/openmetrics-text;version=\xd9\xa1.\xd9\xa0.\xd9\xa0",  # Arabic-Indic 1.0.0
        b"application/openmetrics-text;version=\xc2\xb9.0.0",  # superscript one
        b"application/openmetrics-text;version=1.0.0\x00",
        b"\xff\xfe;version=1.0.0",
    ],
)
def test_a_version_in_other_digits_is_not_a_version(port: int, accept: bytes) -> None:
    answer = raw(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: " + accept + b"\r\n\r\n")
    head = answer.split(b"\r\n\r\n", 1)[0]
    assert head.startswith(b"HTTP/1.1 200 "), answer[:200]
    assert b"\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n" in head


@pytest.mark.parametrize(
    "accept",
    [
        "",
        PROMETHEUS_ACCEPT,
        PROMETHEUS_3_ACCEPT,
        "application/openmetrics-text",
        "application/openmetrics-text; version=1.0.0",
        "application/openmetrics-text;version=1.0.0;escaping=underscores",
        "text/plain;version=1.0.0;escaping=allow-utf-8",
        "text/plain;version=0.0.4",
        "text/plain",
        "*/*",
    ],
    ids=lambda a: a[:40],
)
def test_a_well_formed_accept_is_answered_as_prometheus_client_does(port: int, accept: str) -> None:
    answer = get(port, accept=accept)
    assert answer.status_code == 200
    assert answer.headers["content-type"] == choose_encoder(accept)[1]


@pytest.mark.parametrize(
    ("accept", "content_type"),
    [
        ("application/openmetrics-text;q=0, text/plain", CONTENT_TYPE_PLAIN_0_0_4),
        ("application/openmetrics-text;q=0.0", CONTENT_TYPE_PLAIN_0_0_4),
        ("text/plain;q=0.2, application/openmetrics-text;q=0.9", OPENMETRICS_1),
        ("Application/OpenMetrics-Text; Version=1.0.0", OPENMETRICS_1),
        ('application/openmetrics-text; version="1.0.0"', OPENMETRICS_1),
        ("application/openmetrics-text;version=abc, application/openmetrics-text", OPENMETRICS_1),
    ],
)
def test_accept_is_read_with_its_q_values(port: int, accept: str, content_type: str) -> None:
    answer = get(port, accept=accept)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith(content_type)


@pytest.mark.parametrize(
    ("accept_encoding", "gzipped"),
    [
        ("gzip", True),
        ("GZIP", True),
        ("gzip;q=0.5", True),
        ("gzip;q=0.001", True),
        ("deflate, gzip;q=1.0, br", True),
        ("*", True),
        ("*;q=0, gzip;q=0.1", True),
        ("gzip;q=0", False),
        ("gzip; q=0.000", False),
        ("gzip;Q=0", False),
        ("gzip;q=0, *;q=1", False),
        ("*;q=0", False),
        ("identity", False),
        ("deflate, br", False),
        ("", False),
        ("gzip;q=abc", False),  # a weight that does not read: the plain body always works
        ("gzip;q=\u0661", False),
        (",,;;,", False),
    ],
)
def test_accept_encoding_is_read_with_its_q_values(
    port: int, accept_encoding: str, gzipped: bool
) -> None:
    answer = raw(
        port,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: "
        + accept_encoding.encode()
        + b"\r\n\r\n",
    )
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert (b"\r\nContent-Encoding: gzip" in head) is gzipped
    text = gzip.decompress(body) if gzipped else body
    assert b"# TYPE kvtop_a gauge" in text


def test_repeated_headers_are_one_list(port: int) -> None:
    answer = raw(
        port,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n"
        b"Accept-Encoding: deflate\r\nAccept: text/plain;q=0.1\r\n"
        b"Accept: application/openmetrics-text\r\n\r\n",
    )
    head = answer.split(b"\r\n\r\n", 1)[0]
    assert b"\r\nContent-Encoding: gzip\r\n" in head
    assert f"\r\nContent-Type: {OPENMETRICS_1}".encode() in head


VISIBLE = re.compile(rb"[\x20-\x7e\r\n]*")  # printable ASCII, and the lines' ends


@pytest.mark.parametrize(
    "request_head",
    [
        b"X" * 1000 + b" /metrics HTTP/1.1",
        b"\x1b[2J\x1b[31mPWNED\x07 /metrics HTTP/1.1",
        b"\x00\xff\xfe\x80\r /metrics HTTP/1.1",
        b"PO\x1bST / HTTP/1.1",
        b"DELETE /" + b"A" * 10000 + b" HTTP/1.1",
        b"GET /" + b"\x1b]0;title\x07" * 100 + b" HTTP/1.1",
        b"GET /metrics?name[]=" + b"\x1b" * 5000 + b" HTTP/1.1",
        b"GET /metrics HTTP/9." + b"9" * 1000,
        b"\x1b[31m" * 300,
    ],
    ids=lambda b: ascii(b[:24]),
)
def test_an_answer_quotes_no_more_than_a_short_visible_form(port: int, request_head: bytes) -> None:
    answer = raw(port, request_head + b"\r\nHost: x\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert re.match(rb"HTTP/1\.1 (200|400|404|405|505) ", head), answer[:300]
    assert VISIBLE.fullmatch(answer), answer[:300]
    assert len(body) <= 200, body


def test_a_405_names_the_method_in_a_short_visible_form(port: int) -> None:
    answer = raw(port, b"PO\x1bST /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 405 ")
    assert answer.endswith(b"\r\n\r\nPO\\x1bST is not served; use GET.\n")
    long = raw(port, b"X" * 1000 + b" /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert long.endswith(b"\r\n\r\n" + b"X" * 29 + b"... is not served; use GET.\n")
