"""screenshots/ shows what the code draws now: `scripts/screenshots.py --check` draws every shot
again (the demo's still under Pilot, the --once report through Rich) and compares the SVGs byte
for byte, so a UI change that leaves the README's pictures behind fails here."""

from __future__ import annotations

import subprocess
import sys

from tests.support.paths import ROOT


def test_screenshots_match_what_the_code_draws() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "screenshots.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    assert "matches what the code draws (5 shots)" in done.stdout
