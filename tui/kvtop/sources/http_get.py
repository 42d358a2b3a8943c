"""GET from one SGLang server through one long-lived httpx client (keep-alive, limits, timeouts).

kvtop used a hand-written h11 client here for a while to save about 0.9 ms of CPU per scrape;
at one scrape a second that measured 0.13–0.15 % of a core side by side (docs/performance.md),
and it cost proxies, redirects and compression. What this module adds to httpx is only kvtop's
policy:
- one connection, kept alive between scrapes (httpcore drops one the server closed while idle
  and opens a new one);
- proxies from the environment (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, NO_PROXY) — except for
  loopback addresses, which a proxy cannot reach on this host (as Go's net/http does);
- redirects followed only within the server's own origin (scheme, host, port), at most
  MAX_REDIRECTS: kvtop talks to the server it was given and nothing else, and the API key
  never travels to another host;
- gzip/deflate accepted, and the size limit applies to the *decoded* body, read as a stream and
  abandoned past the limit, so a compression bomb costs at most one decoded network read
  (httpcore reads 64 KiB; deflate expands at most ~1000×) before it is refused;
- failures as a few exception classes whose names, never their text, reach the screen.
"""

from __future__ import annotations

import ssl
from urllib.parse import urlsplit, urlunsplit

import httpx

from kvtop import __version__
from kvtop.sources.http_faults import ConnectFailed, FetchFailed, TimedOut, TooLarge

__all__ = ["ConnectFailed", "FetchFailed", "HttpGetter", "TimedOut", "TooLarge"]

USER_AGENT = f"kvtop/{__version__}"
MAX_REDIRECTS = 3
# A proxy on another machine cannot reach this host's loopback interface: no transport of its
# own (None) means no proxy for these.
_LOOPBACK_DIRECT: dict[str, httpx.AsyncBaseTransport | None] = {
    "all://127.0.0.1": None,
    "all://localhost": None,
    "all://[::1]": None,
}


def _tls_for(https: bool) -> ssl.SSLContext | bool:
    """httpx's own verification for an https server. For an http server, a verifying context
    with no CA loaded: httpx would load certifi's bundle for every client (30–90 ms on the way to
    the first frame here, bench_vs_nvitop) though such a client never makes a TLS handshake with
    it (redirects stay on the origin; an https proxy gets httpcore's own context). Were one ever
    made, it would fail, not pass unverified."""
    return True if https else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


class HttpGetter:
    """GETs from the server at `url` (http or https, with an optional path prefix)."""

    def __init__(self, url: str, max_body_bytes: int, timeout_s: float = 5.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("an http(s) URL with a host")
        netloc = parts.netloc.rpartition("@")[2]  # credentials never leave as Basic auth
        self.base = urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        self.https = parts.scheme == "https"
        self.origin = httpx.URL(self.base).copy_with(path="/")
        self.max_body_bytes = max_body_bytes
        self.timeout_s = timeout_s
        self._client: httpx.AsyncClient | None = None

    def _open(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            headers={"User-Agent": USER_AGENT, "Accept-Encoding": "gzip, deflate"},
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
            timeout=httpx.Timeout(self.timeout_s),
            trust_env=True,
            verify=_tls_for(self.https),
            follow_redirects=False,  # followed below, within the origin only
            mounts=_LOOPBACK_DIRECT,
        )

    async def get(self, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
        """(status, body); the body only for 200 (others are closed unread)."""
        if self._client is None:
            self._client = self._open()
        url = httpx.URL(self.base + path)
        try:
            for _ in range(MAX_REDIRECTS + 1):
                async with self._client.stream("GET", url, headers=headers) as response:
                    if response.status_code != 200:
                        if not response.has_redirect_location:
                            return response.status_code, b""
                        url = url.join(response.headers["location"])
                        if not _same_origin(url, self.origin):
                            raise FetchFailed("a redirect to another server") from None
                        continue
                    return 200, await self._body(response)
            raise FetchFailed(f"more than {MAX_REDIRECTS} redirects")
        except httpx.ConnectTimeout:
            raise ConnectFailed from None  # no connection at all: not a slow server
        except httpx.TimeoutException:
            raise TimedOut from None
        except httpx.ConnectError as exc:
            if _caused_by(exc, ssl.SSLError):
                raise FetchFailed("TLS failed") from None
            raise ConnectFailed from None  # refused, unreachable, name not found
        except httpx.HTTPError as exc:  # not HTTP, cut short, a bad encoding, a proxy error
            raise FetchFailed(type(exc).__name__) from None

    async def _body(self, response: httpx.Response) -> bytes:
        declared = response.headers.get("content-length", "")
        encoded = response.headers.get("content-encoding", "identity").lower() != "identity"
        if not encoded and declared.isdigit() and int(declared) > self.max_body_bytes:
            raise TooLarge
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():  # decoded
            size += len(chunk)
            if size > self.max_body_bytes:
                raise TooLarge  # leaving the stream closes the connection unread
            chunks.append(chunk)
        return b"".join(chunks)

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()


def _same_origin(url: httpx.URL, origin: httpx.URL) -> bool:
    return (url.scheme, url.host, url.port) == (origin.scheme, origin.host, origin.port)


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, kind):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
