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

import asyncio
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from kvtop import __version__
from kvtop.sglang.control_chars import make_visible

USER_AGENT = f"kvtop/{__version__}"
DEFAULT_TIMEOUT_S = 5.0
# The decoded answer's cap, as /metrics has one: a fleet of ~500 hosts answers its largest query
# in a few MiB; 100 MB of JSON would take gigabytes to decode.
MAX_ANSWER_BYTES = 32 * 2**20
# Prometheus' free text (warnings, errors, its version) is cut here for the screen.
MAX_TEXT = 500
# A refresh asks ten requests in parallel (tui/kvtop/fleet/reader.py).
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


class Refused(ValueError):
    """A part of an answer kvtop does not read; str() names it ("a label value that is not a
    string")."""


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
        raise Refused("a value that is not a string")
    return float(text)  # float() reads all of Prometheus' spellings, NaN and ±Inf included


def labels_of(metric: object) -> dict[str, str]:
    """A series' labels, each name and value through the one filter for text from outside;
    a label that is not a string is refused (ValueError)."""
    if metric is None:
        return {}
    if not isinstance(metric, Mapping):
        raise Refused("labels that are not an object")
    labels: dict[str, str] = {}
    for name, value in metric.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise Refused("a label value that is not a string")
        labels[make_visible(name)] = make_visible(value)
    return labels


def _sample(item: Mapping) -> Sample:
    ts, value = item["value"]
    return Sample(labels_of(item.get("metric")), to_float(value), float(ts))


def _series(item: Mapping) -> Series:
    points = tuple((float(ts), to_float(v)) for ts, v in item.get("values") or ())
    return Series(labels_of(item.get("metric")), points)


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
    raise Refused(f"an unknown resultType {kind!r}")


def _target(item: object) -> dict:
    if not isinstance(item, Mapping):
        raise Refused("a target that is not an object")
    clean: dict = {}
    for key, value in item.items():
        if key in ("labels", "discoveredLabels"):
            value = labels_of(value)
        elif isinstance(value, str):
            value = make_visible(value)[:MAX_TEXT]
        clean[str(key)] = value
    return clean


def bad_answer(base: str, path: str, exc: BaseException) -> PrometheusError:
    """An answer of a shape kvtop does not read, as a sentence (the next refresh asks again)."""
    what = make_visible(str(exc))[:MAX_TEXT] if isinstance(exc, Refused) else type(exc).__name__
    return PrometheusError(
        f"Prometheus at {base} answered {path} in a shape kvtop does not read ({what}); "
        "check that the URL is a Prometheus server; the next refresh asks again.",
        "bad_answer",
    )


def _where(url: str) -> str:
    """The server as messages name it: scheme://host:port/path, no credentials or query."""
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


class PrometheusApi:
    """GETs from one Prometheus server. `url` is its base (http(s)://host:port[/prefix])."""

    def __init__(
        self,
        url: str,
        *,
        bearer_token: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                f"The Prometheus URL {url!r} is not an http(s) URL with a host; give one such "
                "as http://prometheus:9090."
            )
        self.base = _where(url)
        self.timeout_s = timeout_s
        self.max_answer_bytes = max_answer_bytes
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
        return self._parsed("/api/v1/query", *await self._call("/api/v1/query", form))

    async def query_range(self, promql: str, *, start: float, end: float, step_s: float) -> Answer:
        form = {
            "query": promql,
            "start": repr(start),
            "end": repr(end),
            "step": repr(step_s),
            "timeout": _duration(self.timeout_s),
        }
        return self._parsed("/api/v1/query_range", *await self._call("/api/v1/query_range", form))

    def _parsed(self, path: str, data: dict, warnings: tuple[str, ...]) -> Answer:
        """The answer read, or refused with a sentence: any shape kvtop does not read (a label
        that is not a string, a value that is not a number, nesting past the stack)."""
        try:
            return parse_answer(data, warnings)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError) as exc:
            raise bad_answer(self.base, path, exc) from None

    async def targets(self) -> list[dict]:
        """The active targets (labels, health, lastError, lastScrape, scrapeInterval …), their
        strings filtered; a target of another shape is refused with a sentence."""
        data, _ = await self._call("/api/v1/targets", {"state": "active"})
        try:
            return [_target(t) for t in data.get("activeTargets") or ()]
        except (ValueError, TypeError, AttributeError) as exc:
            raise bad_answer(self.base, "/api/v1/targets", exc) from None

    async def build_version(self) -> str | None:
        data, _ = await self._call("/api/v1/status/buildinfo", {})
        version = data.get("version")
        return make_visible(version)[:MAX_TEXT] if isinstance(version, str) else None

    async def _call(self, path: str, params: dict[str, str]) -> tuple[dict, tuple]:
        if self._client is None:
            self._client = self._open()
        try:
            # One deadline for the whole exchange: httpx's timeout is per read, and an answer
            # that drips a byte a second would never meet it.
            status, content = await asyncio.wait_for(
                self._get(self._client, path, params), self.timeout_s
            )
        except (httpx.TimeoutException, asyncio.TimeoutError):
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
        return self._envelope(status, content, path)

    async def _get(
        self, client: httpx.AsyncClient, path: str, params: dict[str, str]
    ) -> tuple[int, bytes]:
        """The status and the decoded body, refused past MAX_ANSWER_BYTES (read as a stream,
        so a compressed answer costs at most one decoded read more than the cap)."""
        async with client.stream("GET", self.base + path, params=params) as response:
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():  # decoded
                size += len(chunk)
                if size > self.max_answer_bytes:
                    raise PrometheusError(
                        f"Prometheus at {self.base} answered {path} with more than "
                        f"{self.max_answer_bytes // 2**20} MiB; narrow the fleet with "
                        "--selector.",
                        "too_large",
                        response.status_code,
                    )
                chunks.append(chunk)
            return response.status_code, b"".join(chunks)

    def _envelope(self, status: int, content: bytes, path: str) -> tuple[dict, tuple]:
        if status in (401, 403):
            raise PrometheusError(
                f"Prometheus at {self.base} refused kvtop (HTTP {status}); check the token "
                "given with --prometheus-bearer-file.",
                "auth",
                status,
            )
        try:
            body = json.loads(content)
            ok = isinstance(body, dict) and body.get("status") in ("success", "error")
        except (ValueError, RecursionError):  # not JSON, or nested past Python's stack
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
        warnings = body.get("warnings") or []
        if not isinstance(warnings, list):
            warnings = [warnings]
        return data, tuple(make_visible(str(w))[:MAX_TEXT] for w in warnings)

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
    kind = make_visible(str(body.get("errorType") or "http"))[:MAX_TEXT]
    error = make_visible(str(body.get("error") or "no reason given"))[:MAX_TEXT]
    step = _NEXT_STEP.get(kind, "check Prometheus' log")
    return PrometheusError(
        f"Prometheus at {base} refused the query (HTTP {status}, {kind}: {error}); {step}.",
        kind,
        status,
    )


def _duration(seconds: float) -> str:
    """Prometheus' duration for `timeout=`: whole milliseconds."""
    return f"{max(1, math.ceil(seconds * 1000))}ms"
