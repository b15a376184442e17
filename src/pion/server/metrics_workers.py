"""``--metrics-port`` under ``-w N``: one scrape target that shows every worker's counters.

Why one endpoint on worker 0 and not a port per worker: a Prometheus operator scrapes one
target per server (a ``ServiceMonitor`` port, one ``static_configs`` line), as with Redis and
redis_exporter, and the workers are one server behind one RESP port. So worker 0 answers the
scrape with its own families and every other worker's, each series labelled ``worker="<i>"``
(``sum without (worker) (...)`` gives the server's total; ``by (worker)`` shows imbalance). The
other workers' text comes over the peer links already open between workers
(``workers/peer.py``): ``PION.METRICS`` on each (``commands/metrics.py``), at scrape time, in
parallel. A worker that does not answer (restarting) is left out of that scrape and
``pion_worker_up{worker="<i>"}`` says 0; it is 1 for each worker that answered.

Under ``-w 1`` nothing changes: no ``worker`` label, no peer calls (``metrics.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry

if TYPE_CHECKING:
    from pion.server.workers.runtime import WorkerRuntime

PEER_COMMAND = [b"PION.METRICS"]


def labelled(families: Iterable[Metric], worker: int) -> Iterator[Metric]:
    """The same families with ``worker="<i>"`` added to every sample."""
    for family in families:
        copy = Metric(family.name, family.documentation, family.type, family.unit)
        for sample in family.samples:
            copy.add_sample(sample.name, {**sample.labels, "worker": str(worker)}, sample.value,
                            sample.timestamp, sample.exemplar)
        yield copy


def merged(groups: Iterable[Iterable[Metric]]) -> list[Metric]:
    """One family per name (Prometheus text allows each name once), samples in worker order."""
    by_name: dict[str, Metric] = {}
    for families in groups:
        for family in families:
            into = by_name.get(family.name)
            if into is None:
                by_name[family.name] = family
            else:
                into.samples.extend(family.samples)
    return list(by_name.values())


class _Fixed(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


async def render_workers(local: Iterable[Metric], runtime: WorkerRuntime) -> bytes:
    """Every worker's families, ``worker``-labelled, as one Prometheus text exposition."""
    replies: dict[int, Any] = await runtime.broadcast(PEER_COMMAND)
    groups: list[Iterable[Metric]] = [labelled(local, runtime.worker_id)]
    up = GaugeMetricFamily("pion_worker_up", "1 when the worker answered this scrape (-w N)", labels=["worker"])
    up.add_metric([str(runtime.worker_id)], 1.0)
    for worker in sorted(replies):
        reply = replies[worker]
        if isinstance(reply, bytes):
            groups.append(labelled(text_string_to_metric_families(reply.decode()), worker))
        up.add_metric([str(worker)], 1.0 if isinstance(reply, bytes) else 0.0)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed([*merged(groups), up]))
    return generate_latest(registry)
