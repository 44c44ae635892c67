"""The Locust master's /export/prometheus text: parseable, with users, counters and percentiles per name."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from locust.env import Environment
from prometheus_client.parser import text_string_to_metric_families

from loadtests.locustfile import SealedRoundTripUser, render_prometheus


@pytest.fixture
def environment() -> Iterator[Environment]:
    env = Environment(user_classes=[SealedRoundTripUser])
    env.create_local_runner()
    yield env
    assert env.runner is not None
    env.runner.quit()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_export_counts_requests_and_failures_per_name(environment: Environment) -> None:
    assert environment.runner is not None
    stats = environment.runner.stats
    for response_time in (10, 20, 30, 400):
        stats.log_request("POST", "encrypt sealed [aesni]", response_time, 100)
    stats.log_error("POST", "encrypt sealed [aesni]", RuntimeError("boom"))
    stats.log_request("POST", 'odd "name" [python]', 5, 1)
    got = samples(render_prometheus(environment))
    labels = (("method", "POST"), ("name", "encrypt sealed [aesni]"))
    assert got[("locust_requests_total", labels)] == 4
    assert got[("locust_failures_total", labels)] == 1
    assert got[("locust_response_time_seconds", (*labels, ("quantile", "0.5")))] == pytest.approx(
        0.02, abs=0.011
    )
    assert got[("locust_response_time_seconds", (*labels, ("quantile", "0.99")))] == pytest.approx(0.4)
    assert got[("locust_requests_total", (("method", "POST"), ("name", 'odd "name" [python]')))] == 1
    assert got[("locust_users", ())] == 0
    assert got[("locust_running", ())] == 0


def test_export_without_requests_still_reports_users(environment: Environment) -> None:
    got = samples(render_prometheus(environment))
    assert got == {("locust_users", ()): 0.0, ("locust_running", ()): 0.0}


def test_failure_texts_accept_bodies_and_messages() -> None:
    from loadtests.locustfile import _short

    assert _short(b"\xff" + b"x" * 300) == "\ufffd" + "x" * 199
    assert _short('[{"error": 1}]', limit=5) == '[{"er'
    assert _short(None) == ""
