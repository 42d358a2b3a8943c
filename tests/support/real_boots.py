"""Real SGLang boots from public logs, planned by `kvtop plan` and compared with what they printed.

Each boot is a directory under tests/fixtures/real-boots/: `boot.json` (where it was found, the
GPU, the SGLang version, the published checkpoint's size, the launch arguments and what the log
printed), `config.json` (the model's public config) and `boot.log` (the lines as posted). A
`boot.json` may name a log or a model directory elsewhere in tests/fixtures instead
(`"log"`, `"model_dir"`, relative to its own directory) so a fixture is not copied twice.

Two plans per boot: before launch (the config, the checkpoint's size, the GPU's total and name,
the version and the arguments: what an operator has before the first boot) and calibrated (the
same with `--from-log` of the boot itself). The error is the planned `max_total_num_tokens`
against the logged one.
"""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvtop.plan.cli import main_plan

BOOTS_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "real-boots"


@dataclass(frozen=True, slots=True)
class RealBoot:
    slug: str
    directory: Path
    meta: dict[str, Any]

    @property
    def model_dir(self) -> Path:
        return (self.directory / self.meta.get("model_dir", ".")).resolve()

    @property
    def log(self) -> Path:
        return (self.directory / self.meta.get("log", "boot.log")).resolve()

    @property
    def logged_tokens(self) -> int:
        return int(self.meta["logged"]["max_total_num_tokens"])

    def argv(self, calibrated: bool) -> list[str]:
        meta = self.meta
        argv = ["--model", str(self.model_dir), "--json"]
        argv += ["--gpu-memory", str(meta["gpu_total_gib"])]
        if meta.get("gpu_name"):
            argv += ["--gpu-name", meta["gpu_name"]]
        if meta.get("sglang_version"):
            argv += ["--sglang-version", meta["sglang_version"]]
        if meta.get("checkpoint_gib") is not None:
            argv += ["--weights-gib", str(meta["checkpoint_gib"])]
        if calibrated:
            argv += ["--from-log", str(self.log)]
        return [*argv, "--", *meta.get("launch_args", [])]


@dataclass(frozen=True, slots=True)
class Planned:
    status: int
    plan: dict[str, Any] | None  # kvtop-plan/1, None when the plan refused (status 1 or 2)
    said: str  # stderr: the sentence when it refused

    @property
    def tokens(self) -> int | None:
        return None if self.plan is None else int(self.plan["max_total_num_tokens"])


def all_boots() -> list[RealBoot]:
    boots = []
    for meta_file in sorted(BOOTS_DIR.glob("*/boot.json")):
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        boots.append(RealBoot(meta_file.parent.name, meta_file.parent, meta))
    return boots


def plan(boot: RealBoot, calibrated: bool) -> Planned:
    """`kvtop plan` in this process, as the command runs it."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main_plan(boot.argv(calibrated))
    text = out.getvalue()
    return Planned(status, json.loads(text) if text.strip() else None, err.getvalue().strip())


def error_pct(planned: int | None, logged: int) -> float | None:
    return None if planned is None else (planned - logged) / logged * 100.0
