"""tui/sources/http_get.py against real sockets on loopback: a scripted asyncio server answers
each request with exact bytes, so keep-alive, framing and the failure paths are what a real
server would send (the SGLang-shaped cases run against FakeSGLang in test_metrics_source.py)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable

import pytest

from tui.sources.http_get import ConnectFailed, FetchFailed, HttpGetter, TooLarge

Answer = Callable[[bytes], bytes | None]  # request head -> response bytes, None: close silently


class Scripted:
    """Counts connections and requests; `answers` are used in turn, one per request."""

    def __init__(self, answers: list[bytes | None], close_after_each: bool = False) -> None:
        self.answers = list(answers)
        self.close_after_each = close_after_each
        self.connections = 0
        self.requests: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.requests.append(head)
                if not self.answers:
                    continue  # nothing scripted: leave the client waiting
                answer = self.answers.pop(0)
                if answer is None:
                    break
                writer.write(answer)
                await writer.drain()
                if self.close_after_each:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Scripted], asyncio.Future[str]]]:
    servers: list[asyncio.Server] = []

    async def start(script: Scripted) -> str:
        server = await asyncio.start_server(script.handle, "127.0.0.1", 0)
        servers.append(server)
        port = server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    yield start  # type: ignore[misc]
    for server in servers:
        server.close()
        await server.wait_closed()


def ok(body: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


async def test_keeps_one_connection_alive(serve) -> None:  # type: ignore[no-untyped-def]
    script = Scripted([ok(b"one"), ok(b"two"), ok(b"three")])
    getter = HttpGetter(await serve(script), max_body_bytes=1000)
    got = [await getter.get("/metrics", {"Accept": "text/plain"}) for _ in range(3)]
    await getter.aclose()
    assert got == [(200, b"one"), (200, b"two"), (200, b"three")]
    assert script.connections == 1
    head = script.requests[0].decode()
    assert head.startswith("GET /metrics HTTP/1.1\r\n")
    assert "accept-encoding: identity" in head.lower() and "user-agent: kvtop/" in head.lower()


async def test_path_prefix_and_host_header(serve) -> None:  # type: ignore[no-untyped-def]
    script = Scripted([ok(b"x")])
    url = await serve(script)
    getter = HttpGetter(url + "/sglang/", max_body_bytes=1000)
    assert await getter.get("/metrics", {}) == (200, b"x")
    await getter.aclose()
    head = script.requests[0].decode()
    assert head.startswith("GET /sglang/metrics HTTP/1.1")
    assert f"host: {url.removeprefix('http://')}" in head.lower()


async def test_chunked_and_close_delimited_bodies(serve) -> None:  # type: ignore[no-untyped-def]
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    )
    until_close = b"HTTP/1.0 200 OK\r\n\r\nall of it"
    script = Scripted([chunked, until_close], close_after_each=True)
    getter = HttpGetter(await serve(script), max_body_bytes=1000)
    assert await getter.get("/a", {}) == (200, b"abcde")
    assert await getter.get("/b", {}) == (200, b"all of it")
    await getter.aclose()


async def test_server_closed_the_idle_connection_retries_once(serve) -> None:  # type: ignore[no-untyped-def]
    # Each connection answers once and closes, as a server with a short keep-alive does.
    script = Scripted([ok(b"first"), ok(b"second")], close_after_each=True)
    getter = HttpGetter(await serve(script), max_body_bytes=1000)
    assert await getter.get("/", {}) == (200, b"first")
    await asyncio.sleep(0.05)  # the close reaches us
    assert await getter.get("/", {}) == (200, b"second")
    await getter.aclose()
    assert script.connections == 2


async def test_fresh_connection_closed_without_answer_fails(serve) -> None:  # type: ignore[no-untyped-def]
    getter = HttpGetter(await serve(Scripted([None])), max_body_bytes=1000)
    with pytest.raises(FetchFailed, match="without answering"):
        await getter.get("/", {})


async def test_not_200_is_returned_and_the_connection_dropped(serve) -> None:  # type: ignore[no-untyped-def]
    script = Scripted([b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 5\r\n\r\nnope!", ok(b"in")])
    getter = HttpGetter(await serve(script), max_body_bytes=1000)
    assert await getter.get("/", {}) == (401, b"")
    assert await getter.get("/", {"Authorization": "Bearer k"}) == (200, b"in")
    await getter.aclose()
    assert script.connections == 2
    assert b"authorization: bearer k" in script.requests[1].lower()


async def test_size_limit_by_header_and_by_stream(serve) -> None:  # type: ignore[no-untyped-def]
    declared = ok(b"x" * 200)
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"64\r\n" + b"y" * 100 + b"\r\n"
    )
    script = Scripted([declared, chunked * 1])
    url = await serve(script)
    with pytest.raises(TooLarge):
        await HttpGetter(url, max_body_bytes=100).get("/", {})
    script.answers = [chunked[:-2] + b"\r\n64\r\n" + b"y" * 100 + b"\r\n0\r\n\r\n"]
    with pytest.raises(TooLarge):
        await HttpGetter(url, max_body_bytes=150).get("/", {})


async def test_garbage_cut_short_and_compressed_fail(serve) -> None:  # type: ignore[no-untyped-def]
    answers = [
        b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this",
        ok(b"\x1f\x8b", b"Content-Encoding: gzip\r\n"),
    ]
    for answer, why in zip(answers, ["not HTTP", "cut short", "compressed"], strict=True):
        url = await serve(Scripted([answer], close_after_each=True))
        with pytest.raises(FetchFailed, match=why):
            await HttpGetter(url, max_body_bytes=1000).get("/", {})


async def test_refused_is_connect_failed() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, not listening: connections are refused
        with pytest.raises(ConnectFailed):
            await HttpGetter(f"http://127.0.0.1:{port}", max_body_bytes=10).get("/", {})


async def test_cancelled_mid_answer_starts_afresh(serve) -> None:  # type: ignore[no-untyped-def]
    hung = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"  # then nothing more
    script = Scripted([hung])
    url = await serve(script)
    getter = HttpGetter(url, max_body_bytes=1000)
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(getter.get("/", {}), 0.2)
    script.answers = [ok(b"fine")]
    assert await getter.get("/", {}) == (200, b"fine")
    await getter.aclose()
    assert script.connections == 2


def test_refuses_other_schemes() -> None:
    for url in ("ftp://host/", "http://", "unix:///run/sglang.sock"):
        with pytest.raises(ValueError):
            HttpGetter(url, max_body_bytes=10)
