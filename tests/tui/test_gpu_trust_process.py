"""Trusting GPUs through the installed `kvtop`: `--once` (text and JSON) and the live
screen under tmux with NO_COLOR, on the fake libnvidia-ml (C) loaded by the real nvidia-ml-py
from LD_LIBRARY_PATH, the story log, and real processes this test starts as GPU processes
(SGLang schedulers titled with bash `exec -a`, and a foreign one)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fake_nvml import (
    STATE_ENV,
    eight_gpus,
    gcc_path,
    kvtop_once,
    write_state,
)
from tests.support.sglang_procs import start_server, stop_server
from tests.support.tmux_tools import SGR, Tmux, foreground_colours, is_grey

ROOT = Path(__file__).resolve().parents[2]
STORY_LOG = ROOT / "tui" / "kvtop" / "data" / "kimi-k25-tp8-eagle3-hicache-0.5.8.log"
KVTOP = Path(sys.executable).with_name("kvtop")
TMUX = shutil.which("tmux")
USED_MIB = 135_700
TRAINER = "kvtop-test-trainer"
ROW = re.compile(r"(?m)^\S?\s*(\d)\s+(?:TP\d|—)\s.*$")

pytestmark = [
    pytest.mark.skipif(gcc_path() is None, reason="gcc not found: no fake NVML"),
    pytest.mark.skipif(not KVTOP.exists(), reason="the kvtop console script is missing"),
]


@pytest.fixture
def procs() -> Iterator[dict[str, int]]:
    """Eight schedulers titled `sglang::scheduler_TPn` under their main process, and a foreign
    trainer beside them: real pids."""
    main, schedulers = start_server()
    trainer = subprocess.Popen(["bash", "-c", f"exec -a '{TRAINER}' sleep 60"])
    try:
        yield {key: child.pid for key, child in schedulers.items()} | {"trainer": trainer.pid}
    finally:
        trainer.kill()
        trainer.wait()
        stop_server(main, schedulers)


def ranks(pids: dict[str, int]) -> list[tuple[int, int, int | None]]:
    return [(i, pids[f"TP{i}"], USED_MIB - 600) for i in range(8)]


def once(lib_dir: Path, state: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return kvtop_once(lib_dir, state, STORY_LOG, *extra, columns=220)


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_once_all_gpus_lost(lib_dir: Path, tmp_path: Path, procs: dict[str, int]) -> None:
    state = write_state(
        tmp_path / "nvml.state",
        eight_gpus(used_mib=USED_MIB),
        procs=ranks(procs),
        errors=[("nvmlDeviceGetMemoryInfo_v2", None, 15)],
    )
    data = json.loads(once(lib_dir, state, "--json").stdout)
    assert [g["status"] for g in data["gpus"]] == ["lost"] * 8
    for gpu in data["gpus"]:
        assert all(v is None for v in gpu["breakdown"].values()), gpu["breakdown"]
        assert gpu["total_gib"] is None and gpu["free_gib"] is None
    nvml = next(s for s in data["sources"] if s["name"] == "nvml")
    assert nvml["state"] == "degraded" and "GPU 0–7: lost" in nvml["detail"]
    assert not [n for n in data["notes"] if "itemises" in n or "no GPU here" in n]
    text = flat(once(lib_dir, state).stdout)
    assert "GPU 0–7: lost" in text and "all 8 GPUs NVML sees" in text
    assert "other GPUs keep updating" not in text
    assert "(lost)" in text


def test_once_other_processes(lib_dir: Path, tmp_path: Path, procs: dict[str, int]) -> None:
    gpus = eight_gpus(used_mib=USED_MIB)
    gpus[3]["used_mib"] = USED_MIB + 4096
    gpus[5]["used_mib"] = USED_MIB + 2048
    state = write_state(
        tmp_path / "nvml.state",
        gpus,
        # GPU 5's stranger gives no memory figure: its share is unknown (null)
        procs=[*ranks(procs), (3, procs["trainer"], 4096), (5, procs["trainer"], None)],
    )
    data = json.loads(once(lib_dir, state, "--json").stdout)
    others = [g["breakdown"]["other_processes_gib"] for g in data["gpus"]]
    assert others == [0.0, 0.0, 0.0, 4.0, 0.0, None, 0.0, 0.0]
    g3 = data["gpus"][3]
    trainer = next(p for p in g3["processes"] if p["pid"] == procs["trainer"])
    assert trainer["other"] is True and trainer["rank"] is None
    assert trainer["command"].startswith(TRAINER) and trainer["user"]
    rank = next(p for p in g3["processes"] if p["rank"] == "TP3")
    assert rank["other"] is False
    b3, b2 = g3["breakdown"], data["gpus"][2]["breakdown"]
    parts = [k for k in b3 if k not in ("total_gib", "free_gib", "reserve_gib") and "at" not in k]
    parts = [k for k in parts if b3[k] is not None]  # mamba / other caches: null, no such model
    assert sum(b3[k] for k in parts) + b3["free_gib"] == pytest.approx(b3["total_gib"], abs=0.01)
    assert b3["runtime_gib"] >= 0 and b2["runtime_gib"] >= 0
    assert "other procs" in once(lib_dir, state).stdout


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed")
def test_no_color_lost_and_hot_rows_readable(
    lib_dir: Path, tmp_path: Path, procs: dict[str, int], tmux: Tmux
) -> None:
    """NO_COLOR=1: no colour at all, yet a lost GPU says so in words with ✖, and a hot or
    throttled GPU carries its glyph (✖ critical, ▲ warning) at the row's end."""
    gpus = eight_gpus(used_mib=USED_MIB)
    gpus[4]["temp"] = 95  # critical
    gpus[5]["temp"] = 85  # warning
    gpus[6]["throttle"] = 0x20  # clocks lowered (SW thermal slowdown): warning
    state = write_state(
        tmp_path / "nvml.state",
        gpus,
        procs=ranks(procs),
        errors=[("nvmlDeviceGetMemoryInfo_v2", i, 15) for i in range(4)],
    )
    settings = {"LD_LIBRARY_PATH": str(lib_dir), STATE_ENV: str(state), "NO_COLOR": "1"}
    assign = " ".join(f"{k}={shlex.quote(v)}" for k, v in settings.items())
    args = ["--log-file", str(STORY_LOG), "--no-metrics", "--interval", "0.2"]
    line = f"env -u COLUMNS -u LINES -u FORCE_COLOR {assign} {shlex.quote(str(KVTOP))} "
    tmux.new_session("mono", "sh -c " + shlex.quote(line + shlex.join(args)))

    def rows(screen: str) -> dict[int, str]:
        return {int(m.group(1)): m.group(0).rstrip() for m in ROW.finditer(SGR.sub("", screen))}

    def shown(screen: str) -> bool:
        r = rows(screen)
        return len(r) == 8 and all("✖ lost" in r[i] for i in range(4)) and r[4].endswith("✖")

    try:
        screen = tmux.wait_for("mono", "lost and hot rows under NO_COLOR", shown, escapes=True)
        chromatic = sorted(c for c in foreground_colours(screen) if not is_grey(c))
        assert not chromatic, f"NO_COLOR=1 still draws colours {chromatic}"
        r = rows(screen)
        assert r[5].endswith("▲") and r[6].endswith("▲") and r[7][-1] not in "▲✖"
        assert "GPU 0–3: lost" in flat(SGR.sub("", screen))
        tmux.send("mono", "q")
    finally:
        tmux.kill_session("mono")
