"""The promise not to wait: per thread, nested blocks restore what was before, and only inside it does
:func:`refuse_waiting` raise."""

from __future__ import annotations

import threading

import pytest

from app.core.waiting import WouldWait, refuse_waiting, waiting_allowed, without_waiting


def test_refused_inside_the_block_only_and_nested_blocks_restore() -> None:
    assert waiting_allowed()
    refuse_waiting("nothing")  # outside: no exception
    with without_waiting():
        assert not waiting_allowed()
        with without_waiting():
            assert not waiting_allowed()
        assert not waiting_allowed()  # the inner block ended; the outer promise holds
        with pytest.raises(WouldWait, match="a lock"):
            refuse_waiting("a lock")
    assert waiting_allowed()


def test_the_block_ends_on_an_exception() -> None:
    with pytest.raises(WouldWait), without_waiting():
        refuse_waiting("a fetch")
    assert waiting_allowed()


def test_another_thread_may_still_wait() -> None:
    seen: list[bool] = []
    with without_waiting():
        worker = threading.Thread(target=lambda: seen.append(waiting_allowed()))
        worker.start()
        worker.join()
    assert seen == [True]
