"""The real `kvtop --export` process, as systemd and Prometheus meet it: started on a port of the
system's choosing (it prints the address it got), scraped over real HTTP with httpx in the text
format, in OpenMetrics with Prometheus' own Accept header, and gzipped; stopped by SIGTERM and
SIGINT (exit 0); refused addresses and a port in use (one sentence, exit 2 / 1). Its sources
are real: the story log, the fake libnvidia-ml (C) through the real nvidia-ml-py in the child
(LD_LIBRARY_PATH), and a loopback SGLang server (tests/support/sglang_http.py) that is the log's
own.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)

from kvtop.export import families as ff
from kvtop.export.collector import FAMILIES, GIB
from tests.support.export_tools import (
    PROMETHEUS_ACCEPT,
    exporter,
    fake_nvml_env,
    kvtop_command,
    of,
    one,
    promtool_check,
    samples,
)
from tests.support.fake_nvml import eight_gpus, write_state
from tests.support.paths import STORY_LOG
from tests.support.sglang_http import Deployment, FakeSGLang

USED_MIB = 135_700
# Checks the process' own modules after it ran: the exporter must never load a terminal UI.
UI_MODULES_PROBE = (
    "import sys\n"
    "from kvtop.cli import main\n"
    "rc = main(sys.argv[1:])\n"
    "ui = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich'))\n"
    "print('UI modules loaded:', ', '.join(ui) or 'none', file=sys.stderr)\n"
    "sys.exit(rc)\n"
)


@pytest.fixture(scope="module")
def nvml_env(lib_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Eight H200s as the story's ranks leave them, through the fake driver in the child."""
    folder = tmp_path_factory.mktemp("export-nvml")
    state = write_state(folder / "nvml.state", eight_gpus(used_mib=USED_MIB))
    return fake_nvml_env(lib_dir, state)


@pytest.fixture(scope="module")
def server() -> Iterator[FakeSGLang]:
    with FakeSGLang(Deployment(version="0.5.8")) as sglang:
        yield sglang


def story_args(server: FakeSGLang) -> list[str]:
    return ["--log-file", str(STORY_LOG), "--url", server.url, "--interval", "0.2"]


def whole(found: dict) -> bool:  # type: ignore[type-arg]
    """Every source has answered: 8 GPUs, the server ready, /metrics read."""
    return (
        len(of(found, ff.GPU_UP)) == 8
        and len(of(found, ff.GPU_MEMORY)) == 8 * 9
        and of(found, ff.STARTUP_STATE, state="ready") != {}
        and one(found, ff.STARTUP_STATE, state="ready") == 1
        and of(found, ff.SOURCE_UP, source="metrics") != {}
        and one(found, ff.SOURCE_UP, source="metrics") == 1
        and of(found, ff.MISMATCH) != {}
    )


