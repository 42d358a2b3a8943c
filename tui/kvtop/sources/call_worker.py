"""One daemon thread running a GPU library's calls in order, and the wait on it with a deadline.

A GPU library's call can hang in the driver (a GPU falling off the bus); the app's loop must not.
Each source polls through its own worker: a poll still running when the next is due is not
queued behind it, the last reading is handed back marked stale instead. A daemon thread, unlike
ThreadPoolExecutor's, does not hold up interpreter exit while a driver call hangs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

_T = TypeVar("_T")


class CallWorker:
    """One daemon thread running submitted calls in order."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[
            tuple[Callable[[], Any], concurrent.futures.Future[Any]] | None
        ] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], _T]) -> concurrent.futures.Future[_T]:
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()
        self._jobs.put((fn, future))
        return future

    def stop(self) -> None:
        self._jobs.put(None)

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)


class DeadlinePoll:
    """`poll` run in the worker, waited on for at most `timeout_s`; `stale()` otherwise (and
    while a hung call still holds the worker)."""

    def __init__(self, name: str, timeout_s: float) -> None:
        self.name = name
        self.timeout_s = timeout_s
        self._worker: CallWorker | None = None
        self._pending: concurrent.futures.Future[Any] | None = None
        self._early = False  # _pending was begun by start(): the next run() takes its answer

    def start(self, poll: Callable[[], Any]) -> None:
        """Begin the first poll now, before there is a loop to wait on it: the next `run()`
        waits for this poll's answer instead of asking again."""
        if self._pending is not None:
            return
        if self._worker is None:
            self._worker = CallWorker(self.name)
        self._pending = self._worker.submit(poll)
        self._early = True

    async def early_answer(self, wait_s: float) -> Any | None:
        """The early poll's answer (start()) if it comes within `wait_s`, left for the next
        `run()` to take as well: a look, not a take. None when no early poll is waiting to be
        taken, or it is slower (a driver still loading)."""
        pending = self._pending
        if not self._early or pending is None:
            return None
        # asyncio.wait does not cancel what it gave up on: the poll goes on for run() to take.
        waiter = asyncio.wrap_future(pending)
        done, _ = await asyncio.wait({waiter}, timeout=wait_s)
        return waiter.result() if waiter in done else None

    async def run(self, poll: Callable[[], _T], stale: Callable[[], _T]) -> _T:
        pending: concurrent.futures.Future[_T]
        if self._early and self._pending is not None:
            self._early = False
            pending = self._pending
        elif self._pending is not None and not self._pending.done():
            return stale()  # the hung call still holds the worker: do not queue another
        else:
            if self._worker is None:
                self._worker = CallWorker(self.name)
            pending = self._worker.submit(poll)
            self._pending = pending
        waiter = asyncio.wrap_future(pending)
        done, _ = await asyncio.wait({waiter}, timeout=self.timeout_s)
        if waiter in done:
            self._pending = None
            return waiter.result()
        return stale()

    def stop(self) -> None:
        if self._worker is not None:
            self._worker.stop()
            self._worker = None
        self._early = False
