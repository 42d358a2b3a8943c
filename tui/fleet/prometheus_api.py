"""A Prometheus server's HTTP API, as kvtop's fleet view reads it (httpx.AsyncClient).

Four endpoints (`/api/v1/query`, `/api/v1/query_range`, `/api/v1/targets`,
`/api/v1/status/buildinfo`), one envelope parser, values as floats ("NaN" and "+Inf" included).
Policy:
- a client deadline on every request (default 5 s) besides Prometheus' own `timeout=`, which is
  not a hard bound (a pathological subquery ran 17–35 s past a 5 ms `timeout=`);
- no retries: a refresh that failed is tried again by the next refresh, never at once (a 503
  "query timed out" repeated would only load the server again);
- a bearer token, when given, as the `Authorization` header; never in a URL or a message;
- every failure (refused, name not found, deadline, HTTP 4xx/5xx with Prometheus' errorType and
  error, a body that is not Prometheus' JSON such as a proxy's HTML page, 401/403) is one
  exception, PrometheusError, whose text is a sentence with a next step, fit for the screen.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from tui import __version__

USER_AGENT = f"kvtop/{__version__}"
DEFAULT_TIMEOUT_S = 5.0
# A refresh asks ten requests in parallel (tui/fleet/reader.py).
MAX_CONNECTIONS = 12
# No transport of its own (None) means no proxy for loopback.
_LOOPBACK_DIRECT: dict[str, httpx.AsyncBaseTransport | None] = {
    "all://127.0.0.1": None,
    "all://localhost": None,
    "all://[::1]": None,
}


class PrometheusError(Exception):
    """Prometheus could not answer; str() is a sentence with a next step (no secrets in it).

    `kind`: "connect", "timeout", "auth", "http", "bad_data", "execution", "not_prometheus".
    """

    def __init__(self, message: str, kind: str, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


@dataclass(frozen=True, slots=True)
class Sample:
    """One series of an instant vector: its labels (`__name__` included when Prometheus kept
    it) and its value at the evaluation time `ts`."""

    labels: Mapping[str, str]
    value: float
    ts: float


@dataclass(frozen=True, slots=True)
class Series:
    """One series of a range query: (ts, value) points."""

    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True, slots=True)
class Answer:
    """A query's result: `vector` samples, or `series` for a matrix, or a `scalar`."""

    result_type: str
    vector: tuple[Sample, ...] = ()
    series: tuple[Series, ...] = ()
    scalar: float | None = None
    warnings: tuple[str, ...] = ()


def to_float(text: object) -> float:
    """Prometheus writes values as strings: "1", "1e+09", "NaN", "+Inf", "-Inf"."""
    if not isinstance(text, str):
        raise ValueError("a value that is not a string")
    return float(text)  # float() reads all of Prometheus' spellings, NaN and ±Inf included


def _sample(item: Mapping) -> Sample:
    ts, value = item["value"]
    return Sample(dict(item.get("metric") or {}), to_float(value), float(ts))


def _series(item: Mapping) -> Series:
    points = tuple((float(ts), to_float(v)) for ts, v in item.get("values") or ())
    return Series(dict(item.get("metric") or {}), points)


def parse_answer(data: Mapping, warnings: tuple[str, ...] = ()) -> Answer:
    """The `data` of a successful /query or /query_range envelope."""
    kind = data.get("resultType")
    result: Any = data.get("result")  # decoded JSON, of the shape resultType names
    if kind == "vector":
        return Answer(kind, vector=tuple(_sample(i) for i in result), warnings=warnings)
    if kind == "matrix":
        return Answer(kind, series=tuple(_series(i) for i in result), warnings=warnings)
    if kind == "scalar":
        return Answer(kind, scalar=to_float(result[1]), warnings=warnings)
    if kind == "string":
        return Answer(kind, warnings=warnings)
    raise ValueError(f"an unknown resultType {kind!r}")


def _where(url: str) -> str:
    """The server as messages name it: scheme://host:port/path, no credentials or query."""
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


