"""Scrape an SGLang server's /metrics and /server_info over HTTP (async, httpx, no Textual)."""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urlsplit, urlunsplit

from kvtop.model.snapshot import ANSWERED, METRICS_DISABLED, SLOW, UNREACHABLE, SourceState
from kvtop.sglang.metrics import MetricsSample, ServerInfo, parse_exposition, parse_server_info
from kvtop.sources.api_key import ApiKeyError as ApiKeyError
from kvtop.sources.api_key import load_api_key as load_api_key
from kvtop.sources.http_faults import ConnectFailed, FetchFailed, TimedOut, TooLarge

if TYPE_CHECKING:
    from kvtop.sources.http_get import HttpGetter

_T = TypeVar("_T")

__all__ = [
    "ApiKeyError",
    "MetricsReading",
    "MetricsSource",
    "ServerInfoReading",
    "load_api_key",
    "parse_metrics_body",
    "parse_server_info_body",
]

# After failures /metrics is asked again at most this far apart: a server back from a restart
# is seen within seconds (a refused connection costs next to nothing); /server_info, read once
# per server start, backs off further.
_MAX_BACKOFF_S = 4.0
_HTTP_GET = "kvtop.sources.http_get"
# Bodies up to this size are parsed in the event loop (about 3 ms at most; see _parsed).
INLINE_PARSE_BYTES = 512 * 1024  # imported on the first scrape (MetricsSource._getter)
_MAX_INFO_BACKOFF_S = 30.0
# The whole fetch (connect, headers, body): a 2 s answer is slow but in time, a hung server is
# cut here. Each source runs in its own task, so the screen never waits for it. Read when a
# source is made (not bound as a default), so a test can prove the cut with a shorter limit.
FETCH_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class MetricsReading:
    sample: MetricsSample | None
    # ok: fresh data. degraded: the server is there but this fetch failed (timeout, 5xx, a body
    # that is not SGLang's); retry with back-off. off: nothing to read until the operator
    # changes something (no server, metrics disabled, API key missing or wrong).
    status: SourceState
    problem: str | None  # a sentence with a next step; None when status is ok
    fetched_at: float  # time.time() when the fetch ended
    # Why there are no numbers (tui/kvtop/model/snapshot.py: unreachable, metrics_disabled,
    # answered); None when status is ok.
    cause: str | None = None


@dataclass(frozen=True, slots=True)
class ServerInfoReading:
    info: ServerInfo | None
    status: SourceState
    problem: str | None
    fetched_at: float


class _Fault(Exception):
    """A fetch failed; carries the status and the sentence for the operator."""

    def __init__(self, status: SourceState, problem: str, cause: str = ANSWERED) -> None:
        super().__init__(problem)
        self.status = status
        self.problem = problem
        self.cause = cause


