"""The step load shape: users per step, the stop after the last step, and parameter checks."""

from __future__ import annotations

import pytest

from loadtests.shapes import StepLoadShape


def shape(step_users: int = 4, step_seconds: float = 10.0, steps: int = 3) -> StepLoadShape:
    instance = StepLoadShape()
    instance.step_users, instance.step_seconds, instance.steps = step_users, step_seconds, steps
    return instance


def test_users_grow_by_one_step_each_interval() -> None:
    step = shape()
    assert [step.users_at(t) for t in (0.0, 9.9, 10.0, 19.9, 20.0, 29.9)] == [4, 4, 8, 8, 12, 12]


def test_the_test_stops_after_the_last_step() -> None:
    assert shape().users_at(30.0) is None
    assert shape(steps=1).users_at(10.0) is None


def test_tick_returns_users_and_spawn_rate_then_none() -> None:
    step = shape()
    users_and_rate = step.tick()
    assert users_and_rate == (4, step.spawn_rate)
    step.start_time -= 31.0  # as if 31 s had passed
    assert step.tick() is None


@pytest.mark.parametrize("bad", [{"step_users": 0}, {"step_seconds": 0.0}, {"steps": 0}])
def test_nonsense_parameters_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="step load needs"):
        shape(**bad).users_at(0.0)  # type: ignore[arg-type]
