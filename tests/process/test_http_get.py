"""tui/kvtop/sources/http_get.py (httpx with kvtop's policy) against real sockets on loopback: a
scripted asyncio server answers each request with exact bytes, so keep-alive, framing,
compression, redirects, proxies and the failure paths are what a real server or proxy would
send (the SGLang-shaped cases run against FakeSGLang in test_metrics_source.py)."""

from __future__ import annotations

import asyncio
import gzip
import socket
import zlib
from collections.abc import AsyncIterator, Callable

import pytest

from kvtop.sources.http_get import ConnectFailed, FetchFailed, HttpGetter, TimedOut, TooLarge

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


@pytest.fixture(autouse=True)
def no_proxy_from_this_shell(monkeypatch: pytest.MonkeyPatch) -> None:
    """The proxy cases set their own; one in the shell running the tests must not leak in."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


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
    head = script.requests[0].decode().lower()
    assert head.startswith("get /metrics http/1.1\r\n")
    assert "accept-encoding: gzip, deflate\r\n" in head and "user-agent: kvtop/" in head
    assert "accept: text/plain\r\n" in head


async def test_path_prefix_host_header_and_no_credentials(serve) -> None:  # type: ignore[no-untyped-def]
    script = Scripted([ok(b"x")])
    url = await serve(script)
    hostport = url.removeprefix("http://")
    getter = HttpGetter(f"http://admin:pw@{hostport}/sglang/", max_body_bytes=1000)
    assert await getter.get("/metrics", {}) == (200, b"x")
    await getter.aclose()
    head = script.requests[0].decode().lower()
    assert head.startswith("get /sglang/metrics http/1.1")
    assert f"host: {hostport}\r\n" in head
    assert "authorization" not in head  # user:password is not turned into Basic auth


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


async def test_server_closed_the_idle_connection_gets_a_new_one(serve) -> None:  # type: ignore[no-untyped-def]
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
    with pytest.raises(FetchFailed):
        await getter.get("/", {})


async def test_not_200_is_returned_unread(serve) -> None:  # type: ignore[no-untyped-def]
    script = Scripted([b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 5\r\n\r\nnope!", ok(b"in")])
    getter = HttpGetter(await serve(script), max_body_bytes=1000)
    assert await getter.get("/", {}) == (401, b"")
    assert await getter.get("/", {"Authorization": "Bearer k"}) == (200, b"in")
    await getter.aclose()
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


def deflated(data: bytes) -> bytes:
    return zlib.compress(data)  # HTTP's "deflate" is the zlib format


async def test_compressed_bodies_are_decoded(serve) -> None:  # type: ignore[no-untyped-def]
    text = b"sglang:token_usage 0.5\n" * 40
    script = Scripted(
        [
            ok(gzip.compress(text), b"Content-Encoding: gzip\r\n"),
            ok(deflated(text), b"Content-Encoding: deflate\r\n"),
        ]
    )
    getter = HttpGetter(await serve(script), max_body_bytes=len(text))
    assert await getter.get("/", {}) == (200, text)
    assert await getter.get("/", {}) == (200, text)
    await getter.aclose()
    assert script.connections == 1


async def test_the_limit_is_on_the_decoded_body(serve) -> None:  # type: ignore[no-untyped-def]
    """A compression bomb: 8 MiB of zeros in about 8 KB; under the limit on the wire, refused
    once the decoded bytes pass it."""
    bomb = gzip.compress(b"\0" * (8 << 20))
    assert len(bomb) < 64 << 10
    url = await serve(Scripted([ok(bomb, b"Content-Encoding: gzip\r\n")]))
    with pytest.raises(TooLarge):
        await HttpGetter(url, max_body_bytes=1 << 20).get("/", {})


async def test_garbage_and_cut_short_fail(serve) -> None:  # type: ignore[no-untyped-def]
    answers = [
        b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this",
        ok(b"not gzip at all", b"Content-Encoding: gzip\r\n"),
    ]
    for answer in answers:
        url = await serve(Scripted([answer], close_after_each=True))
        with pytest.raises(FetchFailed):
            await HttpGetter(url, max_body_bytes=1000).get("/", {})


async def test_refused_is_connect_failed() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, not listening: connections are refused
        with pytest.raises(ConnectFailed):
            await HttpGetter(f"http://127.0.0.1:{port}", max_body_bytes=10).get("/", {})


async def test_httpx_timeout_is_timed_out(serve) -> None:  # type: ignore[no-untyped-def]
    url = await serve(Scripted([]))  # reads the request, never answers
    with pytest.raises(TimedOut):
        await HttpGetter(url, max_body_bytes=10, timeout_s=0.2).get("/", {})


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


def redirect(location: str, status: int = 302) -> bytes:
    return b"HTTP/1.1 %d Found\r\nLocation: %s\r\nContent-Length: 0\r\n\r\n" % (
        status,
        location.encode(),
    )


async def test_redirects_within_the_origin_are_followed(serve) -> None:  # type: ignore[no-untyped-def]
    script = Scripted([redirect("/v2/metrics"), redirect("metrics2", 307), ok(b"here")])
    url = await serve(script)
    getter = HttpGetter(url, max_body_bytes=100)
    assert await getter.get("/metrics", {"Authorization": "Bearer k"}) == (200, b"here")
    await getter.aclose()
    targets = [r.split(b" ")[1] for r in script.requests]
    assert targets == [b"/metrics", b"/v2/metrics", b"/v2/metrics2"]
    assert all(b"authorization: bearer k" in r.lower() for r in script.requests)


async def test_redirects_elsewhere_or_in_a_loop_are_refused(serve) -> None:  # type: ignore[no-untyped-def]
    elsewhere = Scripted([ok(b"not for kvtop")])
    other = await serve(elsewhere)
    script = Scripted([redirect(other + "/metrics")] + [redirect("/again")] * 5)
    getter = HttpGetter(await serve(script), max_body_bytes=100)
    with pytest.raises(FetchFailed, match="another server"):
        await getter.get("/metrics", {"Authorization": "Bearer k"})
    assert elsewhere.requests == []  # another port is another origin: never contacted
    with pytest.raises(FetchFailed, match="redirects"):
        await getter.get("/metrics", {})
    await getter.aclose()


async def test_proxy_from_the_environment(serve, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """HTTP_PROXY points at a loopback stub that answers in the proxy's place: a server on
    another host goes through it (its name is never resolved: .invalid cannot be); NO_PROXY
    and loopback addresses go direct."""
    proxy = Scripted([ok(b"via the proxy")])
    monkeypatch.setenv("HTTP_PROXY", await serve(proxy))
    getter = HttpGetter("http://sglang.invalid:30000", max_body_bytes=100)
    assert await getter.get("/metrics", {}) == (200, b"via the proxy")
    await getter.aclose()
    assert proxy.requests[0].startswith(b"GET http://sglang.invalid:30000/metrics HTTP/1.1")

    direct = Scripted([ok(b"direct")])
    getter = HttpGetter(await serve(direct), max_body_bytes=100)
    assert await getter.get("/metrics", {}) == (200, b"direct")
    await getter.aclose()

    monkeypatch.setenv("NO_PROXY", "sglang.invalid")
    getter = HttpGetter("http://sglang.invalid:30000", max_body_bytes=100)
    with pytest.raises(ConnectFailed):  # went direct: the name does not resolve
        await getter.get("/metrics", {})
    await getter.aclose()
    assert len(proxy.requests) == 1 and len(direct.requests) == 1


def test_refuses_other_schemes() -> None:
    for url in ("ftp://host/", "http://", "unix:///run/sglang.sock"):
        with pytest.raises(ValueError):
            HttpGetter(url, max_body_bytes=10)
