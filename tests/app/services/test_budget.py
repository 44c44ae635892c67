"""ByteBudget: admits while bytes fit, makes others wait, refuses after the wait with a retry hint."""

from __future__ import annotations

import asyncio

import pytest

from app.api.errors import http_status
from app.services.budget import ByteBudget, OverloadedError


async def test_reservations_fit_wait_and_time_out() -> None:
    budget = ByteBudget(100, wait_seconds=0.05)
    first = await budget.reserve(60)
    assert (first, budget.held) == (60, 60)
    with pytest.raises(OverloadedError) as refused:
        await budget.reserve(50)
    assert refused.value.retry_after_seconds == 1 and http_status(refused.value) == 503
    assert "60 of 100" in refused.value.message and budget.held == 60
    # A waiter that must still be waiting after the sleep below: a wait far longer than any stall of a loaded
    # machine (with 0.05 s, a sleep(0.01) stretched past it made this test fail under load).
    budget.wait_seconds = 30
    waiting = asyncio.ensure_future(budget.reserve(50))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    await budget.release(first)
    assert await waiting == 50 and budget.held == 50


async def test_an_oversized_reservation_is_clamped_and_runs_alone() -> None:
    budget = ByteBudget(100, wait_seconds=1)
    assert await budget.reserve(10_000) == 100
    await budget.release(100)
    assert budget.held == 0


async def test_waiters_are_admitted_as_bytes_come_back() -> None:
    budget = ByteBudget(100, wait_seconds=2)
    held = [await budget.reserve(100)]
    admitted: list[int] = []

    async def client(n: int) -> None:
        admitted.append(await budget.reserve(n))

    tasks = [asyncio.ensure_future(client(40)) for _ in range(3)]
    await asyncio.sleep(0.01)
    assert admitted == []
    await budget.release(held.pop())
    await asyncio.sleep(0.01)
    assert admitted == [40, 40] and budget.held == 80
    await budget.release(40)
    await asyncio.gather(*tasks)
    assert budget.held == 80


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="limit"):
        ByteBudget(0, 1)
    with pytest.raises(ValueError, match="wait_seconds"):
        ByteBudget(1, -1)


async def test_every_change_of_the_held_bytes_is_reported() -> None:
    reported: list[int] = []
    budget = ByteBudget(100, wait_seconds=1, on_change=reported.append)
    first = await budget.reserve(60)
    waiting = asyncio.ensure_future(budget.reserve(70))
    await asyncio.sleep(0.01)
    await budget.release(first)
    await budget.release(await waiting)
    assert reported == [60, 0, 70, 0]
