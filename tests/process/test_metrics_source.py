"""MetricsSource against a real HTTP server on 127.0.0.1: values, faults, recovery, API key."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from kvtop.sources.metrics import ApiKeyError, MetricsSource, load_api_key
from tests.support.sglang_http import Deployment, FakeSGLang

SECRET = "sk-kvtop-test-7f3a9c"


@pytest.fixture
def sg() -> Iterator[FakeSGLang]:
    with FakeSGLang(Deployment(version="0.5.12", tp_size=4, dp_size=4)) as server:
        yield server


@pytest.fixture
async def source(sg: FakeSGLang) -> AsyncIterator[MetricsSource]:
    async with MetricsSource(sg.url, api_key=SECRET, timeout_s=0.5) as src:
        yield src


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_scrape_ok(source: MetricsSource) -> None:
    reading = await source.scrape()
    assert reading.status == "ok"
    assert reading.problem is None
    assert reading.sample is not None
    assert reading.sample.max_total_num_tokens == 4 * 159277
    assert reading.fetched_at > 0
    assert source.next_delay_s() == 1.0


async def test_restart_with_new_pool(sg: FakeSGLang, source: MetricsSource) -> None:
    first = await source.scrape()
    sg.restart(Deployment(version="0.5.12", tp_size=8, max_total_num_tokens=200_000))
    second = await source.scrape()
    assert first.sample is not None and second.sample is not None
    assert first.sample.max_total_num_tokens == 4 * 159277
    assert second.sample.max_total_num_tokens == 200_000


async def test_an_unchanged_body_is_not_parsed_again(sg: FakeSGLang, source: MetricsSource) -> None:
    """A server at rest answers the same body: the sample parsed from it is handed back as it
    is (the same object); a changed body is parsed."""
    first, again = await source.scrape(), await source.scrape()
    assert first.sample is not None and again.sample is first.sample
    sg.restart(Deployment(version="0.5.12", tp_size=8, max_total_num_tokens=200_000))
    changed = await source.scrape()
    assert changed.sample is not None and changed.sample is not first.sample
    assert changed.sample.max_total_num_tokens == 200_000


async def test_connection_refused_and_backoff() -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    async with MetricsSource(url, timeout_s=0.5) as src:
        delays = []
        for _ in range(7):
            reading = await src.scrape()
            assert reading.status == "off"
            delays.append(src.next_delay_s())
        assert reading.problem == (
            f"nothing listens on {url}: is the server running, and is --url right?"
        )
        # Capped at 4 s: a server back from a restart is read again within seconds.
        assert delays == [1, 2, 4, 4, 4, 4, 4]
        assert reading.cause == "unreachable"


FAULTS = [
    ({"status": {"/metrics": 404}}, "off", "runs without --enable-metrics"),
    ({"status": {"/metrics": 503}}, "degraded", "answered 503"),
    ({"status": {"/metrics": 500}}, "degraded", "answered 500"),
    ({"status": {"/metrics": 401}}, "off", "the API key was refused"),
    ({"status": {"/metrics": 403}}, "off", "the API key was refused"),
    ({"delay_s": 1.0}, "degraded", "did not answer within 0.5 s"),
    ({"body": "drip"}, "degraded", "did not answer within 0.5 s"),
    ({"body": "html"}, "degraded", "no sglang: metrics"),
    ({"body": "garbage"}, "degraded", "no sglang: metrics"),
]


@pytest.mark.parametrize(("switch", "status", "words"), FAULTS)
async def test_fault_then_recovery(
    sg: FakeSGLang, source: MetricsSource, switch: dict, status: str, words: str
) -> None:
    for name, value in switch.items():
        setattr(sg.switches, name, value)
    reading = await source.scrape()
    assert reading.status == status
    assert reading.sample is None
    assert reading.problem is not None and words in reading.problem
    assert SECRET not in reading.problem
    assert source.next_delay_s() == 1.0
    failed_again = await source.scrape()
    assert failed_again.status == status
    assert source.next_delay_s() == 2.0
    # clear the switch: the next scrape works and the back-off resets
    sg.switches.status = {}
    sg.switches.delay_s = 0.0
    sg.switches.body = None
    reading = await source.scrape()
    assert reading.status == "ok", reading.problem
    assert source.next_delay_s() == 1.0


async def test_huge_body_is_cut(sg: FakeSGLang) -> None:
    sg.switches.body = "huge"
    async with MetricsSource(sg.url, timeout_s=5.0, max_body_bytes=2 * 2**20) as src:
        reading = await src.scrape()
        assert reading.status == "degraded"
        assert reading.problem is not None and "more than 2 MiB" in reading.problem
        sg.switches.body = None
        assert (await src.scrape()).status == "ok"


async def test_default_limit_cuts_25_mb(sg: FakeSGLang) -> None:
    sg.switches.body = "huge"
    async with MetricsSource(sg.url, timeout_s=5.0) as src:
        reading = await src.scrape()
    assert reading.problem is not None and "more than 20 MiB" in reading.problem


async def test_api_key_sent_as_bearer_to_server_info_only(
    sg: FakeSGLang, source: MetricsSource
) -> None:
    sg.switches.api_key = SECRET
    sg.restart(sg.deployment)
    reading = await source.server_info()
    assert reading.status == "ok", reading.problem
    assert reading.info is not None
    assert reading.info.max_total_num_tokens == 159277
    assert reading.info.server_args is not None and reading.info.server_args.dp_size == 4
    assert len(reading.info.memory_by_dp) == 4
    assert SECRET not in repr(reading)
    await source.scrape()
    sent = {path: headers.get("authorization") for path, headers in sg.requests}
    assert sent["/server_info"] == f"Bearer {SECRET}"
    assert sent["/metrics"] is None
    assert SECRET not in repr(source)


async def test_server_info_needs_key(sg: FakeSGLang) -> None:
    sg.switches.api_key = SECRET
    async with MetricsSource(sg.url, timeout_s=0.5) as src:
        reading = await src.server_info()
    assert reading.status == "off"
    assert reading.problem is not None
    assert "pass --api-key-file or set SGLANG_API_KEY" in reading.problem
    async with MetricsSource(sg.url, api_key="wrong-key-xyz", timeout_s=0.5) as src:
        reading = await src.server_info()
    assert reading.problem is not None and "the API key was refused" in reading.problem
    assert "wrong-key-xyz" not in reading.problem


async def test_server_info_falls_back_to_old_endpoint(
    sg: FakeSGLang, source: MetricsSource
) -> None:
    sg.switches.old_endpoint_only = True
    reading = await source.server_info()
    assert reading.status == "ok", reading.problem
    paths = [path for path, _ in sg.requests]
    assert paths == ["/server_info", "/get_server_info"]


async def test_server_info_html(sg: FakeSGLang, source: MetricsSource) -> None:
    sg.switches.status = {"/server_info": 502}
    reading = await source.server_info()
    assert reading.status == "degraded"
    assert reading.problem is not None and "answered 502" in reading.problem


async def test_health_endpoint_is_served(sg: FakeSGLang) -> None:
    import httpx

    async with httpx.AsyncClient() as client:
        assert (await client.get(sg.url + "/health")).status_code == 200


def test_load_api_key(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(f"  {SECRET}\n")
    assert load_api_key(str(key_file), {}) == SECRET
    assert load_api_key(None, {"SGLANG_API_KEY": " env-key \n"}) == "env-key"
    assert load_api_key(None, {}) is None
    missing = tmp_path / "nope"
    with pytest.raises(ApiKeyError, match="no such file") as err:
        load_api_key(str(missing), {})
    assert str(missing) in str(err.value)
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ApiKeyError, match="is empty"):
        load_api_key(str(empty), {})
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe" + SECRET.encode() + b"\xff")
    with pytest.raises(ApiKeyError) as err:
        load_api_key(str(binary), {})
    assert SECRET not in str(err.value)
    with pytest.raises(ApiKeyError, match="not a readable text file"):
        load_api_key(str(tmp_path), {})  # a directory


async def test_server_info_refused_is_backed_off(sg: FakeSGLang) -> None:
    """A wrong key (SGLang lets /metrics through and refuses /server_info with 401): the
    sentence names /server_info, and it is not asked again until its back-off has passed."""
    sg.switches.api_key = "the-servers-key"
    async with MetricsSource(sg.url, api_key="wrong-key-xyz", timeout_s=0.5) as src:
        src.interval_s = 60.0
        assert src.server_info_due()
        reading = await src.server_info()
        assert (await src.scrape()).status == "ok"  # /metrics needs no key
        assert reading.problem is not None
        assert "the API key was refused by /server_info" in reading.problem
        assert not src.server_info_due()  # the first back-off step: one interval (60 s)
        sg.switches.api_key = "wrong-key-xyz"
        src._info_due = 0.0  # the back-off has passed
        assert (await src.server_info()).status == "ok"
        assert src.server_info_due()


async def test_hung_server_info_does_not_hold_up_metrics(sg: FakeSGLang) -> None:
    """/server_info has its own connection: a scrape finishes while /server_info hangs."""
    sg.switches.delay_by_path = {"/server_info": 30.0}
    # A limit long enough for the scrape to end well before it (tens of milliseconds here).
    async with MetricsSource(sg.url, timeout_s=1.5) as src:
        info = asyncio.ensure_future(src.server_info())
        while not any(path == "/server_info" for path, _ in sg.requests):
            await asyncio.sleep(0.01)
        reading = await src.scrape()
        assert reading.status == "ok"
        assert not info.done()
        result = await info
    assert result.status == "degraded"
    assert (
        result.problem is not None and "/server_info did not answer within 1.5 s" in result.problem
    )