def once_json(env: dict[str, str], server: FakeSGLang) -> dict:  # type: ignore[type-arg]
    result = subprocess.run(
        kvtop_command("--once", "--json", "--log-file", str(STORY_LOG), "--url", server.url),
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_serves_the_formats_prometheus_asks_for_and_stops_on_sigterm(
    nvml_env: dict[str, str], server: FakeSGLang
) -> None:
    with exporter(*story_args(server), env=nvml_env) as running:
        assert running.url.startswith("http://127.0.0.1:") and not running.url.endswith(
            ":0/metrics"
        )
        body, found = running.scrape_until("every source answered", whole)
        text = running.scrape()
        assert text.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        result = promtool_check(body)
        assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
        # Every family described; the process' own cost beside them.
        for name in FAMILIES:
            assert f"# TYPE {name} " in body
        assert one(found, "process_resident_memory_bytes") > 0
        assert of(found, "python_info")

        # Prometheus' Accept header: OpenMetrics, ending with # EOF.
        om = running.scrape({"Accept": PROMETHEUS_ACCEPT})
        assert om.headers["content-type"].startswith("application/openmetrics-text; version=1.0.0")
        assert om.text.endswith("# EOF\n")
        om_names = {f.name for f in openmetrics_families(om.text)}
        assert {"kvtop", "kvtop_restarts", ff.GPU_MEMORY, ff.KV_HEADROOM} <= om_names
        assert "# TYPE kvtop info" in om.text and "# TYPE kvtop_restarts counter" in om.text

        # gzip when asked (Prometheus always asks): the same families.
        raw = httpx.get(running.url, headers={"Accept-Encoding": "gzip"}, timeout=10)
        assert raw.headers["content-encoding"] == "gzip"
        assert raw.num_bytes_downloaded < len(raw.content) / 3  # httpx unzipped it
        unzipped = samples(raw.text)
        assert {name for name, _ in unzipped} >= {ff.GPU_MEMORY, ff.INFO, ff.RESTARTS}

        code, rest = running.stop(signal.SIGTERM)
    assert code == 0, rest
    assert "kvtop: stopped by SIGTERM; /metrics is no longer served." in rest
    assert "Traceback" not in running.stderr + rest


def test_segments_over_http_are_once_json_in_bytes(
    nvml_env: dict[str, str], server: FakeSGLang
) -> None:
    data = once_json(nvml_env, server)
    with exporter(*story_args(server), env=nvml_env) as running:
        _, found = running.scrape_until("every source answered", whole)
        running.stop()
    for gpu in data["gpus"]:
        breakdown = gpu["breakdown"]
        for segment, names in ff.SEGMENT_FIELDS.items():
            known = [breakdown[n] for n in names if breakdown[n] is not None]
            exported = of(found, ff.GPU_MEMORY, gpu=str(gpu["index"]), segment=segment)
            if not known:
                assert exported == {}
                continue
            assert next(iter(exported.values())) == pytest.approx(
                sum(known) * GIB, abs=0.00005 * GIB + 1
            )


def test_sigint_stops_it_too(server: FakeSGLang) -> None:
    with exporter("--log-file", str(STORY_LOG), "--no-gpus", "--no-metrics") as running:
        running.scrape_until("the log read", lambda f: of(f, ff.KV_POOL_TOKENS) != {})
        code, rest = running.stop(signal.SIGINT)
    assert code == 0, rest
    assert "stopped by SIGINT" in rest


def test_no_terminal_ui_is_loaded(nvml_env: dict[str, str], server: FakeSGLang) -> None:
    command = [sys.executable, "-c", UI_MODULES_PROBE, "--export", "127.0.0.1:0"]
    with exporter(command=[*command, *story_args(server)], env=nvml_env) as running:
        running.scrape_until("every source answered", whole)
        code, rest = running.stop()
    assert code == 0, rest
    assert "UI modules loaded: none" in rest


def test_once_export_prints_one_body_for_promtool_and_textfiles(
    nvml_env: dict[str, str], server: FakeSGLang
) -> None:
    command = [sys.executable, "-c", UI_MODULES_PROBE, "--once", "--export", *story_args(server)]
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env={**os.environ, **nvml_env},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "UI modules loaded: none" in result.stderr
    check = promtool_check(result.stdout)
    assert (check.returncode, check.stdout, check.stderr) == (0, "", "")
    found = samples(result.stdout)
    assert whole(found)
    # Only kvtop's families: node_exporter's textfile collector has process_* of its own.
    assert {name.split("_")[0] for name, _ in found} == {"kvtop"}


def test_a_port_in_use_is_one_sentence_and_exit_1() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            kvtop_command("--export", f"127.0.0.1:{port}", "--demo"),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    assert result.stderr == (
        f"kvtop: cannot listen on 127.0.0.1:{port}: the port is in use (another kvtop "
        f"--export?). Stop that process or give another port, e.g. kvtop --export "
        f"127.0.0.1:{port + 1}.\n"
    )


@pytest.mark.parametrize(
    ("addr", "words"),
    [
        (":9877", "kvtop does not listen on every interface unasked; give 127.0.0.1:9877"),
        ("127.0.0.1:65536", "the port must be a number from 0 to 65535"),
        ("::1:9877", "write an IPv6 address in brackets with its port, e.g. [::1]:9877"),
        ("[localhost]:9877", "'localhost' in brackets is not an IPv6 address"),
        ("127.0.0.1", "no port"),
        ("bad host:9877", "'bad host' is not an address or a host name"),
        # A port is ASCII digits: `²` was a traceback, Arabic-Indic 9879 was port 9879.
        ("127.0.0.1:\u00b2", "the port must be a number from 0 to 65535"),
        ("127.0.0.1:\u0669\u0668\u0667\u0669", "the port must be a number from 0 to 65535"),
        # 0.0.0.0 mapped into IPv6 is every IPv4 interface: refused unless written 0.0.0.0.
        ("[::ffff:0.0.0.0]:9877", "means every IPv4 interface; write it 0.0.0.0:9877"),
    ],
)
def test_a_malformed_addr_is_a_usage_error(addr: str, words: str) -> None:
    result = subprocess.run(
        kvtop_command("--export", addr, "--demo"), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert result.stderr.startswith("usage: kvtop")  # argparse's usage, then one sentence
    message = result.stderr.splitlines()[-1]
    assert result.stderr.count("kvtop: ") == 1
    assert message.startswith(f"kvtop: --export {addr}: ") and words in message


def test_a_mapped_loopback_address_listens_on_loopback() -> None:
    command = kvtop_command("--export", "[::ffff:127.0.0.1]:0", "--demo")
    with exporter(command=command) as running:
        assert running.url.startswith("http://127.0.0.1:"), running.url
        port = int(running.url.rsplit(":", 1)[1].split("/")[0])
        listening = subprocess.run(
            ["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True, check=True
        ).stdout.split()
        assert listening[3] == f"127.0.0.1:{port}"  # an IPv4 socket on loopback only
        assert running.scrape().status_code == 200


def test_a_missing_log_file_is_exit_1(tmp_path: Path) -> None:
    missing = tmp_path / "nope.log"
    result = subprocess.run(
        kvtop_command("--export", "127.0.0.1:0", "--log-file", str(missing)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.startswith(f"kvtop: {missing}: no such file.")


def test_addr_does_not_go_with_once() -> None:
    result = subprocess.run(
        kvtop_command("--once", "--export", "127.0.0.1:9877", "--demo"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--once --export prints one body on stdout: leave out ADDR" in result.stderr


def test_a_gpu_lost_while_serving_goes_down_and_comes_back(
    lib_dir: Path, tmp_path: Path, server: FakeSGLang
) -> None:
    state = write_state(tmp_path / "nvml.state", eight_gpus(used_mib=USED_MIB))
    env = fake_nvml_env(lib_dir, state)

    def gpu3(found: dict) -> tuple[float | None, int]:  # type: ignore[type-arg]
        up = of(found, ff.GPU_UP, gpu="3")
        return (next(iter(up.values())) if up else None), len(of(found, ff.GPU_MEMORY, gpu="3"))

    with exporter(*story_args(server), env=env) as running:
        running.scrape_until("every source answered", whole)
        write_state(
            state,
            eight_gpus(used_mib=USED_MIB),
            errors=[("nvmlDeviceGetMemoryInfo_v2", 3, 15)],  # NVML_ERROR_GPU_IS_LOST
        )
        _, found = running.scrape_until("GPU 3 down", lambda f: gpu3(f)[0] == 0)
        assert gpu3(found) == (0, 0)  # down, and no segment of it (never a 0 byte count)
        assert of(found, ff.KV_HEADROOM, gpu="3") == {}
        assert sum(of(found, ff.GPU_UP).values()) == 7
        write_state(state, eight_gpus(used_mib=USED_MIB))
        _, found = running.scrape_until("GPU 3 back", lambda f: gpu3(f)[0] == 1)
        assert gpu3(found) == (1, 9)
        code, rest = running.stop()
    assert code == 0, rest


def test_check_does_not_go_with_export() -> None:
    result = subprocess.run(
        kvtop_command("--check", "--export", "--demo"), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 3  # UNKNOWN, as every --check error
    assert result.stdout == (
        "KVTOP UNKNOWN - --check prints its own status line: leave out --export\n"
    )
