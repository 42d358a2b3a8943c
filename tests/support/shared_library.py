"""A fake GPU library compiled with gcc into a shared object, rebuilt only when its inputs
changed (their hash is kept beside it): the fake NVML's and the fake AMD SMI's build."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path


def compile_library(
    source: Path,
    lib: Path,
    what: str,
    error: type[Exception],
    *,
    also_hashed: bytes = b"",
    include: Path | None = None,
) -> None:
    """`source` compiled into `lib` (soname: its file name) unless `lib` was built from the
    same source and `also_hashed` inputs; `error(sentence)` when gcc is missing or fails."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise error(f"gcc not found: install gcc to build the fake {what} library")
    lib.parent.mkdir(parents=True, exist_ok=True)
    stamp = lib.with_name(lib.name + ".sha256")
    digest = hashlib.sha256(source.read_bytes() + also_hashed).hexdigest()
    if lib.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return
    tmp = lib.with_name(lib.name + ".tmp")
    cmd = [gcc, "-shared", "-fPIC", "-O2", "-Wall", "-Wl,-soname," + lib.name]
    if include is not None:
        cmd.append("-I" + str(include))
    cmd += ["-o", str(tmp), str(source), "-lpthread"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise error(f"gcc failed building the fake {what} library:\n{proc.stderr}")
    os.replace(tmp, lib)
    stamp.write_text(digest + "\n")
