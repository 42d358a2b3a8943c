"""The fleet from a Prometheus server: a few PromQL queries in parallel, joined by
tui/kvtop/fleet/join.py. `FleetReader.read()` never raises for Prometheus' problems: the Fleet
it returns carries them in `problem`, a sentence with a next step.

The selector (`--selector`) is PromQL label matchers (`job="gpu-prod",cluster="eu"`, braces
optional). A host is in the fleet when any of its targets matches (`up{<matchers>}`); its other
exporters are then read too (each query ends `and on(host) up{<matchers>}`, and the join keeps
only the selected hosts, so a setup without a `host` label is narrowed as well). Prometheus
parses the matchers: a bad one is its 400 bad_data, shown as a sentence.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import stat
import time
from pathlib import Path
from typing import Any

from kvtop.export import families as ff
from kvtop.fleet import amd_families as amd
from kvtop.fleet.join import WHAT, Readings, Row, join
from kvtop.fleet.model import Fleet
from kvtop.fleet.prometheus_api import (
    DEFAULT_TIMEOUT_S,
    Answer,
    PrometheusApi,
    PrometheusError,
    Series,
)

KVTOP_FAMILIES = (
    ff.GPU_MEMORY,
    ff.GPU_RESERVE,
    ff.GPU_TOTAL,
    ff.GPU_UP,
    ff.GPU_INFO,
    ff.GPU_USED,
    ff.GPU_TEMPERATURE,
    ff.GPU_POWER,
    ff.GPU_POWER_LIMIT,
    ff.GPU_UTILIZATION,
    ff.KV_POOL_TOKENS,
    ff.KV_POOL_PREDICTED_TOKENS,
    ff.KV_HEADROOM,
    ff.STARTUP_PHASE_SECONDS,
    ff.STARTUP_STATE,
    ff.RESTARTS,
    ff.SOURCE_UP,
    ff.SOURCE_AGE,
    ff.MISMATCH,
    ff.VERDICT,
    ff.ALERT,
)
DCGM_FAMILIES = (
    ff.DCGM_FB_USED,
    ff.DCGM_FB_FREE,
    ff.DCGM_FB_RESERVED,
    ff.DCGM_GPU_UTIL,
    ff.DCGM_GPU_TEMP,
    ff.DCGM_POWER,
)
NODE_FAMILIES = (ff.NODE_MEM_TOTAL, ff.NODE_MEM_AVAILABLE)
# How far back a gone host is still shown ("last seen …"): Prometheus' default lookback.
LOOKBACK = "5m"
# Down targets whose last `up == 1` is looked up per refresh (raw samples: 300 a target at 1 s).
MAX_LAST_SEEN = 64
# SGLang's gauges per host: ratios as the max over ranks; counts summed over DP groups and
# engines, each counted once (with --enable-metrics-for-all-schedulers every TP rank repeats
# its group's numbers).
_SGLANG_BY = "host, instance, model_name, engine_type"
_SGLANG_ONCE = f"{_SGLANG_BY}, dp_rank, pp_rank"
SGLANG_AGGREGATES = {
    "token_usage": f"max by ({_SGLANG_BY}) (sglang:token_usage)",
    "used_tokens": f"sum by ({_SGLANG_BY}) (max by ({_SGLANG_ONCE}) (sglang:num_used_tokens))",
    "pool_tokens": f"sum by ({_SGLANG_BY}) (max by ({_SGLANG_ONCE}) (sglang:max_total_num_tokens))",
    "running": f"sum by ({_SGLANG_BY}) (max by ({_SGLANG_ONCE}) (sglang:num_running_reqs))",
    "queued": f"sum by ({_SGLANG_BY}) (max by ({_SGLANG_ONCE}) (sglang:num_queue_reqs))",
    "throughput": f"sum by ({_SGLANG_BY}) (max by ({_SGLANG_ONCE}) (sglang:gen_throughput))",
}
# What history() can draw for one host, per minute of the drill-down.
HISTORY = {
    "kv_usage": 'max by (host) (sglang:token_usage{{host="{host}"}})',
    # DCGM's, else AMD's device metrics exporter's, else (a host without either) kvtop's own
    # NVML families.
    "gpu_used_ratio": (
        'max by (host) (DCGM_FI_DEV_FB_USED{{host="{host}"}} / (DCGM_FI_DEV_FB_USED{{host="{host}"}}'
        ' + DCGM_FI_DEV_FB_FREE{{host="{host}"}} + DCGM_FI_DEV_FB_RESERVED{{host="{host}"}}))'
        f' or max by (host) ({amd.USED_VRAM}{{{{host="{{host}}"}}}}'
        f' / {amd.TOTAL_VRAM}{{{{host="{{host}}"}}}})'
        f' or max by (host) ({ff.GPU_USED}{{{{host="{{host}}"}}}}'
        f' / {ff.GPU_TOTAL}{{{{host="{{host}}"}}}})'
    ),
    "headroom_bytes": f'min by (host) ({ff.KV_HEADROOM}{{{{host="{{host}}"}}}})',
    "running_reqs": 'sum by (host) (sglang:num_running_reqs{{host="{host}"}})',
    "queued_reqs": 'sum by (host) (sglang:num_queue_reqs{{host="{host}"}})',
}


HISTORY_MIN_STEP_S = 15.0  # Prometheus' default scrape interval: a finer step repeats samples


def history_step_s(minutes: float, min_step_s: float = HISTORY_MIN_STEP_S) -> float:
    """history()'s step over `minutes`: ≥ `min_step_s` and at most ~240 points."""
    return max(min_step_s, math.ceil(minutes * 60 / 240))


