"""The stub declarations of the fake libamd_smi.so: every function the installed amdsmi binding
binds at import time that fake_amdsmi.c does not define, as `STUB(name)` lines.

The binding (amdsmi_wrapper.py) looks up each name in the library when it is imported, so one
missing symbol fails the whole import. The names are read from the installed binding, not kept
in a list here, so that a newer amdsmi release that binds more functions still loads.

`python stubs.py` prints the header; build.py calls `stubs_header()`.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "fake_amdsmi.c"
_BOUND = re.compile(r"^\s*\w+\s*=\s*_libraries\['libamd_smi\.so'\]\.(\w+)\s*$", re.MULTILINE)
_DEFINED = re.compile(r"^EXPORT\s+[\w ]+?\**\s*(\w+)\(", re.MULTILINE)


class AmdsmiNotInstalled(RuntimeError):
    """The amdsmi package is not installed, so there is no binding to read the names from."""


def wrapper_path() -> Path:
    """amdsmi_wrapper.py of the installed amdsmi, found without importing it (the import
    loads the library)."""
    spec = importlib.util.find_spec("amdsmi")
    if spec is None or not spec.submodule_search_locations:
        raise AmdsmiNotInstalled("the amdsmi package is not installed: pip install amdsmi")
    return Path(next(iter(spec.submodule_search_locations))) / "amdsmi_wrapper.py"


def bound_names(wrapper: Path) -> list[str]:
    """Every library function the binding binds, in its order, once each."""
    return list(dict.fromkeys(_BOUND.findall(wrapper.read_text())))


def defined_names(source: Path = SOURCE) -> set[str]:
    return set(_DEFINED.findall(source.read_text()))


def stubs_header(wrapper: Path | None = None) -> str:
    wrapper = wrapper or wrapper_path()
    defined = defined_names()
    names = [n for n in bound_names(wrapper) if n not in defined]
    lines = [f"/* {len(names)} stubs for the names {wrapper.name} binds; generated. */"]
    lines += [f"STUB({name})" for name in names]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(stubs_header(Path(sys.argv[1]) if len(sys.argv) > 1 else None))
