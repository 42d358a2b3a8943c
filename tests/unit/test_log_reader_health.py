"""tui/kvtop/sources/log_reader.py: the log's health before its first read ends."""

from __future__ import annotations

from kvtop.model.snapshot import NOT_YET
from kvtop.sglang.raw_lines import RawLines
from kvtop.sglang.startup import StartupTracker
from kvtop.sources.log_reader import NO_LOG, LogReader


def test_a_log_being_read_is_on_its_way_not_absent() -> None:
    """Before its first read ends (a long journal takes seconds) the log is not "no log given":
    it is on its way, which the verdict does not hold against the server."""

    def reader(**where: str) -> LogReader:
        return LogReader(StartupTracker(), RawLines(), **where)

    assert reader().health == NO_LOG
    file = reader(log_file="/var/log/sglang.log").health
    assert (file.name, file.state, file.cause) == ("log", "degraded", NOT_YET)
    journal = reader(unit="sglang-kimi").health
    assert (journal.name, journal.cause) == ("journal", NOT_YET)
