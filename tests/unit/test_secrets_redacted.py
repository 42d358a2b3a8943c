"""The API key never leaves kvtop: redacted as each log line is kept (RawLines), so the raw
view, a saved view and the copy key (all drawn from those lines) never hold it; saved files are
readable by their owner only."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kvtop.saved_files import save_new
from kvtop.sglang.raw_lines import RawLines

SECRET = "sk-live-9f8e7d"
LINES = [
    f"[2026-02-27 09:02:05] server_args=ServerArgs(model_path='/m', api_key='{SECRET}', tp_size=8)",
    f"[2026-02-27 09:02:05] server_args={{'api_key': '{SECRET}', 'hf_token': \"hf_{SECRET}\"}}",
    f"server_args=ServerArgs(admin_api_key='{SECRET}\\'x', ssl_keyfile_password={SECRET})",
    f"[2026-02-27 09:02:05] server_args=ServerArgs(api_key='{SECRET}",  # cut mid-value
]


@pytest.mark.parametrize("line", LINES)
@pytest.mark.parametrize("as_bytes", [False, True])
def test_raw_lines_never_hold_a_secret(line: str, as_bytes: bool) -> None:
    raw = RawLines()
    raw.add(line.encode() if as_bytes else line)
    (kept,) = raw.lines()
    assert SECRET not in kept and "<redacted>" in kept


def test_lines_without_secrets_are_kept_as_written() -> None:
    raw = RawLines()
    line = "[2026-02-27 09:02:05] server_args=ServerArgs(api_key=None, key_size=3, tp_size=8)"
    raw.add(line)
    assert raw.lines() == (line,)


def test_saved_files_are_for_their_owner_only(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        saved = save_new("view", "view.txt", [str(tmp_path)], said=str, refused=str)
    finally:
        os.umask(old)
    assert saved.path is not None
    assert stat.S_IMODE(os.stat(saved.path).st_mode) == 0o600
