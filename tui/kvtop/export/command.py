"""`kvtop --export [ADDR]` from the command line: serve /metrics, or with `--once` print one
exposition body (text 0.0.4) on stdout for promtool or node_exporter's textfile collector.

Exit status (docs/exporter.md): 0 stopped by SIGTERM/SIGINT (or the body printed), 1 the
address cannot be listened on, the log cannot be read or a source failed, 2 a malformed ADDR
or options that do not go with --export. The same numbers as tui/kvtop/cli.py's.
"""

from __future__ import annotations

import asyncio
import os
import sys

from prometheus_client import CollectorRegistry, generate_latest

from kvtop.export.address import ListenAddress, parse_address
from kvtop.export.collector import SnapshotCollector
from kvtop.model.snapshot import Snapshot
from kvtop.options import EXIT_INTERRUPTED, EXIT_OK, EXIT_UNREADABLE
from kvtop.report.unexpected import debugging, unexpected_error
from kvtop.session import Options, Session


def _missing_log(options: Options) -> str | None:
    path = options.log_file
    if path and path != "-" and not os.path.exists(path):
        return (
            f"{path}: no such file. Give the SGLang log's path (kvtop waits for a file that "
            "is rotated away, not for one that never existed)."
        )
    return None


def print_once(options: Options) -> int:
    """One snapshot (the whole log, one GPU poll, one scrape) as one exposition body: only
    kvtop's families (no process_* ones, which would clash in a textfile collector)."""
    from kvtop.sources.log_text import LogUnreadable

    session = Session(options)

    async def collect() -> Snapshot:
        try:
            return await session.collect_once()
        finally:
            await session.close()

    try:
        snapshot = asyncio.run(collect())
    except LogUnreadable as exc:
        print(f"kvtop: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    collector = SnapshotCollector()
    collector.latest = snapshot
    registry = CollectorRegistry()
    registry.register(collector)
    try:
        sys.stdout.buffer.write(generate_latest(registry))
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        why = (exc.strerror or str(exc)).lower()
        print(f"kvtop: cannot write the metrics to standard output: {why}.", file=sys.stderr)
        return EXIT_UNREADABLE
    return EXIT_OK


def run_export(addr: str, options: Options, *, once: bool) -> int:
    """The command line's one entry (options already checked: tui/kvtop/option_rules.py's
    EXPORT); a bug is one sentence, not a traceback (KVTOP_DEBUG=1 shows it)."""
    try:
        return _run(addr, options, once=once)
    except BrokenPipeError:  # `kvtop --once --export | head`
        sys.stderr.close()
        return EXIT_OK
    except Exception as exc:
        if debugging():
            raise
        print(f"kvtop: {unexpected_error(exc)}", file=sys.stderr)
        return EXIT_UNREADABLE


def _run(addr: str, options: Options, *, once: bool) -> int:
    if once:
        return print_once(options)
    missing = _missing_log(options)
    if missing:
        print(f"kvtop: {missing}", file=sys.stderr)
        return EXIT_UNREADABLE
    from kvtop.export.server import serve

    address: ListenAddress = parse_address(addr)
    return serve(address, Session(options))
