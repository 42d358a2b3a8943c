"""What `kvtop plan` reads: the model's files, a calibration boot (a log file or a unit's
journal), the GPUs through NVML, the installed sglang's version. Each problem is a sentence
(GatherError) with what to give instead."""

from __future__ import annotations

import importlib.metadata
import stat
from pathlib import Path

from kvtop.model.sizing.calibration import Calibration, calibrate
from kvtop.model.sizing.engine import Gpus, ModelInfo
from kvtop.model.sizing.model_config import MAX_CONFIG_BYTES, ModelConfigError
from kvtop.model.sizing.model_shape import (
    ParsedModel,
    parse_model,
    read_index,
)
from kvtop.model.sizing.weights_estimate import estimate_weights
from kvtop.sglang.start_state import Startup
from kvtop.sources.log_reader import read_once
from kvtop.sources.log_text import LogUnreadable
from kvtop.sources.model_config_file import CONFIG_NAME
from kvtop.sources.safetensors_headers import tensor_bytes

INDEX_NAME = "model.safetensors.index.json"
SINGLE_WEIGHTS = "model.safetensors"
# The index maps every tensor to its shard: some MB for the largest MoE checkpoints.
MAX_INDEX_BYTES = 64 << 20


class GatherError(ValueError):
    """An input of `kvtop plan` cannot be read; the message is a sentence with a next step."""


def read_model(path: str, weights_gib: float | None = None) -> ModelInfo:
    """A model directory (config.json + model.safetensors.index.json) or a config.json. The
    weights' bytes: `weights_gib` when given, else the index's, else estimated from the config
    (a bare config.json is what one has before downloading the model)."""
    parsed, weights, tensors = read_model_files(path)
    source = "model.safetensors.index.json"
    if weights_gib is not None:
        weights, source = int(weights_gib * (1 << 30)), "--weights-gib"
    estimate = None
    if weights is None:
        try:
            estimate = estimate_weights(parsed.config)
        except ValueError:
            estimate = None  # the plan says the size is unknown and how to give it
        source = "estimated from config.json"
    return ModelInfo(
        parsed.dims,
        parsed.shape,
        weights,
        parsed.config.path,
        estimate,
        source,
        config_view=parsed.config,
        tensor_bytes=tensors,
    )


def read_model_files(path: str) -> tuple[ParsedModel, int | None, dict[str, int] | None]:
    """The model's config.json parsed once, its checkpoint's bytes (None when no index or
    single safetensors file is there) and, where the shards are downloaded, each tensor's
    stored bytes from their headers (None otherwise)."""
    where = Path(path).expanduser()
    kind = _kind_of(where)
    if kind == "directory":
        config = where / CONFIG_NAME
        config_kind = _kind_of(config)
        if config_kind is None:
            raise GatherError(
                f"{where} has no {CONFIG_NAME}: give the model's directory (with config.json) "
                "or the config.json itself"
            )
        if config_kind != "file":
            what = "a directory" if config_kind == "directory" else config_kind
            raise GatherError(
                f"{config} is {what}, not a regular file: give the model's config.json"
            )
    elif kind == "file":
        config = where
    elif kind is None:
        raise GatherError(
            f"--model {path}: no such file or directory. Give the model's directory or its "
            "config.json"
        )
    else:
        raise GatherError(
            f"--model {path} is {kind}, not a regular file or a directory: give the model's "
            "directory or its config.json"
        )
    try:
        parsed = parse_model(_read_capped(config, MAX_CONFIG_BYTES, "a config.json"), config)
    except ModelConfigError as exc:
        raise GatherError(f"{exc}. Give a model's config.json from Hugging Face") from None
    weights = None
    index = config.parent / INDEX_NAME
    single = config.parent / SINGLE_WEIGHTS
    weight_map = None
    try:
        if _kind_of(index) == "file":
            text = _read_capped(index, MAX_INDEX_BYTES, "a safetensors index")
            weights, weight_map = read_index(text, str(index))
        elif _kind_of(single) == "file":
            weights = single.stat().st_size
    except (ModelConfigError, OSError) as exc:
        raise GatherError(f"{exc}: the weights' size cannot be read") from None
    tensors = None
    if weights is not None:
        tensors = tensor_bytes(config.parent, weight_map)
    return parsed, weights, tensors


def _kind_of(path: Path) -> str | None:
    """ "file", "directory", what else it is in words, or None when nothing is there."""
    try:
        mode = path.stat().st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def _read_capped(path: Path, limit: int, what: str) -> str:
    """A regular file's text, at most `limit` bytes (ModelConfigError past it or unreadable)."""
    try:
        # The caller looked: a regular file (a FIFO or a device is refused before this).
        with path.open("rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise ModelConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise ModelConfigError(
            f"{path} is over {limit >> 20} MiB: {what} is far smaller. Check the path"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ModelConfigError(f"{path} is not UTF-8 text: {what} is JSON") from None


def read_boot(log_file: str | None, unit: str | None) -> Startup:
    """The latest boot of the log file or unit, parsed (the one with sizing lines)."""
    try:
        tracker = read_once(log_file, unit)
    except LogUnreadable as exc:
        raise GatherError(str(exc)) from None
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


def read_gpus(measure_free: bool = False) -> tuple[Gpus | None, str | None]:
    """The GPUs NVML or AMD SMI sees (the smallest's total memory; with `measure_free` also the
    least free memory now), or why none."""
    from kvtop.sources.gpu_sources import HostGpus

    host = HostGpus()
    try:
        reading = host.poll()
    finally:
        host.close()
    gpus = [g for g in reading.gpus if g.total_gib]
    if not reading.available or not gpus:
        return None, reading.problem or "NVML and AMD SMI show no GPU"
    source = "AMD SMI" if all(g.vendor == "amd" for g in gpus) else "NVML"
    smallest = min(gpus, key=lambda g: g.total_gib)
    names = {g.name for g in gpus if g.name}
    name = names.pop() if len(names) == 1 else ("mixed GPUs" if names else None)
    if measure_free:
        free = min(g.free_gib for g in gpus) * 1024
        return Gpus(len(gpus), smallest.total_gib * 1024, name, f"{source}, free now", free), None
    return Gpus(len(gpus), smallest.total_gib * 1024, name, source), None


def installed_sglang() -> str | None:
    """The version of the sglang installed beside kvtop, if any."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None
