"""``--metrics-port``: Prometheus text at ``GET /metrics``, read from the server's own counters at scrape time.

Why scrape-time: the request path is the product. Commands are already counted and timed for
INFO commandstats (one clock read per command in net.py); this module reads those counters, the
INFO sections every family already reports, the WAL's fsync histogram and the PION.STATS receipt
when Prometheus asks, and adds nothing per request except the KV commands' latency bucket (one
``bisect`` on a 15-entry tuple, counted where net.py already times the command).

The metric names are redis_exporter's where the meaning is the same (dashboards built for Redis
work): ``redis_commands_total{cmd}``, ``redis_commands_duration_seconds_total{cmd}``,
``redis_commands_rejected_calls_total{cmd}``, ``redis_commands_failed_calls_total{cmd}``,
``redis_errors_total{err}``, ``redis_commands_latencies_usec{cmd}`` (histogram, microsecond
buckets), ``redis_memory_used_bytes``, ``redis_memory_max_bytes``, ``redis_evicted_keys_total``,
``redis_db_keys{db}``... (``INFO_METRICS`` below lists every INFO field exported and its name).
What Redis has no word for is ``pion_*``: the V-store, the WAL (``pion_wal_bytes``,
``pion_wal_fsync_duration_seconds`` histogram) and the receipt (``pion_kvprefix_hits_total``,
``pion_prefill_seconds_avoided_total``...; every PION.STATS field).

INFO is read through its own handler (``INFO everything``) and parsed the way redis_exporter
parses it, so a field a family adds to INFO later is one row in ``INFO_METRICS`` away from
being exported, and the numbers can never disagree with INFO.

The HTTP side is a minimal HTTP/1.1 responder on the event loop (one request per connection,
``Connection: close``): serving from the loop's thread means a scrape reads the counters
between commands, never in the middle of one. It binds ``--bind`` like the RESP port and asks
no password: it exposes counts, never keys or values.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from pion.server.commands.admin import cmd_admin_info
from pion.server.context import ClientState, CommandContext
from pion.server.metrics_workers import render_workers
from pion.server.persist.wal import FSYNC_BUCKETS_S
from pion.server.receipt import FIELDS as RECEIPT_FIELDS
from pion.server.resp.replies import Verbatim

if TYPE_CHECKING:
    from pion.server.context import ServerState
    from pion.server.workers.runtime import WorkerRuntime

log = logging.getLogger("pion.server.metrics")

# Upper bounds of the KV commands' latency buckets, seconds (exported in microseconds).
LATENCY_BUCKETS_S = (1e-05, 2.5e-05, 5e-05, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                     0.1, 0.25, 1.0)
# The commands that get a latency histogram: what an inference engine sends on its hot path.
KV_COMMANDS = frozenset({"GET", "SET", "MGET", "MSET", "EXISTS", "DEL", "UNLINK"})
KV_PREFIXES = ("V.", "KV.PREFIX.", "SSM.PREFIX.", "ATTEND.PREFIX.")

# INFO field -> (metric name, kind, help). Counters are named without ``_total`` (added on output).
INFO_METRICS: dict[str, tuple[str, str, str]] = {
    "uptime_in_seconds": ("redis_uptime_in_seconds", "gauge", "Seconds since the server started"),
    "connected_clients": ("redis_connected_clients", "gauge", "RESP clients connected"),
    "maxclients": ("redis_config_maxclients", "gauge", "--maxclients"),
    "used_memory": ("redis_memory_used_bytes", "gauge", "INFO used_memory: the bytes --maxmemory bounds"),
    "used_memory_rss": ("redis_memory_used_rss_bytes", "gauge", "Resident set size of the process"),
    "maxmemory": ("redis_memory_max_bytes", "gauge", "--maxmemory (0 = unlimited)"),
    "keyspace_bytes": ("pion_keyspace_bytes", "gauge", "Bytes the keyspace counts toward --maxmemory"),
    "vstore_bytes": ("pion_vstore_bytes", "gauge", "Bytes of V-store rows"),
    "vstore_allocated_bytes": ("pion_vstore_allocated_bytes", "gauge", "Bytes of V-store buffers held"),
    "vstore_sessions": ("pion_vstore_sessions", "gauge", "V-store sessions held"),
    "vstore_evicted_sessions": ("pion_vstore_evicted_sessions", "counter",
                                "V-store sessions evicted (least recently used) to stay under the budget"),
    "attend_bytes": ("pion_attend_bytes", "gauge", "Bytes of ATTEND.PREFIX slots"),
    "expired_keys": ("redis_expired_keys", "counter", "Keys removed because their TTL passed"),
    "evicted_keys": ("redis_evicted_keys", "counter", "Keys evicted under --maxmemory"),
    "total_error_replies": ("redis_total_error_replies", "counter", "Error replies sent"),
    "loading": ("redis_loading_dump_file", "gauge", "1 while the data directory is being recovered"),
    "wal_bytes": ("pion_wal_bytes", "gauge", "Bytes of WAL not yet made obsolete by a snapshot"),
    "wal_write_errors": ("pion_wal_write_errors", "counter", "Failed WAL writes or fsyncs"),
    "bgsave_in_progress": ("redis_rdb_bgsave_in_progress", "gauge", "1 while a background snapshot runs"),
    "last_save_time": ("redis_rdb_last_save_timestamp_seconds", "gauge", "Unix time of the last snapshot"),
    "saves": ("pion_snapshots", "counter", "Snapshots written"),
    "wal_last_write_status": ("redis_aof_last_write_status", "gauge", "1 when the last WAL write succeeded"),
}
_RATES = frozenset({"kvprefix_hit_rate", "semantic_hit_rate"})


def wants_latency_histogram(name: str) -> bool:
    """True for the KV commands whose latency is bucketed (``KV_COMMANDS``, ``KV_PREFIXES``)."""
    upper = name.upper()
    return upper in KV_COMMANDS or upper.startswith(KV_PREFIXES)


def parse_info(text: str) -> dict[str, dict[str, str]]:
    """INFO's text as {section (lower case): {field: value}} (redis_exporter's reading)."""
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# "):
            current = sections.setdefault(line[2:].strip().lower(), {})
        elif ":" in line:
            field, _, value = line.partition(":")
            current[field] = value
    return sections


def _number(value: str) -> float | None:
    if value in ("ok", "err"):
        return 1.0 if value == "ok" else 0.0
    try:
        return float(value)
    except ValueError:
        return None


def _cumulative(buckets: list[int], bounds: tuple[float, ...], scale: float) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    running = 0
    for bound, count in zip(bounds, buckets):
        running += count
        out.append((f"{bound * scale:.10g}", float(running)))
    out.append(("+Inf", float(running + buckets[-1])))
    return out


class ServerCollector(Collector):
    """Builds every metric family from the server's state when the registry is collected."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.ctx = CommandContext(server=state, client=ClientState(client_id=0, authenticated=True))

    def collect(self) -> Iterator[Metric]:
        info = cmd_admin_info(self.ctx, [b"everything"])
        sections = parse_info(info.text if isinstance(info, Verbatim) else "")
        yield from self._info_metrics(sections)
        yield from self._command_metrics()
        yield from self._keyspace_metrics(sections.get("keyspace", {}))
        yield from self._fsync_metrics()
        yield from self._receipt_metrics()

    def _info_metrics(self, sections: dict[str, dict[str, str]]) -> Iterator[Metric]:
        for fields in sections.values():
            for field, raw in fields.items():
                row = INFO_METRICS.get(field)
                value = _number(raw) if row is not None else None
                if row is None or value is None:
                    continue
                name, kind, help_text = row
                family = (CounterMetricFamily(name, help_text, value=value) if kind == "counter"
                          else GaugeMetricFamily(name, help_text, value=value))
                yield family

    def _command_metrics(self) -> Iterator[Metric]:
        dispatcher = self.state.dispatcher
        calls = CounterMetricFamily("redis_commands", "Calls per command (failed ones included)", labels=["cmd"])
        seconds = CounterMetricFamily("redis_commands_duration_seconds", "Seconds spent running each command",
                                      labels=["cmd"])
        rejected = CounterMetricFamily("redis_commands_rejected_calls",
                                       "Calls refused before running (arity, NOAUTH)", labels=["cmd"])
        failed = CounterMetricFamily("redis_commands_failed_calls", "Calls that answered an error",
                                     labels=["cmd"])
        for stat in dispatcher.command_stats():
            calls.add_metric([stat.name], stat.calls)
            seconds.add_metric([stat.name], stat.usec / 1e6)
            rejected.add_metric([stat.name], stat.rejected_calls)
            failed.add_metric([stat.name], stat.failed_calls)
        yield from (calls, seconds, rejected, failed)
        errors = CounterMetricFamily("redis_errors", "Error replies by error code", labels=["err"])
        for code, count in sorted(dispatcher.error_counts.items()):
            errors.add_metric([code], count)
        yield errors
        latency = HistogramMetricFamily("redis_commands_latencies_usec",
                                        "Run time of the KV commands, microseconds", labels=["cmd"])
        for name, buckets, total_s in dispatcher.latency_histograms():
            if sum(buckets):
                latency.add_metric([name], _cumulative(buckets, dispatcher.latency_bounds, 1e6), total_s * 1e6)
        yield latency

    def _keyspace_metrics(self, keyspace: dict[str, str]) -> Iterator[Metric]:
        keys = GaugeMetricFamily("redis_db_keys", "Keys per database", labels=["db"])
        expiring = GaugeMetricFamily("redis_db_keys_expiring", "Keys with a TTL per database", labels=["db"])
        for db, text in keyspace.items():
            pairs = dict(part.partition("=")[::2] for part in text.split(","))
            keys.add_metric([db], float(pairs.get("keys", 0)))
            expiring.add_metric([db], float(pairs.get("expires", 0)))
        yield from (keys, expiring)

    def _fsync_metrics(self) -> Iterator[Metric]:
        wal = self.state.persist.wal
        fsync = HistogramMetricFamily("pion_wal_fsync_duration_seconds", "WAL fdatasync latency")
        if wal is not None:
            fsync.add_metric([], _cumulative(list(wal.fsync_buckets), FSYNC_BUCKETS_S, 1.0), wal.fsync_seconds)
        yield fsync

    def _receipt_metrics(self) -> Iterator[Metric]:
        snapshot = self.state.receipt.snapshot()
        for field in RECEIPT_FIELDS:
            if field == "uptime_seconds":
                continue  # redis_uptime_in_seconds
            value = float(snapshot[field])
            help_text = f"PION.STATS {field}"
            yield (GaugeMetricFamily(f"pion_{field}", help_text, value=value) if field in _RATES
                   else CounterMetricFamily(f"pion_{field}", help_text, value=value))