class BearerFileError(Exception):
    """The --prometheus-bearer-file cannot be used; str() says why and what to do."""


MAX_TOKEN_FILE_CHARS = 16_384  # a token is one line; /dev/zero or a log given by mistake is not


def read_bearer_token(path: str | Path) -> str:
    """The token in `path` (surrounding whitespace dropped), read up to MAX_TOKEN_FILE_CHARS."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read(MAX_TOKEN_FILE_CHARS + 1)
    except FileNotFoundError:
        raise BearerFileError(
            f"The bearer token file {path} does not exist; check the path."
        ) from None
    except IsADirectoryError:
        raise BearerFileError(f"{path} is a directory, not a bearer token file.") from None
    except PermissionError:
        raise BearerFileError(
            f"kvtop may not read the bearer token file {path}; check its permissions."
        ) from None
    except UnicodeDecodeError:
        raise BearerFileError(
            f"The bearer token file {path} is not text; a token is one line of ASCII."
        ) from None
    except OSError as exc:
        raise BearerFileError(
            f"The bearer token file {path} cannot be read ({type(exc).__name__}); check it."
        ) from None
    if len(text) > MAX_TOKEN_FILE_CHARS:
        raise BearerFileError(
            f"The bearer token file {path} holds more than {MAX_TOKEN_FILE_CHARS:,} characters; "
            "a token is one line. Check the path."
        )
    token = text.strip()
    if not token:
        raise BearerFileError(f"The bearer token file {path} is empty; put the token in it.")
    if any(c.isspace() for c in token):
        raise BearerFileError(
            f"The bearer token file {path} holds more than one word; it must hold the token only."
        )
    if not all(0x21 <= ord(c) <= 0x7E for c in token):
        raise BearerFileError(
            f"The bearer token file {path} holds characters an HTTP header cannot carry "
            "(non-ASCII or control characters); check the file."
        )
    return token


def bearer_file_warning(path: str | Path) -> str | None:
    """A sentence when the token file (a link's target included) may be read by others than
    its owner; None when it is private or cannot be looked at."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if mode & 0o077 == 0:
        return None
    target = os.path.realpath(path)
    where = f"{path} (a link to {target})" if target != os.path.abspath(path) else f"{path}"
    return (
        f"the bearer token file {where} may be read by other users (mode "
        f"{stat.S_IMODE(mode):04o}); make it private: chmod 600 {target}."
    )


def matchers(selector: str | None) -> str:
    """`job="x"` or `{job="x"}` → `job="x"` (Prometheus checks the rest)."""
    text = (selector or "").strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    return text


def _names_regex(names: tuple[str, ...]) -> str:
    return "|".join(re.escape(n) for n in names).replace("\\", "\\\\")


def queries(selector: str | None) -> dict[str, str]:
    """The refresh's instant queries, by the Readings field each fills."""
    m = matchers(selector)
    narrow = f" and on(host) up{{{m}}}" if m else ""
    sglang = " or ".join(
        f'label_replace({expr}, "{WHAT}", "{what}", "", "")'
        for what, expr in SGLANG_AGGREGATES.items()
    )
    selected = {"selected": f"up{{{m}}}"} if m else {}  # without a selector: every host
    return {
        **selected,
        "up": f"up{narrow}",
        "up_age": f"(time() - timestamp(up)){narrow}",
        "kvtop": f'{{__name__=~"{_names_regex(KVTOP_FAMILIES)}"}}{narrow}',
        "info": f"last_over_time({ff.INFO}[{LOOKBACK}]){narrow}",
        "dcgm": f'{{__name__=~"{_names_regex(DCGM_FAMILIES)}"}}{narrow}',
        "amd": f'{{__name__=~"{_names_regex(amd.FAMILIES)}"}}{narrow}',
        "sglang": f"({sglang}){narrow}",
        "node": f'{{__name__=~"{_names_regex(NODE_FAMILIES)}"}}{narrow}',
    }


def _rows(answer: Answer) -> tuple[Row, ...]:
    return tuple((s.labels, s.value) for s in answer.vector)


async def _all(*coros: Any) -> list[Any]:
    """The coroutines' results, run together; the first failure cancels the others (a refused
    answer need not wait for nine more of them, and no failure is left unretrieved)."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


class FleetReader:
    """Reads the fleet from the Prometheus at `url` (one long-lived client)."""

    def __init__(
        self,
        url: str,
        *,
        selector: str | None = None,
        bearer_token: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.url = url
        self.selector = matchers(selector) or None
        self.api = PrometheusApi(url, bearer_token=bearer_token, timeout_s=timeout_s)
        self._version: str | None = None
        self._queries = queries(self.selector)

    async def read(self) -> Fleet:
        """The fleet now; Prometheus' problems are in Fleet.problem (never raised)."""
        taken_at = time.time()
        try:
            return join(await self._readings(taken_at))
        except PrometheusError as exc:
            return Fleet(
                taken_at=taken_at,
                prometheus_url=self.api.base,
                problem=str(exc),
                prometheus_version=self._version,
                selector=self.selector,
            )
        except Exception as exc:  # any answer kvtop cannot read is refused, never fatal
            if isinstance(exc, MemoryError):
                raise
            return Fleet(
                taken_at=taken_at,
                prometheus_url=self.api.base,
                problem=(
                    f"Prometheus at {self.api.base} answered in a shape kvtop does not read "
                    f"({type(exc).__name__}); check that the URL is a Prometheus server."
                ),
                selector=self.selector,
            )

    async def _readings(self, taken_at: float) -> Readings:
        names = list(self._queries)
        calls = [self.api.query(self._queries[n], at=taken_at) for n in names]
        answers, targets, _ = await _all(_all(*calls), self._targets(), self._build_version())
        by_name = dict(zip(names, answers, strict=True))
        last_up = await self._last_up(by_name["up"], taken_at)
        warnings = tuple(w for a in by_name.values() for w in a.warnings)
        # Any: each query's name is a row field of Readings, which mypy cannot see in a dict.
        rows: dict[str, Any] = {n: _rows(a) for n, a in by_name.items()}
        return Readings(
            taken_at=taken_at,
            prometheus_url=self.api.base,
            selector=self.selector,
            prometheus_version=self._version,
            targets=targets,
            last_up_age=last_up,
            warnings=tuple(dict.fromkeys(warnings)),
            **rows,
        )

    async def _last_up(self, up: Answer, taken_at: float) -> tuple[Row, ...]:
        """For the targets that are down now: seconds since their last `up == 1` sample within
        the lookback, from the raw samples (`up{instance=~…}[5m]`; asked only when a target is
        down, for at most MAX_LAST_SEEN of them)."""
        down = sorted({s.labels.get("instance", "") for s in up.vector if s.value != 1})
        down = [i for i in down if i][:MAX_LAST_SEEN]
        if not down:
            return ()
        alternatives = _names_regex(tuple(down))
        answer = await self.api.query(f'up{{instance=~"{alternatives}"}}[{LOOKBACK}]', at=taken_at)
        rows = []
        for series in answer.series:
            seen = [ts for ts, value in series.points if value == 1]
            if seen:
                rows.append((series.labels, taken_at - max(seen)))
        return tuple(rows)

    async def _targets(self) -> tuple[dict, ...] | None:
        """/api/v1/targets for lastError and the scrape interval; some Prometheus-compatible
        servers (Thanos, Mimir) do not have it: then `up` alone tells."""
        try:
            return tuple(await self.api.targets())
        except PrometheusError as exc:
            if exc.kind in ("connect", "timeout", "auth"):
                raise
            return None

    async def _build_version(self) -> None:
        if self._version is None:
            try:
                self._version = await self.api.build_version()
            except PrometheusError as exc:
                if exc.kind in ("connect", "timeout", "auth"):
                    raise

    async def history(
        self, host: str, what: str, minutes: float, *, min_step_s: float = HISTORY_MIN_STEP_S
    ) -> Series | None:
        """One host's `what` (a key of HISTORY) over the last `minutes`, at a step that keeps
        it under ~240 points (≥ `min_step_s`, 15 s; a Prometheus scraping faster may be asked
        finer). None when Prometheus has none; raises PrometheusError."""
        if what not in HISTORY:
            raise ValueError(f"history of {what!r}: one of {', '.join(HISTORY)}")
        end = time.time()
        start = end - minutes * 60
        step_s = history_step_s(minutes, min_step_s)
        quoted = host.replace("\\", "\\\\").replace('"', '\\"')
        answer = await self.api.query_range(
            HISTORY[what].format(host=quoted), start=start, end=end, step_s=step_s
        )
        return answer.series[0] if answer.series else None

    async def aclose(self) -> None:
        await self.api.aclose()
