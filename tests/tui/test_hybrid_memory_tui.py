"""Hybrid memory on screen: a Mamba hybrid's state is its own bar segment and legend entry.

Real parts: a synthetic 0.5.8 Qwen3-Next startup log (tests/process/test_hybrid_memory.MAMBA_058,
the exact formats of SGLang's source) read by the real Session, the fake libnvidia-ml (C) through
the real nvidia-ml-py (two 80 GiB GPUs), and the real KvtopApp under Pilot (only the feed is a
stand-in: tui_support).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvtop.live.screens.help import HelpScreen
from kvtop.live.widgets.gpu_rows import MemoryLegend
from kvtop.live.widgets.stacked_bar import GLYPHS
from kvtop.model.snapshot import Snapshot
from kvtop.session import Options, Session
from tests.process.test_hybrid_memory import MAMBA_058
from tests.support.fake_nvml import STATE_ENV, gcc_path, write_state
from tests.support.tui_support import gpu_rows, help_text, make_app, screen_text, until

pytestmark = [
    pytest.mark.skipif(gcc_path() is None, reason="gcc not found: no fake NVML"),
    pytest.mark.asyncio,
    pytest.mark.usefixtures("utc_zone"),
]

TOTAL_MIB = 81_920  # 80 GiB
# After startup TP0/TP1 have 13.98 GiB free (the summary line): in use 80 − 13.98 = 66.02 GiB.
USED_MIB = round((80 - 13.98) * 1024)


def two_gpus() -> dict[int, dict[str, object]]:
    return {
        i: {
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": f"GPU-{i:08x}-aaaa-bbbb-cccc-ddddeeeeffff",
            "bus": f"00000000:{0x18 + i * 0x10:02X}:00.0",
            "total_mib": TOTAL_MIB,
            "used_mib": USED_MIB,
            "reserved_mib": 0,
            "util": 40,
            "mem_util": 20,
        }
        for i in range(2)
    }


async def collect(log: Path) -> Snapshot:
    session = Session(Options(log_file=str(log), metrics=False))
    try:
        return await session.collect_once()
    finally:
        await session.close()


async def test_mamba_state_is_a_bar_segment_and_a_legend_entry(
    fake_lib: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GPU 0 (TP0): weights 37.45, KV 11.58, mamba 10.45, graphs 0.64 GiB; the legend names the
    mamba segment with its GiB and the bar draws its glyph between KV and graphs."""
    state = tmp_path / "nvml.state"
    monkeypatch.setenv(STATE_ENV, str(state))
    write_state(state, two_gpus())
    log = tmp_path / "qwen3-next-tp2.log"
    log.write_text(MAMBA_058)
    snapshot = await collect(log)
    gpu0 = snapshot.gpus[0]
    assert gpu0.ranks == ("TP0",)
    segments = dict(gpu0.memory.segments())
    assert segments["mamba"] == pytest.approx(10.45)
    assert segments["KV cache"] == pytest.approx(11.58)
    assert segments["runtime"] == pytest.approx(0.20, abs=0.01)

    app = make_app(snapshot, demo=False, label="hybrid")
    async with app.run_test(size=(140, 40)) as pilot:
        legend = f"{GLYPHS['mamba']} mamba 10.4"
        await until(pilot, "the mamba legend entry", lambda: legend in screen_text(app))
        row = gpu_rows(app)[0]
        drawn = str(row.render())
        kv, mamba, graphs = (drawn.find(GLYPHS[n]) for n in ("KV cache", "mamba", "CUDA graphs"))
        assert 0 <= kv < mamba < graphs, drawn
        text = str(app.screen.query_one(MemoryLegend).render())
        assert f"{GLYPHS['KV cache']} KV 11.6" in text and legend in text
        await pilot.press("question_mark")
        meaning = f"{GLYPHS['mamba'] * 3}  mamba"
        await until(pilot, "the help", lambda: isinstance(app.screen, HelpScreen))
        await until(pilot, "the mamba segment in help", lambda: meaning in help_text(app))
        assert "other caches" not in help_text(app)  # no such segment on these GPUs
