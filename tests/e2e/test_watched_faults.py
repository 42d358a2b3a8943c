"""What only watching can tell, on the fault matrix's host (fake GPUs through the real
nvidia-ml-py, a real SGLang-like server on loopback, the story log), in the live view (the real
KvtopApp on the real Session under Pilot): the server's processes leaving NVML's list while
their GPUs still hold the memory. One look (`--once`, `--check`) cannot tell that from a host
whose NVML lists no process at all; the session that watched the list full can.
"""

from __future__ import annotations

import pytest

from kvtop.live.app import KvtopApp
from kvtop.model.snapshot import Snapshot
from kvtop.model.status.levels import Level
from tests.support.fake_nvml import gcc_path
from tests.support.fault_host import FaultHost, NvmlState, wait_screen

pytestmark = pytest.mark.skipif(gcc_path() is None, reason="gcc not found: no fake NVML")


def _level(level: Level, kinds: tuple[str, ...]):  # type: ignore[no-untyped-def]
    def check(text: str, snap: Snapshot | None) -> bool:
        if snap is None or any(
            s.detail and "waiting for the first" in s.detail for s in snap.sources
        ):
            return False
        return snap.verdict.level == level and tuple(a.kind for a in snap.verdict.alerts) == kinds

    return check


async def test_the_servers_processes_leaving_nvml_with_their_memory_held(host: FaultHost) -> None:
    session = host.session(metrics=False)
    app = KvtopApp(session, source_label="watched faults", host_name="gpu-host")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_screen(app, pilot, "healthy", _level(Level.OK, ()), 40)
        host.state.procs = []  # killed (or hung out of NVML's list); the memory stays held
        host.write_nvml()
        text = await wait_screen(
            app, pilot, "processes gone", _level(Level.CRITICAL, ("processes_gone",)), 40
        )
        snap = app.state.latest
        assert snap is not None
        (alert,) = snap.verdict.alerts
        assert "(TP0–7 on GPUs 0–7)" in alert.text and "still hold" in alert.text
        assert "✖" in text
        host.state.procs = NvmlState().procs  # started again: its processes are back
        host.write_nvml()
        await wait_screen(app, pilot, "back", _level(Level.OK, ()), 40)
