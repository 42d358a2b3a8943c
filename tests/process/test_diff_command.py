"""`kvtop diff` as a user runs it: two logs, one log with a restart, bad usage, one boot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REAL_LOGS, ROOT, STORY_LOG

DIFF = (sys.executable, "-m", "kvtop", "diff")


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*DIFF, *map(str, args)], capture_output=True, text=True, cwd=ROOT, timeout=60
    )


@pytest.fixture(scope="module")
def restarted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The story's boot, then the same server restarted with an fp8 KV cache: the same pool
    holds twice the tokens (its lines edited by hand to what SGLang logs for it)."""
    story = STORY_LOG.read_text()
    fp8 = (
        story.replace("kv_cache_dtype='auto'", "kv_cache_dtype='fp8_e4m3'")
        .replace("#tokens: 159277", "#tokens: 318555")
        .replace("max_total_num_tokens=159277", "max_total_num_tokens=318555")
        .replace("2026-02-27", "2026-03-02")
    )
    log = tmp_path_factory.mktemp("diff") / "sglang.log"
    log.write_text(story + fp8)
    return log


def test_two_real_logs_in_json() -> None:
    done = _run(
        "--json",
        REAL_LOGS / "51-pr15464-mimo-v2-flash-swa-tp4.log",
        REAL_LOGS / "52-pr18039-mimo-v2-flash-swa-page64-tp4.log",
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["schema"] == "kvtop-diff/1"
    split = [g for g in report["ranks"] if g["tokens"]["parts"]]
    assert split
    for group in split:
        tokens = group["tokens"]
        assert (tokens["a"], tokens["b"]) == (1496958, 375360)
        assert abs(sum(p["tokens"] for p in tokens["parts"]) - tokens["delta"]) <= 2
        assert tokens["explained_by"] == "the KV pool"
    assert report["summary"].startswith("KV tokens per rank 1,496,958 → 375,360")


def test_a_restart_in_one_log_in_text(restarted: Path) -> None:
    done = _run(restarted, "--width", "100")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "(the boot before the latest)" in out and "(the latest boot)" in out
    assert "KV tokens per rank 159,277 → 318,555 (+159,278, +100.0%)" in out
    assert "TP0 … TP7 (8 ranks), changed alike" in out
    assert "the pool's bytes per token 70,245 → 35,122 B/token  ◀ explains most" in out
    assert "kv_cache_dtype: auto → fp8_e4m3" in out


def test_one_boot_says_what_to_give() -> None:
    done = _run(STORY_LOG)
    assert done.returncode == 1
    assert done.stdout == ""
    assert "holds one boot: give two logs (kvtop diff OLD.log NEW.log)" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ((), "give two logs (A then B)"),
        (("a.log", "b.log", "c.log"), "give two logs (A then B)"),
        (("a.log", "--unit", "x"), "give logs or --unit, not both"),
        (("--journal-dir", "/tmp", "a.log"), "--journal-dir goes with --unit"),
        (("-", "-"), "stdin (-) can be read only once"),
        (("a.log", "--width", "5"), "--width 5: give a width from 40 to 1000"),
    ],
)
def test_bad_usage(args: tuple[str, ...], needle: str) -> None:
    done = _run(*args)
    assert done.returncode == 2
    assert needle in done.stderr


def test_a_missing_log_is_named() -> None:
    done = _run(ROOT / "no-such.log", STORY_LOG)
    assert done.returncode == 1
    assert "no-such.log" in done.stderr and "Traceback" not in done.stderr