class PrometheusApi:
    """GETs from one Prometheus server. `url` is its base (http(s)://host:port[/prefix])."""

    def __init__(
        self, url: str, *, bearer_token: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"The Prometheus URL {url!r} is not an http(s) URL with a host; give one such "
                "as http://prometheus:9090."
            )
        self.base = _where(url)
        self.timeout_s = timeout_s
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if bearer_token:
            headers["Authorization"] = f"Bearer {bearer_token}"
        self._headers = headers
        self._client: httpx.AsyncClient | None = None

    def _open(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            headers=self._headers,
            timeout=httpx.Timeout(self.timeout_s),
            limits=httpx.Limits(
                max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS
            ),
            trust_env=True,
            follow_redirects=False,
            mounts=_LOOPBACK_DIRECT,
        )

    async def query(self, promql: str, *, at: float | None = None) -> Answer:
        """An instant query. GET, as every request of kvtop's (tests/process/test_read_only.py): the
        refresh's longest query is under 2 KB of URL."""
        form = {"query": promql, "timeout": _duration(self.timeout_s)}
        if at is not None:
            form["time"] = repr(at)
        return parse_answer(*await self._call("/api/v1/query", form))

    async def query_range(self, promql: str, *, start: float, end: float, step_s: float) -> Answer:
        form = {
            "query": promql,
            "start": repr(start),
            "end": repr(end),
            "step": repr(step_s),
            "timeout": _duration(self.timeout_s),
        }
        return parse_answer(*await self._call("/api/v1/query_range", form))

    async def targets(self) -> list[dict]:
        """The active targets (labels, health, lastError, lastScrape, scrapeInterval …)."""
        data, _ = await self._call("/api/v1/targets", {"state": "active"})
        return list(data.get("activeTargets") or ())

    async def build_version(self) -> str | None:
        data, _ = await self._call("/api/v1/status/buildinfo", {})
        version = data.get("version")
        return version if isinstance(version, str) else None

    async def _call(self, path: str, params: dict[str, str]) -> tuple[dict, tuple]:
        if self._client is None:
            self._client = self._open()
        try:
            response = await self._client.get(self.base + path, params=params)
        except httpx.TimeoutException:
            raise PrometheusError(
                f"Prometheus at {self.base} did not answer within {self.timeout_s:g} s; "
                "check that it is not overloaded, or raise the timeout.",
                "timeout",
            ) from None
        except httpx.ConnectError:
            raise PrometheusError(
                f"Cannot reach Prometheus at {self.base} (refused, unreachable or name not "
                "found); check the URL and that Prometheus is running.",
                "connect",
            ) from None
        except httpx.HTTPError as exc:
            raise PrometheusError(
                f"The exchange with Prometheus at {self.base} broke ({type(exc).__name__}); "
                "check the URL and any proxy between kvtop and Prometheus.",
                "http",
            ) from None
        return self._envelope(response, path)

    def _envelope(self, response: httpx.Response, path: str) -> tuple[dict, tuple]:
        status = response.status_code
        if status in (401, 403):
            raise PrometheusError(
                f"Prometheus at {self.base} refused kvtop (HTTP {status}); check the token "
                "given with --prometheus-bearer-file.",
                "auth",
                status,
            )
        try:
            body = json.loads(response.content)
            ok = isinstance(body, dict) and body.get("status") in ("success", "error")
        except ValueError:
            ok = False
        if not ok:
            raise PrometheusError(
                f"The server at {self.base} answered {path} with HTTP {status} and something "
                "that is not Prometheus' JSON (a proxy's page?); check that the URL is the "
                "Prometheus server itself.",
                "not_prometheus",
                status,
            )
        if body["status"] == "error":
            raise _api_error(self.base, status, body)
        data = body.get("data")
        if not isinstance(data, dict):
            raise PrometheusError(
                f"The server at {self.base} answered {path} without data; check that the URL "
                "is the Prometheus server itself.",
                "not_prometheus",
                status,
            )
        warnings = tuple(str(w) for w in body.get("warnings") or ())
        return data, warnings

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()


_NEXT_STEP = {
    "bad_data": 'check the query or --selector (PromQL label matchers such as job="gpu")',
    "execution": "check the query; Prometheus could not evaluate it",
    "timeout": "the query took too long; narrow it with --selector or lighten Prometheus' load",
    "canceled": "the query was cancelled; the next refresh asks again",
    "unavailable": "Prometheus is not ready yet; the next refresh asks again",
}


def _api_error(base: str, status: int, body: Mapping) -> PrometheusError:
    kind = str(body.get("errorType") or "http")
    error = str(body.get("error") or "no reason given")
    step = _NEXT_STEP.get(kind, "check Prometheus' log")
    return PrometheusError(
        f"Prometheus at {base} refused the query (HTTP {status}, {kind}: {error}); {step}.",
        kind,
        status,
    )


def _duration(seconds: float) -> str:
    """Prometheus' duration for `timeout=`: whole milliseconds."""
    return f"{max(1, math.ceil(seconds * 1000))}ms"
