"""tui/kvtop/fleet/prometheus_api.py against the real Prometheus of the session (Debian's 2.42) and
against loopback servers that misbehave the ways a Prometheus URL can: nothing there, a name
that does not resolve, a stuck server, a proxy's HTML page, a non-JSON answer, 401/403.
Every failure is one PrometheusError whose text is a sentence with a next step."""

from __future__ import annotations

import math

import pytest

from kvtop.fleet.prometheus_api import PrometheusApi, PrometheusError, parse_answer
from tests.support.prometheus_server import RecordingServer, free_ports

# Tests on the session's Prometheus are `slow`: it takes ~6 s to its first scrape.


async def _ask(url: str, **kwargs) -> PrometheusError:
    api = PrometheusApi(url, **kwargs)
    try:
        with pytest.raises(PrometheusError) as caught:
            await api.query("up")
    finally:
        await api.aclose()
    return caught.value


def _sentence(error: PrometheusError) -> str:
    text = str(error)
    assert text[0].isupper() and text.endswith("."), text
    assert "Traceback" not in text
    return text


@pytest.mark.slow
async def test_vector_scalar_matrix_and_special_values(prometheus) -> None:
    prometheus.wait_query("up", lambda r: len(r) > 0, "the first `up` samples")
    api = PrometheusApi(prometheus.url)
    try:
        up = await api.query("up")
        assert up.result_type == "vector" and up.vector
        assert {s.value for s in up.vector} <= {0.0, 1.0}
        assert all("instance" in s.labels and s.labels["__name__"] == "up" for s in up.vector)
        nan = await api.query("0/0")
        assert nan.result_type == "scalar" and math.isnan(nan.scalar)
        inf = await api.query("vector(1/0)")
        assert inf.vector[0].value == math.inf
        matrix = await api.query("up[30s]")
        assert matrix.result_type == "matrix" and matrix.series[0].points
        end = up.vector[0].ts
        ranged = await api.query_range("count(up)", start=end - 10, end=end, step_s=1)
        assert ranged.result_type == "matrix" and len(ranged.series) == 1
        assert ranged.series[0].points and all(v > 0 for _, v in ranged.series[0].points)
        targets = await api.targets()
        assert {"labels", "health", "lastError", "scrapeInterval"} <= set(targets[0])
        assert (await api.build_version()).startswith("2.")
    finally:
        await api.aclose()


@pytest.mark.slow
async def test_bad_query_is_bad_data_with_a_sentence(prometheus) -> None:
    api = PrometheusApi(prometheus.url)
    try:
        with pytest.raises(PrometheusError) as caught:
            await api.query('up{job="x')
    finally:
        await api.aclose()
    assert caught.value.kind == "bad_data" and caught.value.status == 400
    text = _sentence(caught.value)
    assert "parse error" in text and "--selector" in text


@pytest.mark.slow
async def test_many_to_many_is_an_execution_error(prometheus) -> None:
    prometheus.wait_query("count(up) > 1", lambda r: bool(r), "two targets or more")
    api = PrometheusApi(prometheus.url)
    try:
        with pytest.raises(PrometheusError) as caught:
            await api.query("up + on() up")
    finally:
        await api.aclose()
    assert caught.value.kind == "execution" and caught.value.status == 422
    assert "many-to-many" in _sentence(caught.value)


async def test_nothing_listening_is_a_connect_error() -> None:
    (port,) = free_ports(1)
    error = await _ask(f"http://127.0.0.1:{port}", timeout_s=30.0)
    assert error.kind == "connect"  # refused at once, not after the 30 s deadline
    assert "Cannot reach Prometheus" in _sentence(error)


async def test_unknown_name_is_a_connect_error() -> None:
    error = await _ask("http://kvtop-no-such-host.invalid:9090", timeout_s=30.0)
    assert error.kind == "connect"
    assert "kvtop-no-such-host.invalid" in _sentence(error)


async def test_stuck_server_meets_the_client_deadline() -> None:
    stuck = RecordingServer(hang=True)
    try:
        error = await _ask(stuck.url, timeout_s=0.5)
    finally:
        stuck.close()
    assert error.kind == "timeout"
    assert "did not answer within 0.5 s" in _sentence(error)


@pytest.mark.parametrize(
    ("answer", "status"),
    [
        ((502, "text/html", b"<html><body><h1>502 Bad Gateway</h1></body></html>"), 502),
        ((200, "text/plain", b"Hello from a web server"), 200),
        ((200, "application/json", b'{"hello": "world"}'), 200),
    ],
    ids=["proxy-html", "not-json", "other-json"],
)
async def test_an_answer_that_is_not_prometheus(answer, status) -> None:
    server = RecordingServer(answer)
    try:
        error = await _ask(server.url)
    finally:
        server.close()
    assert error.kind == "not_prometheus" and error.status == status
    assert f"HTTP {status}" in _sentence(error)


@pytest.mark.parametrize("status", [401, 403])
async def test_refused_credentials_and_the_token_sent(status) -> None:
    server = RecordingServer((status, "text/plain", b"Unauthorized"))
    try:
        error = await _ask(server.url, bearer_token="s3cret-token")
    finally:
        server.close()
    assert error.kind == "auth"
    text = _sentence(error)
    assert "--prometheus-bearer-file" in text and "s3cret" not in text
    assert server.headers[0]["Authorization"] == "Bearer s3cret-token"


async def test_no_token_no_header_and_no_retry() -> None:
    server = RecordingServer((503, "text/html", b"<html>busy</html>"))
    try:
        await _ask(server.url)
    finally:
        server.close()
    assert len(server.headers) == 1  # asked once: no blind retry
    assert "Authorization" not in server.headers[0]


def test_a_url_that_is_not_http() -> None:
    with pytest.raises(ValueError, match="http"):
        PrometheusApi("prom:9090")


def test_parse_answer_reads_every_value_spelling() -> None:
    data = {
        "resultType": "vector",
        "result": [
            {"metric": {"a": "1"}, "value": [1.5, "NaN"]},
            {"metric": {"a": "2"}, "value": [1.5, "+Inf"]},
            {"metric": {"a": "3"}, "value": [1.5, "-Inf"]},
            {"metric": {"a": "4"}, "value": [1.5, "1e+09"]},
        ],
    }
    values = [s.value for s in parse_answer(data).vector]
    assert math.isnan(values[0]) and values[1:] == [math.inf, -math.inf, 1e9]