_MAX_HEAD = 16 * 1024
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
            431: "Request Header Fields Too Large"}


class _HttpConnection(asyncio.Protocol):
    """One scrape: read the request head, answer, close."""

    def __init__(self, endpoint: MetricsEndpoint) -> None:
        self.endpoint = endpoint
        self.head = bytearray()
        self.transport: asyncio.Transport | None = None
        self.answered = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self.answered:
            return
        self.head += data
        if b"\r\n\r\n" not in self.head and b"\n\n" not in self.head:
            if len(self.head) > _MAX_HEAD:
                self._answer(431, b"request head too large\n")
            return
        words = bytes(self.head.split(b"\n", 1)[0]).decode("latin-1").split()
        if len(words) != 3 or not words[2].startswith("HTTP/"):
            self._answer(400, b"bad request line\n")
        elif words[1].split("?", 1)[0] != "/metrics":
            self._answer(404, b"only /metrics is served here\n")
        elif words[0] not in ("GET", "HEAD"):
            self._answer(405, b"use GET\n")
        elif self.endpoint.runtime is None:
            self._answer(200, self.endpoint.render(), CONTENT_TYPE_LATEST, head_only=words[0] == "HEAD")
        else:  # -w N: the other workers' families come over the peer links (metrics_workers.py)
            task = asyncio.get_running_loop().create_task(self._answer_workers(words[0] == "HEAD"))
            self.endpoint.scrapes.add(task)
            task.add_done_callback(self.endpoint.scrapes.discard)

    async def _answer_workers(self, head_only: bool) -> None:
        runtime = self.endpoint.runtime
        assert runtime is not None
        body = await render_workers(list(self.endpoint.registry.collect()), runtime)
        if self.transport is not None and not self.transport.is_closing():
            self._answer(200, body, CONTENT_TYPE_LATEST, head_only=head_only)

    def _answer(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8",
                head_only: bool = False) -> None:
        assert self.transport is not None
        self.answered = True
        head = (f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
        self.transport.write(head if head_only else head + body)
        self.transport.close()


class MetricsEndpoint:
    """The registry (one ``ServerCollector``) and its HTTP listener.

    Under ``-w N`` every worker has one (``PION.METRICS`` renders it for worker 0) and only
    worker 0 listens: its scrape carries every worker's families, ``worker``-labelled
    (``runtime`` set; ``metrics_workers.py``)."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.runtime: WorkerRuntime | None = (
            state.worker if state.worker is not None and state.worker.n_workers > 1 else None)
        self.scrapes: set[asyncio.Task[None]] = set()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(ServerCollector(state))
        self.server: asyncio.AbstractServer | None = None
        self.port = 0
        state.dispatcher.enable_latency_histograms(
            [name for name in state.table.specs if wants_latency_histogram(name)], LATENCY_BUCKETS_S)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric, now."""
        return generate_latest(self.registry)

    async def start(self) -> None:
        """Listen on ``--bind:--metrics-port``; raises OSError when the port cannot be bound."""
        cfg = self.state.config
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: _HttpConnection(self), host=cfg.bind,
                                               port=cfg.metrics_port, reuse_address=True)
        self.port = int(self.server.sockets[0].getsockname()[1])
        log.info("metrics on http://%s:%d/metrics", cfg.bind, self.port)

    async def close(self) -> None:
        for task in list(self.scrapes):
            task.cancel()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
