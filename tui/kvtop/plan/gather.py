"""What `kvtop plan` reads: the model's files, a calibration boot (a log file or a unit's
journal), the GPUs through NVML, the installed sglang's version. Each problem is a sentence
(GatherError) with what to give instead."""

from __future__ import annotations

import asyncio
import importlib.metadata
from pathlib import Path

from kvtop.model.sizing.calibration import Calibration, calibrate
from kvtop.model.sizing.model_config import ModelConfigError, parse_model_dims
from kvtop.model.sizing.model_shape import parse_model_shape, weights_bytes_from_index
from kvtop.plan.build import Gpus, ModelInfo
from kvtop.sglang.raw_lines import RawLines
from kvtop.sglang.start_state import Startup
from kvtop.sglang.startup import StartupTracker
from kvtop.sources.log_reader import LogReader
from kvtop.sources.log_text import LogUnreadable
from kvtop.sources.model_config_file import CONFIG_NAME, read_config_text

INDEX_NAME = "model.safetensors.index.json"
SINGLE_WEIGHTS = "model.safetensors"


class GatherError(ValueError):
    """An input of `kvtop plan` cannot be read; the message is a sentence with a next step."""


def read_model(path: str) -> ModelInfo:
    """A model directory (config.json + model.safetensors.index.json) or a config.json."""
    where = Path(path).expanduser()
    if where.is_dir():
        config = where / CONFIG_NAME
        if not config.is_file():
            raise GatherError(
                f"{where} has no {CONFIG_NAME}: give the model's directory (with config.json) "
                "or the config.json itself"
            )
    elif where.is_file():
        config = where
    else:
        raise GatherError(
            f"--model {path}: no such file or directory. Give the model's directory or its "
            "config.json"
        )
    try:
        text = read_config_text(config)
        dims = parse_model_dims(text, config)
        shape = parse_model_shape(text, str(config))
    except ModelConfigError as exc:
        raise GatherError(f"{exc}. Give a model's config.json from Hugging Face") from None
    weights = None
    index = config.parent / INDEX_NAME
    single = config.parent / SINGLE_WEIGHTS
    try:
        if index.is_file():
            weights = weights_bytes_from_index(read_config_text(index), str(index))
        elif single.is_file():
            weights = single.stat().st_size
    except (ModelConfigError, OSError) as exc:
        raise GatherError(f"{exc}: the weights' size cannot be read") from None
    return ModelInfo(dims, shape, weights, str(config))


def read_boot(log_file: str | None, unit: str | None) -> Startup:
    """The latest boot of the log file or unit, parsed (the one with sizing lines)."""
    tracker = StartupTracker()
    reader = LogReader(tracker, RawLines(), log_file=log_file, unit=unit)
    try:
        if log_file:
            reader.read_file()
        else:
            asyncio.run(reader.read_journal())
    except LogUnreadable as exc:
        raise GatherError(str(exc)) from None
    if unit and reader.health.detail and not tracker.current.ranks:
        raise GatherError(f"journal of {unit}: {reader.health.detail}")
    current = tracker.current
    previous = tracker.previous
    # A restart that has not sized its pool yet: the boot before it is the one to learn from.
    sized_now = any(r.target.kv_tokens for r in current.ranks.values())
    if (
        not sized_now
        and previous is not None
        and any(r.target.kv_tokens for r in previous.ranks.values())
    ):
        return previous
    return current


def calibration_of(startup: Startup, version: str | None) -> Calibration:
    return calibrate(startup, version)


def read_gpus() -> tuple[Gpus | None, str | None]:
    """The GPUs NVML sees (the smallest's total memory), or why none."""
    from kvtop.sources.nvml import NvmlSource

    reading = NvmlSource().poll()
    gpus = [g for g in reading.gpus if g.total_gib]
    if not reading.available or not gpus:
        return None, reading.problem or "NVML shows no GPU"
    smallest = min(gpus, key=lambda g: g.total_gib)
    names = {g.name for g in gpus if g.name}
    name = names.pop() if len(names) == 1 else ("mixed GPUs" if names else None)
    return Gpus(len(gpus), smallest.total_gib * 1024, name, "NVML"), None


def installed_sglang() -> str | None:
    """The version of the sglang installed beside kvtop, if any."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None
