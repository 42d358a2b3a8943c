"""Another server behind --url: the real Session, the real CLI and the real app against loopback
HTTP servers (tests/support/sglang_http.py) that serve another server's /metrics and /server_info,
with the Kimi-K2.5 TP8 story log (SGLang 0.5.3–0.5.8 formats, a pool of 159,277 tokens)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from kvtop.live.app import KvtopApp
from kvtop.live.widgets.kv_panel import KvPanel
from kvtop.model.kv_usage import kv_usage
from kvtop.session import Options, Session
from tests.support.paths import ROOT, STORY_LOG
from tests.support.sglang_http import (
    MODEL,
    Deployment,
    FakeSGLang,
    build_exposition,
    build_server_info,
)
from tests.support.tui_support import screen_text, until

OTHER_MODEL = "glm-5.3-flash"


@contextmanager
def another_server() -> Iterator[FakeSGLang]:
    """A GLM server: its own model name, a pool of 655,360 tokens, TP16 (every scheduler
    publishing, so its rank labels go up to 15), SGLang 0.5.12, port 30001."""
    other = Deployment(
        version="0.5.12", tp_size=16, all_schedulers=True, max_total_num_tokens=655_360
    )
    info = build_server_info(other)
    info.update(model_path=f"zai-org/{OTHER_MODEL}", served_model_name=OTHER_MODEL, port=30001)
    with FakeSGLang(other) as server:
        with server._lock:  # what the fake serves, changed under its own lock
            server.exposition = build_exposition(other).replace(MODEL, OTHER_MODEL).encode()
            server.server_info = json.dumps(info).encode()
        yield server


def the_logs_server() -> FakeSGLang:
    """The story's own server: same model, pool, TP size; a version inside the log's range."""
    return FakeSGLang(Deployment(version="0.5.8"))


def run_kvtop(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "kvtop", "--once", "--no-gpus", "--log-file", str(STORY_LOG), *args],
        capture_output=True,
        text=True,
        env=dict(os.environ, **(env or {})),
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result


# -- kvtop --once -------------------------------------------------------------------------------


def test_once_json_lists_each_mismatch() -> None:
    with another_server() as server:
        data = json.loads(run_kvtop("--json", "--url", server.url).stdout)
    assert data["mismatches"] == [
        {"field": "model", "log": "kimi-k2.5", "server": OTHER_MODEL, "source": "metrics"},
        {"field": "tp_size", "log": 8, "server": 16, "source": "metrics"},
        {"field": "max_total_num_tokens", "log": 159277, "server": 655360, "source": "metrics"},
        {"field": "model", "log": "kimi-k2.5", "server": OTHER_MODEL, "source": "server_info"},
        {"field": "tp_size", "log": 8, "server": 16, "source": "server_info"},
        {"field": "max_total_num_tokens", "log": 159277, "server": 655360, "source": "server_info"},
        {"field": "port", "log": 30000, "server": 30001, "source": "server_info"},
        {
            "field": "sglang_version",
            "log": "0.5.3–0.5.8",
            "server": "0.5.12",
            "source": "server_info",
        },
    ]
    # The analysis keeps the log's own version (0.5.8 at most), not the other server's 0.5.12.
    assert data["sglang_version"]["used_for_rules"] == "0.5.8"


def test_once_json_agreement_is_an_empty_list() -> None:
    with the_logs_server() as server:
        data = json.loads(run_kvtop("--json", "--url", server.url).stdout)
    assert data["mismatches"] == []
    assert data["metrics"]["max_total_num_tokens"] == 159277
    assert data["sglang_version"]["used_for_rules"] == "0.5.8"  # the server's own


def test_once_text_says_which_facts_differ_first_and_in_red() -> None:
    with another_server() as server:
        plain = run_kvtop("--url", server.url, env={"NO_COLOR": "1"}).stdout
        coloured = run_kvtop("--url", server.url, env={"FORCE_COLOR": "1", "TERM": "xterm"}).stdout
    flat = " ".join(plain.split())  # the report wraps long sentences at its width
    assert flat.count("mismatch: ") == 2, plain  # one sentence per source
    # Near the top: right after the sources, before the server line and every table.
    assert flat.index("mismatch: ") < flat.index("server: http://"), plain
    assert (
        f"mismatch: metrics say {OTHER_MODEL}, TP ≥16, 655,360 tokens; "
        "the log says kimi-k2.5, TP 8, 159,277 tokens" in flat
    )
    assert f"mismatch: /server_info says {OTHER_MODEL}, TP 16, 655,360 tokens, port 30001" in flat
    assert "SGLang 0.5.12; the log says kimi-k2.5, TP 8, 159,277 tokens, port 30000" in flat
    assert "SGLang 0.5.3–0.5.8" in flat
    # The other server's numbers are not printed as this server's metrics line.
    assert "metrics (/metrics):" not in flat
    assert "\x1b[" not in plain
    assert "\x1b[1;31mmismatch: metrics say" in coloured


def test_once_text_without_mismatch_has_no_mismatch_line() -> None:
    with the_logs_server() as server:
        text = run_kvtop("--url", server.url).stdout
    assert "mismatch" not in text
    assert "metrics (/metrics): KV cache 48,211 / 159,277 tokens" in text


# -- the session ---------------------------------------------------------------------------------


async def test_session_keeps_another_servers_facts_out_of_the_analysis() -> None:
    with another_server() as server:
        session = Session(Options(log_file=str(STORY_LOG), url=server.url, nvml=False))
        try:
            snapshot = await session.collect_once()
        finally:
            await session.close()
    assert {(m.source, m.field) for m in snapshot.mismatches} >= {
        ("metrics", "max_total_num_tokens"),
        ("server_info", "sglang_version"),
    }
    assert session.latest_info is not None and session.latest_info.version == "0.5.12"
    # Neither its version nor its args are this server's: the log's range stands.
    assert snapshot.analysis.version == (0, 5, 8)
    assert snapshot.server_info is None
    assert snapshot.metrics is not None and snapshot.trusted_metrics is None
    usage = kv_usage(snapshot)
    assert usage.max_tokens == 159277
    assert usage.source.startswith("log: ") and "another server" in usage.source


async def test_session_takes_its_own_servers_version() -> None:
    with FakeSGLang(Deployment(version="0.5.8.post1")) as server:
        session = Session(Options(log_file=str(STORY_LOG), url=server.url, nvml=False))
        try:
            snapshot = await session.collect_once()
        finally:
            await session.close()
    assert snapshot.mismatches == ()
    assert snapshot.server_info is not None and snapshot.server_info.version == "0.5.8.post1"
    assert snapshot.trusted_metrics is snapshot.metrics
    assert kv_usage(snapshot).source == "metrics"


async def test_session_dp_groups_summed_by_metrics_agree(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """DP4: metrics sum four pools of 159,277; the log's summary line is one group's."""
    log = tmp_path / "dp4.log"
    log.write_text(
        STORY_LOG.read_text().replace("dp_size=1", "dp_size=4").replace("tp_size=8", "tp_size=4")
    )
    with FakeSGLang(Deployment(version="0.5.8", tp_size=4, dp_size=4)) as server:
        session = Session(Options(log_file=str(log), url=server.url, nvml=False))
        try:
            snapshot = await session.collect_once()
        finally:
            await session.close()
    assert snapshot.metrics is not None and snapshot.metrics.max_total_num_tokens == 4 * 159277
    assert snapshot.mismatches == ()


# -- on screen -----------------------------------------------------------------------------------


async def test_kv_panel_never_shows_the_other_servers_pool() -> None:
    with another_server() as server:
        session = Session(
            Options(log_file=str(STORY_LOG), url=server.url, nvml=False, interval_s=0.1)
        )
        app = KvtopApp(session, source_label="identity", host_name="gpu-host")
        async with app.run_test(size=(120, 40)) as pilot:

            def panel() -> str:
                return str(app.screen.query_one(KvPanel).render())

            def both_sources_flagged() -> bool:
                snap = app.state.latest
                return snap is not None and {m.source for m in snap.mismatches} == {
                    "metrics",
                    "server_info",
                }

            await until(pilot, "both sources flagged as another server's", both_sources_flagged)
            await until(pilot, "the log's pool in the KV panel", lambda: "159,277" in panel())
            shown = panel()
            assert "655,360" not in shown
            # The log's batch line stands in, labelled as such.
            assert "log decode batch line" in shown and "metrics are from another server" in shown
            # The header's version is the log's range, not the other server's 0.5.12 (which
            # the red notice below it names as the other server's).
            header = "\n".join(screen_text(app).splitlines()[:2])  # the status line: 2 lines
            assert "SGLang 0.5.3–0.5.8" in header and "0.5.12" not in header
