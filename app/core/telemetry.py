"""The ``/metrics`` exposition (single- and multi-process) and the hwsim device collector (no web imports).

The HTTP request metrics are recorded by :class:`app.api.middleware.metrics.ObservedMiddleware`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Metric,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

from app.core import metric_buffer

HWSIM_PREFIX = "keystream_hwsim_"
#: (name, type, labels, value) as produced by ``hwsim.prometheus_samples``.
Sample = tuple[str, str, dict[str, str], float]


class HwsimCollector(Collector):
    """Exports a simulated device's snapshot as ``keystream_hwsim_*`` metric families at scrape time.

    A ``quantile`` label on a gauge becomes ``percentile`` (the name is reserved for summaries)."""

    def __init__(self, snapshot: Callable[[], object], to_samples: Callable[[Any], Iterable[Sample]]) -> None:
        self._snapshot = snapshot
        self._to_samples = to_samples

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for name, kind, sample_labels, value in self._to_samples(self._snapshot()):
            full = name if name.startswith(HWSIM_PREFIX) else HWSIM_PREFIX + name
            labels = dict(sample_labels)
            if kind != "summary" and "quantile" in labels:
                # Prometheus reserves "quantile" for summaries (promtool rejects it on a gauge).
                labels["percentile"] = labels.pop("quantile")
            if kind == "counter":
                full = full.removesuffix("_total")
            family = families.get(full)
            if family is None:
                label_names = sorted(labels)
                if kind == "counter":
                    family = CounterMetricFamily(full, f"hwsim device metric {full}", labels=label_names)
                else:
                    family = GaugeMetricFamily(full, f"hwsim device metric {full}", labels=label_names)
                families[full] = family
            assert isinstance(family, CounterMetricFamily | GaugeMetricFamily)
            family.add_metric([labels[key] for key in sorted(labels)], float(value))
        yield from families.values()


def render_metrics(extra: CollectorRegistry | None = None) -> tuple[bytes, str]:
    """The Prometheus text exposition of this process (or, in multiprocess mode, of every worker).

    Multiprocess mode is on when ``PROMETHEUS_MULTIPROC_DIR`` is set (``keystream serve --workers N``).
    ``extra`` holds per-app collectors such as the hwsim device's.
    """
    metric_buffer.flush()  # this worker's own updates; the others' arrive with their periodic flush
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        output = generate_latest(registry)
    else:
        output = generate_latest(REGISTRY)
    if extra is not None:
        output += generate_latest(extra)
    return output, CONTENT_TYPE_LATEST


def release_process_metrics(pid: int | None = None) -> bool:
    """Drop this worker's live gauges (in-flight requests, key-cache entries) from multiprocess metrics.

    Called when a worker's lifespan ends, so a worker that exited (or was replaced) stops adding its last
    values to the aggregate. Counters and histograms are kept: they are totals. Returns whether multiprocess
    mode was on.
    """
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return False
    mark_process_dead(os.getpid() if pid is None else pid)  # type: ignore[no-untyped-call]
    return True
