"""HTTP/1.1 GET with keep-alive: h11 (the protocol engine under httpx) on asyncio streams.

Why not httpx's client, which kvtop used before: a 113 KB /metrics scrape cost 1.6 ms of CPU
through httpx (client, httpcore, anyio, h11) and 0.3 ms through h11 directly on asyncio
streams (`bench/bench_fetch.py`); at a 1 s refresh that difference was a fifth
of what kvtop may spend above Textual's floor. kvtop needs little of a client: GET a path from
one server with a few headers, over one kept-alive connection, with a size limit (the caller
bounds the time). h11 does the protocol (framing, chunked bodies, keep-alive rules); this module
does the socket. Not supported, on purpose: proxies from the environment (kvtop talks to the
server on its own host), redirects, compression (it asks for identity and refuses anything
else), HTTP/2.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from urllib.parse import urlsplit

import h11

from tui import __version__

READ_BYTES = 1 << 18
USER_AGENT = f"kvtop/{__version__}"


class ConnectFailed(Exception):
    """Nothing answered at the address (refused, unreachable, name not found)."""


class FetchFailed(Exception):
    """The exchange broke (garbage, cut short, a framing error); the message is safe to show."""


class TooLarge(Exception):
    """The body is larger than the limit."""


class HttpGetter:
    """GETs from the server at `url` (http or https, with an optional path prefix)."""

    def __init__(self, url: str, max_body_bytes: int) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("an http(s) URL with a host")
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        self.netloc = parts.netloc.rpartition("@")[2]  # never send credentials in Host
        self.prefix = parts.path.rstrip("/")
        self.max_body_bytes = max_body_bytes
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._conn: h11.Connection | None = None
        self._answered = False  # a byte of the current answer has arrived
        self._head_seen = False  # its status line and headers have

    async def get(self, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
        """(status, body); the body only for 200 (others are closed unread)."""
        reused = self._conn is not None
        try:
            try:
                return await self._exchange(path, headers)
            except _ClosedBeforeAnswer:
                self._drop()
                if not reused:
                    raise
                # A kept-alive connection the server had closed meanwhile: once more, afresh.
                return await self._exchange(path, headers)
        except _ClosedBeforeAnswer:
            self._drop()
            raise FetchFailed("the server closed the connection without answering") from None
        except BaseException:
            self._drop()  # state unknown (cancelled by the time limit, broken): start afresh
            raise

    async def aclose(self) -> None:
        writer = self._writer
        self._drop()
        if writer is not None:
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    # ---------------------------------------------------------------------------------------

    async def _connect(self) -> None:
        context = ssl.create_default_context() if self.tls else None
        try:
            self._reader, self._writer = await asyncio.open_connection(
                self.host,
                self.port,
                ssl=context,
                server_hostname=self.host if context is not None else None,
                limit=READ_BYTES,
            )
        except ssl.SSLError as exc:
            raise FetchFailed(f"TLS failed ({type(exc).__name__})") from None
        except OSError as exc:  # refused, unreachable, name not found (socket.gaierror)
            raise ConnectFailed(type(exc).__name__) from None
        self._conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=READ_BYTES)

    async def _exchange(self, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
        if self._conn is None:
            await self._connect()
        conn, reader, writer = self._conn, self._reader, self._writer
        assert conn is not None and reader is not None and writer is not None
        fields = [
            ("Host", self.netloc),
            ("User-Agent", USER_AGENT),
            ("Accept-Encoding", "identity"),
            *headers.items(),
        ]
        self._answered = self._head_seen = False
        try:
            request = h11.Request(method="GET", target=self.prefix + path, headers=fields)
            writer.write(conn.send(request) + conn.send(h11.EndOfMessage()))
            await writer.drain()
            status, body = await self._answer(conn, reader)
        except h11.ProtocolError as exc:
            what = "the answer was cut short or broken" if self._head_seen else "not HTTP"
            raise FetchFailed(f"{what} ({type(exc).__name__})") from None
        except ConnectionError as exc:
            raise (
                _ClosedBeforeAnswer
                if conn.their_state is h11.IDLE
                else FetchFailed(f"connection lost ({type(exc).__name__})")
            ) from None
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()  # kept alive for the next scrape
        else:
            self._drop()
        return status, body

    async def _answer(
        self, conn: h11.Connection, reader: asyncio.StreamReader
    ) -> tuple[int, bytes]:
        status = 0
        chunks: list[bytes] = []
        size = 0
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await reader.read(READ_BYTES)
                if not data and not self._answered:
                    raise _ClosedBeforeAnswer
                self._answered = True
                conn.receive_data(data)  # b"" is the end of the stream
                continue
            if isinstance(event, h11.InformationalResponse):
                continue
            if isinstance(event, h11.Response):
                self._head_seen = True
                status = event.status_code
                if status != 200:
                    return status, b""  # not read; the connection is dropped after
                for name, value in event.headers:
                    if name == b"content-encoding" and value.lower() != b"identity":
                        raise FetchFailed("a compressed answer, though identity was asked for")
                    if name == b"content-length" and int(value) > self.max_body_bytes:
                        raise TooLarge
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if size > self.max_body_bytes:
                    raise TooLarge
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return status, b"".join(chunks)
            elif isinstance(event, h11.ConnectionClosed):
                raise FetchFailed("the answer was cut short")

    def _drop(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = self._conn = None


class _ClosedBeforeAnswer(Exception):
    """The server closed the connection before any byte of an answer."""
