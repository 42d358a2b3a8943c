"""systemd's own lines about the server's unit, as `journalctl -u UNIT` shows them beside the
server's output: the OOM killer, the main process's exit, the result, stops, restarts.

PID 1 writes them (journal field `UNIT=`, not `_SYSTEMD_UNIT=`), in these words since systemd
v232 (older versions word a few differently; those are not read):
`sglang.service: A process of this unit has been killed by the OOM killer.`,
`sglang.service: Main process exited, code=killed, status=9/KILL`,
`sglang.service: Failed with result 'oom-kill'.`,
`sglang.service: Scheduled restart job, restart counter is at 3.`,
`sglang.service: Consumed 2min 3.456s CPU time, 110.5G memory peak.`,
`Stopping SGLang...`, `Stopped SGLang.` (`Stopped sglang.service - SGLang.` from v250),
`Starting SGLang...`, `Started SGLang.`.
"""

from __future__ import annotations

import re

from kvtop.sglang import events as ev

_UNIT_HEAD = re.compile(r"^[\w@:.\\-]{1,255}\.(?:service|scope): ")
_MAIN_EXITED = re.compile(r"^Main process exited, code=(\w+), status=(\S+?)\.?$")
_FAILED = re.compile(r"^Failed with result '([\w-]+)'\.?$")
_COUNTER = re.compile(r"^Scheduled restart job, restart counter is at (\d{1,9})\.?$")
# From where a number starts: tried from every digit of a long run, it was quadratic.
_PEAK = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?[KMGTP]?B?) memory peak")
OOM_KILL_TEXT = "A process of this unit has been killed by the OOM killer"


def parse_systemd_message(prefix: ev.LinePrefix, text: str) -> ev.UnitEvent | None:
    """One message of PID 1 about the unit -> an event, or None for one kvtop does not read."""
    text = text.strip()
    head = _UNIT_HEAD.match(text)
    body = text[head.end() :] if head else text
    if body.startswith(OOM_KILL_TEXT):
        return ev.UnitEvent(prefix, text, what="oom_kill")
    if (main := _MAIN_EXITED.match(body)) is not None:
        return ev.UnitEvent(prefix, text, what="main_exited", code=main[1], status=main[2])
    if (failed := _FAILED.match(body)) is not None:
        return ev.UnitEvent(prefix, text, what="failed", result=failed[1])
    if (counter := _COUNTER.match(body)) is not None:
        return ev.UnitEvent(prefix, text, what="restart_scheduled", counter=int(counter[1]))
    if body.startswith("Consumed ") and "CPU time" in body:
        peak = _PEAK.search(body)
        return ev.UnitEvent(prefix, text, what="consumed", memory_peak=peak[1] if peak else None)
    if head is None:  # the unit's description follows these words, not the unit's name
        for word, what in (
            ("Stopping ", "stopping"),
            ("Stopped ", "stopped"),
            ("Starting ", "starting"),
            ("Started ", "started"),
        ):
            if body.startswith(word):
                return ev.UnitEvent(prefix, text, what=what)
    return None


def unit_lines_of(identifier: str) -> bool:
    """Whether a journal header's identifier (`systemd[1]`) is PID 1's."""
    return identifier == "systemd[1]"
