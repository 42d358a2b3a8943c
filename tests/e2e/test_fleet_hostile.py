"""The fleet reader against a hostile Prometheus on loopback (tests/support/hostile_prometheus.py):
escape sequences in labels, warnings, errors and the version; answers too large (plain and as a
gzip bomb); an answer that drips; malformed answers (nested past the stack, a label that is not
a string, ±Inf). Each is read with its text made visible, or refused with a sentence, and the
reader recovers on the next good answer. The real `kvtop --prometheus` prints what it read."""

from __future__ import annotations

import contextlib
import functools
import json
import re
import subprocess
import sys
import time
import zlib
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from kvtop.fleet.reader import FleetReader
from tests.support.hostile_prometheus import HostilePrometheus, as_json, vector

KVTOP = Path(sys.executable).with_name("kvtop")
RAW_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u200b]")
HOST = "evil\x1b]52;c;aGk=\x07\u202e"
INSTANCE = {"instance": "h:9877", "job": "kvtop"}


def hostile_fleet(value: str = "1", pool: str = "1000") -> object:
    def answer(promql: str) -> object | None:
        if promql.startswith("up"):
            body = vector(({"__name__": "up", "host": HOST, **INSTANCE}, value))
            return as_json({**body, "warnings": ["w\x1b]0;title\x07"]})
        if "kvtop_info" in promql:
            labels = {"__name__": "kvtop_info", "host": HOST, "model": "kimi\x1b]52;c;aGk=\x07",
                      "sglang_version": "0.5.8\x1b[2J", **INSTANCE}  # fmt: skip
            return as_json(vector((labels, "1")))
        if "kvtop_" in promql:
            labels = {"__name__": "kvtop_kv_pool_tokens", "host": HOST, **INSTANCE}
            return as_json(vector((labels, pool)))
        return None

    return answer


def _strings(data: object) -> list[str]:
    if isinstance(data, str):
        return [data]
    if isinstance(data, dict):
        return [s for v in data.values() for s in _strings(v)]
    if isinstance(data, list):
        return [s for v in data for s in _strings(v)]
    return []


