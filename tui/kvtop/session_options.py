"""What a session is asked to read (Options: the log, the server, the GPUs, how often) and the
API key it sends. Light on purpose: the live view forms them before its first frame, and
imports the session (tui/kvtop/session.py, which names these too) only after it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from kvtop.model.status.levels import DEFAULT_THRESHOLDS, Thresholds
from kvtop.sources.gpu_sources import PROCESS_INTERVAL_S


@dataclass(frozen=True, slots=True)
class Options:
    log_file: str | None = None
    unit: str | None = None
    journal_dir: str | None = None
    url: str | None = None
    # `url` came from the config file, not --url (said so wherever the URL is named).
    url_from_config: bool = False
    api_key: str | None = None
    demo: bool = False
    demo_speed: float = 1.0
    nvml: bool = True
    metrics: bool = True
    interval_s: float = 1.0
    process_interval_s: float = PROCESS_INTERVAL_S
    model_config: str | None = None
    sglang_version: str | None = None
    what_if: tuple[float, ...] = ()
    request_len: int | None = None
    # Where values turn warning / critical (tui/kvtop/model/status/levels.py; the config file sets them).
    thresholds: Thresholds = DEFAULT_THRESHOLDS
    # The server's visible devices, for placing ranks by order (kvtop's own by default):
    # CUDA_VISIBLE_DEVICES, else ROCm's HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES.
    cuda_visible_devices: str | None = field(default_factory=lambda: visible_devices(os.environ))

    @property
    def source_name(self) -> str:
        if self.demo:
            from kvtop.demo.source import DEMO_LOG

            return "demo: " + DEMO_LOG
        if self.unit:
            where = f" in {self.journal_dir}" if self.journal_dir else ""
            return f"journal: {self.unit}{where}"
        if self.log_file == "-":
            return "stdin"
        return self.log_file or "no log"


# The variables that narrow the devices a GPU process sees, CUDA's first, then ROCm's (HIP
# numbers within ROCR's, so HIP's is the one a rank's device number counts in).
VISIBLE_DEVICES_VARS = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


def visible_devices(environ: Mapping[str, str]) -> str | None:
    """The first of VISIBLE_DEVICES_VARS set (and not empty) in `environ`."""
    for name in VISIBLE_DEVICES_VARS:
        value = environ.get(name)
        if value and value.strip():
            return value
    return None


def api_key_from(path: str | None) -> str | None:
    """--api-key-file, else SGLANG_API_KEY (see sources.api_key.load_api_key)."""
    from kvtop.sources.api_key import load_api_key

    return load_api_key(path, os.environ)
