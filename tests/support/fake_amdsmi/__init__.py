"""A fake libamd_smi.so (C) served through the real amdsmi Python binding; see build.py."""

from .build import (
    GIB,
    LIB_NAME,
    MI300X_VRAM_BYTES,
    STATE_ENV,
    FakeAmdsmiBuildError,
    build_fake_amdsmi,
    eight_mi300x,
    write_state,
)
from .stubs import AmdsmiNotInstalled

__all__ = [
    "GIB",
    "LIB_NAME",
    "MI300X_VRAM_BYTES",
    "STATE_ENV",
    "AmdsmiNotInstalled",
    "FakeAmdsmiBuildError",
    "build_fake_amdsmi",
    "eight_mi300x",
    "write_state",
]
