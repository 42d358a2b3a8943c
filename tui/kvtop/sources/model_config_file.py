"""Find and read a model's config.json: a local directory or file, else the Hugging Face cache.

The only place kvtop looks at the model's files and at the environment's cache settings; the
session calls it off the event loop when the model path changes, and the sizing parses the text
(tui/kvtop/model/sizing/model_config.py). Never touches the network.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from kvtop.model.sizing.model_config import (
    ConfigFile,
    ModelConfigError,
    ModelDims,
    parse_model_dims,
)

CONFIG_NAME = "config.json"
_REPO_ID_RE = re.compile(r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)?$")
# A model's config.json is a few KB; a file far beyond that is the wrong one (or never ends).
MAX_CONFIG_CHARS = 16 << 20


def find_config_json(
    model_path: str | None,
    env: Mapping[str, str] | None = None,
    home: Path | None = None,
) -> Path | None:
    """config.json for ``--model-path``: a local directory or file, else the HF cache.

    Never touches the network; returns None when nothing local matches.
    """
    if not model_path or not model_path.strip():
        return None
    env = os.environ if env is None else env
    model_path = model_path.strip()
    local = Path(model_path).expanduser()
    try:
        if local.is_dir() and (local / CONFIG_NAME).is_file():
            return local / CONFIG_NAME
        if local.is_file() and local.name.endswith(".json"):
            return local
    except OSError:
        pass
    repo_id = model_path.rstrip("/")
    if not _REPO_ID_RE.match(repo_id) or repo_id.startswith("."):
        return None
    cache_dir_name = "models--" + repo_id.replace("/", "--")
    for hub in _hub_cache_dirs(env, home):
        found = _snapshot_config(hub / cache_dir_name)
        if found is not None:
            return found
    return None


def _hub_cache_dirs(env: Mapping[str, str], home: Path | None) -> list[Path]:
    """Hub cache roots in huggingface_hub's own order of precedence."""
    if home is None:
        try:
            home = Path.home()
        except RuntimeError:
            home = None
    candidates: list[Path] = []
    for key in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(key):
            candidates.append(Path(env[key]).expanduser())
    if env.get("HF_HOME"):
        candidates.append(Path(env["HF_HOME"]).expanduser() / "hub")
    if env.get("XDG_CACHE_HOME"):
        candidates.append(Path(env["XDG_CACHE_HOME"]).expanduser() / "huggingface" / "hub")
    if home is not None:
        candidates.append(home / ".cache" / "huggingface" / "hub")
    unique: list[Path] = []
    for path in candidates:
        if path not in unique:
            unique.append(path)
    return unique


def _snapshot_config(repo_dir: Path) -> Path | None:
    """The snapshot refs/main names (what SGLang would load), else the newest one."""
    try:
        ref = (repo_dir / "refs" / "main").read_text(encoding="utf-8").strip()
    except OSError:
        ref = ""
    try:
        if ref:
            pinned = repo_dir / "snapshots" / ref / CONFIG_NAME
            if pinned.is_file():
                return pinned
        snapshots = [p for p in (repo_dir / "snapshots").glob(f"*/{CONFIG_NAME}") if p.is_file()]
        if not snapshots:
            return None
        return max(snapshots, key=lambda p: (p.stat().st_mtime, p.parent.name))
    except OSError:
        return None


# --------------------------------------------------------------------------- loading


# A model's config.json is a few KB; a file far beyond that is the wrong one (or never ends).
MAX_CONFIG_CHARS = 16 << 20


def read_config_text(config_path: Path) -> str:
    """The file's text; raises ModelConfigError naming the file when it cannot be read."""
    try:
        with open(config_path, encoding="utf-8") as handle:
            text = handle.read(MAX_CONFIG_CHARS + 1)
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelConfigError(f"cannot read model config {config_path}: {exc}") from exc
    if len(text) > MAX_CONFIG_CHARS:  # /dev/zero, a log given by mistake
        raise ModelConfigError(
            f"model config {config_path} is over {MAX_CONFIG_CHARS >> 20} MiB: a config.json is "
            "a few KB. Check the path."
        )
    return text


def load_model_dims(config_path: Path) -> ModelDims:
    """Read and parse one config.json; raises ModelConfigError naming the file."""
    return parse_model_dims(read_config_text(config_path), config_path)


def read_model_config(
    config_path: str | None,
    model_path: str | None,
    env: Mapping[str, str] | None = None,
) -> ConfigFile | None:
    """The config.json to size with: --model-config when given, else the one for the server's
    model path (local, or in the Hugging Face cache); None when there is none to read."""
    found = Path(config_path) if config_path else find_config_json(model_path, env=env)
    if found is None:
        return None
    try:
        return ConfigFile(str(found), read_config_text(found))
    except ModelConfigError as exc:
        return ConfigFile(str(found), None, str(exc))
