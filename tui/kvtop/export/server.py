"""Serve /metrics: kvtop's bounded HTTP server (tui/kvtop/export/http.py) on the address asked for,
fed by the session loop (the live view's Session, headless) until SIGTERM or SIGINT.

The server renders on request in its own handler threads (text 0.0.4, or OpenMetrics when the
Accept header asks; gzip when asked); the loop only swaps the collector's `latest` Snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import signal
import socket
import sys
from typing import TextIO

from prometheus_client import (
    CollectorRegistry,
    PlatformCollector,
    ProcessCollector,
)

from kvtop.export.address import ListenAddress
from kvtop.export.collector import SnapshotCollector
from kvtop.export.http import MetricsHttpServer
from kvtop.session import Session

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class BindError(OSError):
    """The address cannot be listened on; the message is one sentence with a next step."""


def exporter_registry(collector: SnapshotCollector) -> CollectorRegistry:
    """A registry of its own: kvtop's families plus the process' own cost (process_*,
    python_info), nothing registered elsewhere in the process."""
    registry = CollectorRegistry()
    registry.register(collector)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry


def _why(exc: OSError, address: ListenAddress) -> str:
    where = address.shown()
    if isinstance(exc, socket.gaierror):
        return (
            f"cannot listen on {where}: {address.host!r} does not resolve to an address of "
            "this host. Give an IP address, e.g. 127.0.0.1:9877."
        )
    if exc.errno == errno.EADDRINUSE:
        return (
            f"cannot listen on {where}: the port is in use (another kvtop --export?). Stop "
            f"that process or give another port, e.g. kvtop --export {address.host}:"
            f"{(address.port + 1) % 65536 or 9878}."
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return (
            f"cannot listen on {where}: no network interface of this host has that address. "
            "Give one it has (ip -brief addr), or 127.0.0.1."
        )
    if exc.errno == errno.EACCES:
        return (
            f"cannot listen on {where}: ports below 1024 need privileges. Give a port above "
            "1023, e.g. 9877."
        )
    reason = (exc.strerror or str(exc)).rstrip(".").lower()
    return f"cannot listen on {where}: {reason}. Check the address and try again."


def bind(
    address: ListenAddress, registry: CollectorRegistry, *, err: TextIO | None = None
) -> MetricsHttpServer:
    """Listen (and start serving) on `address`; the server's own errors are said on `err`.
    Raises BindError."""
    try:
        return MetricsHttpServer(address.host, address.port, registry, err=err)
    except OSError as exc:
        raise BindError(_why(exc, address)) from exc


async def _feed(session: Session, collector: SnapshotCollector) -> None:
    """Every snapshot of the session becomes the collector's latest (one assignment)."""
    async with contextlib.aclosing(session.snapshots()) as snapshots:
        async for snapshot in snapshots:
            collector.latest = snapshot


async def run_until_signal(session: Session, collector: SnapshotCollector) -> str:
    """Feed the collector until SIGTERM or SIGINT; the signal's name. The session's sources
    are shut down before it returns. A source that fails raises (RuntimeError)."""
    loop = asyncio.get_running_loop()
    feed = asyncio.create_task(_feed(session, collector))
    received: list[str] = []

    def stop(sig: signal.Signals) -> None:
        received.append(sig.name)
        feed.cancel()

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop, sig)
    try:
        await feed
    except asyncio.CancelledError:
        if not received:
            raise
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
    return received[0] if received else "end of input"


def serve(
    address: ListenAddress,
    session: Session,
    *,
    collector: SnapshotCollector | None = None,
    err: TextIO = sys.stderr,
) -> int:
    """Bind, say where, feed until a signal, shut down. 0 on a signal, 1 when the address
    cannot be listened on or a source failed (said in one sentence on `err`)."""
    collector = collector or SnapshotCollector()
    try:
        server = bind(address, exporter_registry(collector), err=err)
    except BindError as exc:
        print(f"kvtop: {exc}", file=err, flush=True)
        return 1
    print(
        f"kvtop: serving Prometheus metrics on http://{address.shown(server.port)}/metrics "
        f"(source: {session.options.source_name}; every {session.interval_s:g} s)",
        file=err,
        flush=True,
    )
    try:
        how = asyncio.run(run_until_signal(session, collector))
    except RuntimeError as exc:
        print(
            f"kvtop: the exporter stopped: {exc}. Start it again (systemd's Restart= does); "
            "if it repeats, report it with the command you ran.",
            file=err,
            flush=True,
        )
        return 1
    finally:
        server.close()
    print(f"kvtop: stopped by {how}; /metrics is no longer served.", file=err, flush=True)
    return 0
