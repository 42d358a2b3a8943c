"""The GPUs the live view's first frame draws: the early NVML poll's reading (begun before
Textual was imported), with the ranks the processes' titles name, as GPU views; before the
session, the log's parsers and the rest of the model are imported (they come after the frame).
"""

from __future__ import annotations

from kvtop.model.memory.gpu_view import GpuView, nvml_views
from kvtop.sources.gpu_sources import HostGpus
from kvtop.sources.process_titles import title_ranks

# How long the first frame waits for the early reading: a driver still loading (no persistence
# mode) must not hold back the rest; the overview shows the GPUs when they come.
FIRST_FRAME_WAIT_S = 0.5


async def early_gpu_views(
    gpus: HostGpus, wait_s: float = FIRST_FRAME_WAIT_S
) -> tuple[GpuView, ...]:
    """The GPUs of the early reading if it comes within `wait_s` (the session still takes that
    reading as its first); none otherwise."""
    reading = await gpus.early_reading(wait_s)
    if reading is None or not reading.gpus:
        return ()
    return nvml_views(reading, title_ranks(p.pid for g in reading.gpus for p in g.processes))
