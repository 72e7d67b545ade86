"""Prometheus families read from plain figures at scrape time, a sample per source: the shape of the
broker's per-listener and per-log-dir metrics (throttled connections and their throttle time, group
commit) -- one family per :class:`Figure`, each source's labels and value read by the figure's getter."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

S = TypeVar("S")


@dataclass(frozen=True)
class Figure(Generic[S]):
    """One family: its kind, name and help, and how to read its value from a source."""

    kind: type[CounterMetricFamily] | type[GaugeMetricFamily]
    name: str
    documentation: str
    value: Callable[[S], float]


def families(figures: Sequence[Figure[S]], label_names: Sequence[str],
             sources: Iterable[tuple[Sequence[str], S]]) -> list[CounterMetricFamily | GaugeMetricFamily]:
    """A family per figure, in order, each with a sample per source (its label values, then the source)."""
    out = [f.kind(f.name, f.documentation, labels=list(label_names)) for f in figures]
    for labels, source in sources:
        for family, figure in zip(out, figures, strict=True):
            family.add_metric(list(labels), figure.value(source))
    return out
