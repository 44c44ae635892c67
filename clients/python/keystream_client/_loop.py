"""The private event loop on which the sync client runs the asyncio transport, one step at a time."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

_T = TypeVar("_T")


class LoopRunner:
    """A private event loop that the sync client drives one step at a time.

    Normally the loop runs in the calling thread. When that thread already runs an event loop (a sync client
    used inside async code), the private loop runs in one helper thread and the caller blocks, as any sync
    client call does.
    """

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(self._on_loop_error)
        self._helper: concurrent.futures.ThreadPoolExecutor | None = None
        self._interrupted = False

    def run(self, function: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
        """Run ``function()`` to completion on the private loop and return its result.

        Taking the coroutine function (not a coroutine) lets an interrupt that arrives before the coroutine
        runs be cleaned up here instead of leaving a never-awaited coroutine behind.
        """
        try:
            asyncio.get_running_loop()
            inside_a_loop = True
        except RuntimeError:
            inside_a_loop = False
        if not inside_a_loop:
            return self._run_here(function)
        if self._helper is None:
            self._helper = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="keystream-client")
        return self._helper.submit(self._run_here, function).result()

    def _run_here(self, function: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
        coroutine: Coroutine[Any, Any, _T] | None = None
        task: asyncio.Task[_T] | None = None
        try:
            coroutine = function()
            task = self._loop.create_task(coroutine)
            return self._loop.run_until_complete(task)
        except BaseException as exc:
            if not isinstance(exc, Exception):
                self._interrupted = True  # Ctrl-C, SystemExit: leftovers below are expected, not news
                self._settle(coroutine, task)
            raise

    def _settle(self, coroutine: Coroutine[Any, Any, Any] | None, task: asyncio.Task[Any] | None) -> None:
        # The interrupted loop may hold already-scheduled callbacks, among them the interrupted run's own
        # "stop", which would end the caller's next (clean-up) run early: run them now (stop + run_forever
        # polls once and runs what is ready), then cancel the task and let the cancellation finish.
        with contextlib.suppress(BaseException):
            if task is None:
                if coroutine is not None:
                    coroutine.close()
                return
            task.cancel()
            self._loop.stop()
            self._loop.run_forever()
            if not task.done():
                self._loop.run_until_complete(task)

    def _on_loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if not self._interrupted:
            loop.default_exception_handler(context)

    def close(self) -> None:
        """Close the loop and the helper thread (idempotent)."""
        if not self._loop.is_closed():
            with contextlib.suppress(BaseException):
                self.run(self._loop.shutdown_asyncgens)
            if self._helper is not None:
                self._helper.shutdown(wait=True)
                self._helper = None
            self._loop.close()
