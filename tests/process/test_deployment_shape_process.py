"""The deployment's shape through the installed `kvtop --once` (JSON and text), on the fake
libnvidia-ml (C) loaded by the real nvidia-ml-py: one node of a two-node TP16 server, eight GPUs
here, and a log that holds both nodes' output (a shared log directory).

The log is node 0's server_args line (the story log's real 0.5.8 line with the thread's
`--tp 16 --nnodes 2 --node-rank 0`), `Load weight begin` lines for TP0–15 in SGLang's 0.4.x
format, then the real excerpt 61 (node 0 of that deployment; its sidecar names the source).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.fake_nvml import eight_gpus, gcc_path, kvtop_once, write_state
from tests.support.paths import REAL_LOGS
from tests.unit.test_deployment_shape import args_line

KVTOP = Path(sys.executable).with_name("kvtop")

pytestmark = [
    pytest.mark.skipif(gcc_path() is None, reason="gcc not found: no fake NVML"),
    pytest.mark.skipif(not KVTOP.exists(), reason="the kvtop console script is missing"),
]


def _log(tmp_path: Path) -> Path:
    ranks = [
        f"[2025-04-02 05:52:10 TP{tp}] Load weight begin. avail mem=94.62 GB" for tp in range(16)
    ]
    real = (REAL_LOGS / "61-issue4978-tp16-two-node-node0.log").read_text(encoding="utf-8")
    path = tmp_path / "two-nodes.log"
    path.write_text("\n".join([args_line(tp_size=16, nnodes=2, node_rank=0), *ranks]) + "\n" + real)
    return path


def once(lib_dir: Path, state: Path, log: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return kvtop_once(lib_dir, state, log, *extra)


def test_once_two_node_log_on_eight_gpus(lib_dir: Path, tmp_path: Path) -> None:
    state = write_state(tmp_path / "nvml.state", eight_gpus(used_mib=80_000))
    log = _log(tmp_path)
    data = json.loads(once(lib_dir, state, log, "--json").stdout)
    assert data["deployment"] == {
        "nnodes": 2,
        "node_rank": 0,
        "disaggregation_mode": "null",
        "ranks_expected": 8,
        "ranks_in_log": 16,
    }
    assert data["server_args"]["nnodes"] == 2 and data["server_args"]["node_rank"] == 0
    # TP0–7 on this node's GPUs 0–7; TP8–15 are node 1's, never "no GPU here" nor a fallen GPU.
    assert [g["ranks"] for g in data["gpus"]] == [[f"TP{i}"] for i in range(8)]
    assert not [n for n in data["notes"] if "no GPU here: NVML" in n or "fallen off" in n]
    assert any(
        n.startswith("TP8 … TP15 (8 ranks) in the log are not this node's") for n in data["notes"]
    )
    text = re.sub(r"\s+", " ", once(lib_dir, state, log).stdout)
    assert (
        "deployment: node 0 of 2 · ranks TP0–7 of TP16 (the others log on node 1) · "
        "16 ranks in this log, 8 expected on this node"
    ) in text
    assert "deployment: TP8 … TP15 (8 ranks) in the log are not this node's" in text
    assert "note: TP8 … TP15" not in text  # said once, in the report's deployment lines