def _public_url(url: str) -> str:
    """The URL without user:password, safe to show."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url.rstrip("/")
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, "")).rstrip("/")


class MetricsSource:
    """One server's /metrics and /server_info over one kept-alive connection, opened on use."""

    def __init__(
        self,
        url: str = "http://127.0.0.1:30000",
        api_key: str | None = None,
        timeout_s: float | None = None,  # FETCH_TIMEOUT_S
        max_body_bytes: int = 20 * 2**20,
        interval_s: float = 1.0,
    ) -> None:
        self.url = url.rstrip("/")
        self._shown_url = _public_url(self.url)
        self.__api_key = api_key
        self.timeout_s = FETCH_TIMEOUT_S if timeout_s is None else timeout_s
        self.max_body_bytes = max_body_bytes
        self.interval_s = interval_s
        self._failures = 0
        # The latest /metrics body and its sample: an unchanged body (a server at rest, whose
        # gauges move only with new batches) is not parsed again.
        self._last_body: bytes | None = None
        self._last_sample: MetricsSample | None = None
        self._http: HttpGetter | None = None
        # /server_info has a connection and a back-off of its own: a hung or refusing
        # /server_info must neither hold up /metrics nor be asked again every round.
        self._info_http: HttpGetter | None = None
        self._info_failures = 0
        self._info_due = 0.0  # time.monotonic() before which /server_info is not asked again

    def __repr__(self) -> str:
        key = "set" if self.__api_key else "none"
        return f"MetricsSource(url={self._shown_url!r}, api_key={key}, timeout_s={self.timeout_s})"

    async def __aenter__(self) -> MetricsSource:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for getter in (self._http, self._info_http):
            if getter is not None:
                await getter.aclose()
        self._http = self._info_http = None

    def next_delay_s(self) -> float:
        """Seconds until the next fetch: the interval, then 1, 2, 4 … intervals after failures
        (never more than 4 s: a server back from a restart is seen within that)."""
        if self._failures == 0:
            return self.interval_s
        return min(_MAX_BACKOFF_S, self.interval_s * 2.0 ** (self._failures - 1))

    def _record(self, ok: bool) -> None:
        self._failures = 0 if ok else self._failures + 1

    def server_info_due(self) -> bool:
        """False while /server_info is backed off after a failure (same steps as /metrics)."""
        return time.monotonic() >= self._info_due

    def _record_info(self, ok: bool) -> None:
        self._info_failures = 0 if ok else self._info_failures + 1
        delay = min(_MAX_INFO_BACKOFF_S, self.interval_s * 2.0 ** (self._info_failures - 1))
        self._info_due = 0.0 if ok else time.monotonic() + delay

    # ---------------------------------------------------------------------------------------

    async def scrape(self) -> MetricsReading:
        try:
            status, body = await self._get("/metrics", auth=False)
            if status == 404:
                raise _Fault(
                    SourceState.OFF,
                    f"{self._shown_url}/metrics answers 404: the server runs without "
                    "--enable-metrics (SGLang's default); token usage comes from the Decode "
                    "batch lines in the log instead. Add --enable-metrics to its launch for "
                    "live KV numbers.",
                    METRICS_DISABLED,
                )
            self._check_status(status, "/metrics")
            if body == self._last_body and self._last_sample is not None:
                sample = self._last_sample
            else:
                sample = await _parsed(parse_metrics_body, body)
                self._last_body, self._last_sample = body, sample
            if sample.families_seen == 0:
                raise _Fault(
                    SourceState.DEGRADED,
                    f"{self._shown_url}/metrics answered, but with no sglang: metrics (an HTML "
                    "page or something else): check that --url points at the SGLang server "
                    "itself, not a proxy or another service.",
                )
        except _Fault as fault:
            self._record(False)
            return MetricsReading(None, fault.status, fault.problem, time.time(), fault.cause)
        self._record(True)
        return MetricsReading(sample, SourceState.OK, None, time.time())

    async def server_info(self) -> ServerInfoReading:
        """``/server_info``, or ``/get_server_info`` (SGLang before 0.5) when that is a 404."""
        try:
            path = "/server_info"
            status, body = await self._get(path, auth=True)
            if status == 404:
                path = "/get_server_info"
                status, body = await self._get(path, auth=True)
            if status == 404:
                raise _Fault(
                    SourceState.OFF,
                    f"{self._shown_url} has neither /server_info nor /get_server_info: check "
                    "that --url points at an SGLang server.",
                )
            self._check_status(status, path)
            info = await _parsed(parse_server_info_body, body)
            if info is None:
                raise _Fault(
                    SourceState.DEGRADED,
                    f"{self._shown_url}{path} did not answer with a JSON object: check that "
                    "--url points at the SGLang server itself.",
                )
        except _Fault as fault:
            self._record_info(False)
            return ServerInfoReading(None, fault.status, fault.problem, time.time())
        self._record_info(True)
        return ServerInfoReading(info, SourceState.OK, None, time.time())

    # ---------------------------------------------------------------------------------------

    def _check_status(self, status: int, path: str) -> None:
        where = f"{self._shown_url}{path}"
        if status == 401:
            if self.__api_key:
                raise _Fault(
                    SourceState.OFF, f"{where}: the API key was refused by {path}; check the key."
                )
            raise _Fault(
                SourceState.OFF,
                f"{where}: the server wants an API key: pass --api-key-file or set SGLANG_API_KEY.",
            )
        if status == 403:
            raise _Fault(
                SourceState.OFF,
                f"{where}: the API key was refused (403); check the key, or use the admin key "
                "if the server needs one.",
            )
        if status >= 500:
            raise _Fault(
                SourceState.DEGRADED,
                f"{where} answered {status}: the server is failing or still starting; "
                "kvtop keeps retrying. Check the server log.",
            )
        if status != 200:
            raise _Fault(
                SourceState.DEGRADED,
                f"{where} answered {status}: check that --url points at the SGLang server.",
            )

    async def _get(self, path: str, *, auth: bool) -> tuple[int, bytes]:
        """(status, body) of a GET, the whole fetch bounded by timeout_s."""
        try:
            return await asyncio.wait_for(self._fetch(path, auth), self.timeout_s)
        except _Fault:
            raise
        except (asyncio.TimeoutError, TimedOut):
            raise _Fault(
                SourceState.DEGRADED,
                f"{self._shown_url}{path} did not answer within {self.timeout_s:g} s: the "
                "server may be overloaded or hung; kvtop keeps the last numbers and retries. "
                "Check the server's log and load.",
                SLOW,
            ) from None
        except ConnectFailed:
            raise _Fault(
                SourceState.OFF,
                f"nothing listens on {self._shown_url}: is the server running, and is --url right?",
                UNREACHABLE,
            ) from None
        except TooLarge:
            raise self._too_large(path) from None
        except (FetchFailed, OSError, UnicodeError, ValueError) as exc:
            # The exception text may quote the request; only its class name is shown.
            raise _Fault(
                SourceState.DEGRADED,
                f"fetching {self._shown_url}{path} failed ({type(exc).__name__}): kvtop keeps "
                "retrying; check the server and the network.",
                UNREACHABLE,
            ) from None

    async def _fetch(self, path: str, auth: bool) -> tuple[int, bytes]:
        headers = {"Accept": "text/plain, application/json"}
        if auth:  # /server_info: its own connection (the same size cap)
            if self._info_http is None:
                self._info_http = await self._getter()
            if self.__api_key:
                headers["Authorization"] = f"Bearer {self.__api_key}"
            return await self._info_http.get(path, headers)
        if self._http is None:
            self._http = await self._getter()
        return await self._http.get(path, headers)

    async def _getter(self) -> HttpGetter:
        # httpx (with httpcore, h11, anyio and the email and urllib modules it pulls in: about
        # 26 ms here) is imported on the first scrape and in a worker thread, so that the first
        # frame (the GPUs, drawn as soon as NVML answers) does not wait for it.
        if _HTTP_GET not in sys.modules:
            await asyncio.to_thread(importlib.import_module, _HTTP_GET)
        from kvtop.sources.http_get import HttpGetter

        return HttpGetter(self.url, self.max_body_bytes, self.timeout_s)

    def _too_large(self, path: str) -> _Fault:
        limit_mib = self.max_body_bytes / 2**20
        return _Fault(
            SourceState.DEGRADED,
            f"{self._shown_url}{path} sent more than {limit_mib:g} MiB, so kvtop stopped "
            "reading: check that --url points at the SGLang server (a real scrape is about "
            "100 KB).",
        )


# Parsed in a worker thread, off the event loop: a body may be up to the size cap (20 MiB), and
# even the parsers' linear time is too long to hold the screen for.
async def _parsed(parse: Callable[[bytes], _T], body: bytes) -> _T:
    """A body parsed here in the event loop when it is small, in a worker thread when large.
    A worker costs more than the parse: on the VMs kvtop is measured on, waking a thread that
    slept a second costs ~1-5 ms of CPU, the parse of a 113 KB /metrics 0.7 ms. A large body
    (up to the size limit) still goes to a thread so that the screen never waits for it."""
    if len(body) <= INLINE_PARSE_BYTES:
        return parse(body)
    return await asyncio.to_thread(parse, body)


def parse_metrics_body(body: bytes) -> MetricsSample:
    """A /metrics body as fetched (bytes) -> the sample."""
    return parse_exposition(body.decode("utf-8", errors="replace"))


def parse_server_info_body(body: bytes) -> ServerInfo | None:
    """A /server_info body as fetched (bytes) -> what it says; None when not a JSON object."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    return parse_server_info(data) if isinstance(data, dict) else None