def kvtop(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(KVTOP), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.mark.parametrize("mode", [("--once",), ("--once", "--json"), ("--check",)])
def test_escapes_from_prometheus_never_reach_the_terminal(mode: tuple[str, ...]) -> None:
    with HostilePrometheus() as prometheus:
        prometheus.query = hostile_fleet()
        version = {"status": "success", "data": {"version": "2.42\x1b]0;x\x07"}}
        prometheus.answers["/api/v1/status/buildinfo"] = as_json(version)
        result = kvtop("--prometheus", prometheus.url, *mode)
    out = result.stdout
    if "--json" in mode:  # the strings as the JSON holds them, not as json.dumps escapes them
        out = " ".join(_strings(json.loads(result.stdout)))
    assert result.returncode == 0, result.stderr
    assert RAW_CONTROL.search(out.replace("\n", "")) is None, out
    if "--check" not in mode:
        assert "evil␛]52;c;aGk=␇\\u202e" in out and "kimi␛]52;c;aGk=␇" in out


def test_an_error_text_with_escapes_is_shown_visibly() -> None:
    with HostilePrometheus() as prometheus:
        error = {"status": "error", "errorType": "bad_data\x1b[2J", "error": "no\x1b]52;c;aGk=\x07"}
        prometheus.answers["/api/v1/query"] = as_json(error, 400)
        result = kvtop("--prometheus", prometheus.url, "--once")
    assert RAW_CONTROL.search(result.stdout.replace("\n", "")) is None, result.stdout
    assert "no␛]52;c;aGk=␇" in re.sub(r"\s+", "", result.stdout)


@functools.lru_cache(maxsize=1)
def _bomb_body() -> bytes:
    # 300 MiB of JSON whitespace in ~300 KB of gzip: the decoded size is what costs memory.
    # Compressed a MiB at a time, so the 300 MiB are never held here.
    packer = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # the gzip format
    spaces = b" " * 2**20
    parts = [packer.compress(b"{")]
    parts += [packer.compress(spaces) for _ in range(300)]
    parts += [packer.compress(b"}"), packer.flush()]
    return b"".join(parts)


def _bomb(handler: BaseHTTPRequestHandler) -> None:
    body = _bomb_body()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Encoding", "gzip")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


BIG = b'{"status":"success","data":{"resultType":"vector","result":[' + b" " * (40 * 2**20) + b"]}}"


@pytest.mark.parametrize("answer", ["plain", "gzip-bomb"])
def test_an_answer_past_the_cap_is_refused(answer: str) -> None:
    if answer == "gzip-bomb":
        _bomb_body()  # compressed once, before the clock starts
    with HostilePrometheus() as prometheus:
        big = (200, {"Content-Type": "application/json"}, BIG)
        prometheus.answers["/api/v1/query"] = big if answer == "plain" else _bomb
        started = time.monotonic()
        result = kvtop("--prometheus", prometheus.url, "--once")
    assert time.monotonic() - started < 15
    flat = re.sub(r"\s+", " ", result.stdout)
    assert "more than 32 MiB" in flat and "--selector" in flat, result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def _drip(handler: BaseHTTPRequestHandler) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", "100000")
    handler.end_headers()
    for _ in range(100):
        try:
            handler.wfile.write(b" ")
            handler.wfile.flush()
        except OSError:
            return
        time.sleep(0.5)


def test_an_answer_that_drips_meets_the_total_deadline() -> None:
    """--once, --once --json and --check, each against a Prometheus of its own whose answers
    drip: run at once (each waits out the client deadline on its own, so the three take the
    time of one), every one done within 12 s of the common start."""
    modes = [("--once",), ("--once", "--json"), ("--check",)]
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(HostilePrometheus()) for _ in modes]
        for prometheus in servers:
            prometheus.answers["/api/v1/query"] = _drip
        started = time.monotonic()
        runs = [
            subprocess.Popen(
                [str(KVTOP), "--prometheus", prometheus.url, *mode],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for prometheus, mode in zip(servers, modes, strict=True)
        ]
        outputs = [run.communicate(timeout=60) for run in runs]
        took = time.monotonic() - started
    assert took < 12, took  # the 5 s client deadline, not 50 s of drips
    for mode, (out, err) in zip(modes, outputs, strict=True):
        assert "did not answer within 5 s" in re.sub(r"\s+", " ", out), (mode, out, err)


NESTED = b'{"status":"success","data":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
MALFORMED = {
    "nested": (200, {"Content-Type": "application/json"}, NESTED),
    "label-not-a-string": as_json(vector(({"__name__": "up", "host": 7, **INSTANCE}, "1"))),
    "labels-not-an-object": as_json(
        {
            "status": "success",
            "data": {"resultType": "vector", "result": [{"metric": ["h"], "value": [1, "1"]}]},
        }
    ),
    "value-not-a-string": as_json(vector(({"__name__": "up", **INSTANCE}, 1))),
}


@pytest.mark.parametrize("answer", list(MALFORMED))
async def test_a_malformed_answer_is_a_sentence_and_the_reader_recovers(answer: str) -> None:
    with HostilePrometheus() as prometheus:
        prometheus.answers["/api/v1/query"] = MALFORMED[answer]
        reader = FleetReader(prometheus.url)
        try:
            refused = await reader.read()
            wanted = "not Prometheus' JSON" if answer == "nested" else "does not read"
            assert refused.problem and wanted in refused.problem, refused.problem
            assert refused.problem.endswith(".")
            prometheus.answers["/api/v1/query"] = as_json(vector())
            prometheus.query = hostile_fleet()
            fleet = await reader.read()
        finally:
            await reader.aclose()
    assert fleet.problem is None and len(fleet.hosts) == 1


@pytest.mark.parametrize("value", ["+Inf", "-Inf", "NaN"])
@pytest.mark.parametrize("mode", [("--once",), ("--once", "--json"), ("--check",)])
def test_infinite_values_give_valid_output(value: str, mode: tuple[str, ...]) -> None:
    with HostilePrometheus() as prometheus:
        prometheus.query = hostile_fleet(value=value, pool=value)
        result = kvtop("--prometheus", prometheus.url, *mode)
    assert "Traceback" not in result.stderr and "report it" not in result.stderr, result.stderr
    if "--json" in mode:

        def refuse(name: str) -> None:
            raise ValueError(f"{name} is not JSON")

        json.loads(result.stdout, parse_constant=refuse)
    assert "inf" not in result.stdout.lower().replace("info", ""), result.stdout
