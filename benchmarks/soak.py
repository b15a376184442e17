"""Soak: many clients against one pion-server under --maxmemory, kill -9 + restart on a timer, checks.

Workload (each client a thread with its own redis-py connection, commands picked at random by
weight): LMCache-shaped chunks (``SET``/``GET``/``EXISTS`` of 64 KB-1 MB values), KV prefixes
(``KV.PREFIX.REGISTER`` + ``V.STOREBATCH`` of every layer, ``KV.PREFIX.LOOKUP``, ``V.MFETCH`` of both
sides), small ``SET``/``GET``. ``--maxmemory`` is half the working set (chunks + prefixes) so the
server must evict or refuse. Every ``--kill-every`` seconds the server gets SIGKILL and is started
again on the same port and data directory (``--appendfsync everysec``).

Checks (each run, printed and written as JSON):
  * errors: every error reply by class and code; only ``-OOM`` (a write that cannot fit even after
    eviction) and ``-LOADING`` are allowed. A prefix evicted
    between a client's LOOKUP/REGISTER and its next command answers ``-ERR session ... not found``,
    or, when another client is already storing it again, ``-ERR range ... outside the <n> rows``:
    counted apart as ``evicted_between_commands`` (what a Redis client sees when a key is evicted
    between two commands), not as an error. Connection failures while the server is down are
    counted as ``unavailable``, not as errors.
  * integrity: every GET of a chunk and every V.MFETCH returns exactly the bytes stored.
  * durability: each small SET writes a fresh key (``ledger:<client>:<n>``); after each restart,
    every ledger key acknowledged at least 1 s before the kill must be there with its value (and
    the count of any acknowledged one missing is reported too).
  * memory: server RSS sampled twice a second must stay <= 1.2 x maxmemory + the stated overhead:
    the RSS of the idle server right after start (interpreter, numpy, hiredis) + 2 MiB per client
    (one 1 MB request being received and one 1 MB reply being sent; ``Soak.overhead``).
  * ops/s over time, p50/p99 per command class, evictions (V-store sessions, and keyspace keys
    when the server reports ``evicted_keys``).

    .venv/bin/python benchmarks/soak.py [--clients 64] [--duration 600] [--kill-every 120]
        [--working-set-mb 256] [--maxmemory-policy allkeys-lru] [--plot docs/img/soak.png]

``--maxmemory-policy`` (default ``volatile-lru``) goes to the server: chunks are SET with a TTL,
so they are evictable while the ledger keys (no TTL) are not, and the durability check stays exact.
Under ``allkeys-*`` a ledger key may be evicted, so that check is skipped (reported as such).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from support.procs import ServerProcess, free_port, start_server

CHUNK_MIN, CHUNK_MAX = 64 * 1024, 1024 * 1024
CHUNK_TTL_S = 86_400  # long enough never to expire in a run: it only makes chunks volatile-* evictable
N_LAYERS, N_TOKENS, KV_DIM = 4, 256, 128  # a prefix: 4 layers x K,V x 256 x 128 fp16 = 512 KiB
PREFIX_BYTES = N_LAYERS * 2 * N_TOKENS * KV_DIM * 2
WEIGHTS = {"lmc_set": 10, "lmc_get": 25, "lmc_exists": 15, "v_store": 5, "v_fetch": 10, "kv_lookup": 15,
           "small_set": 10, "small_get": 10}
ALLOWED_CODES = frozenset({"OOM", "LOADING"})
_POOL = np.random.default_rng(7).integers(0, 256, CHUNK_MAX + 8192, dtype=np.uint8).tobytes()  # slices start < 4096


@dataclass(frozen=True)
class SoakConfig:
    clients: int = 64
    duration_s: float = 600.0
    kill_every_s: float = 120.0
    working_set_mb: float = 256.0
    # volatile-lru: the chunks (SET with a TTL, as a cache entry) are evictable, the ledger keys
    # (no TTL) are not, so "acknowledged and missing" can only mean lost. allkeys-* may evict ledger
    # keys too: the durability check then cannot tell an eviction from a loss and is skipped.
    maxmemory_policy: str | None = "volatile-lru"
    seed: int = 1


@dataclass
class ClientStats:
    """One client thread's counts; merged after the run (no locks on the hot path)."""

    per_second: Counter[tuple[int, str]] = field(default_factory=Counter)
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: Counter[str] = field(default_factory=Counter)  # "<class>:<code>" -> count
    samples: dict[str, str] = field(default_factory=dict)  # one message per error key
    unavailable: int = 0
    evicted_between_commands: int = 0
    corrupt: list[str] = field(default_factory=list)
    ledger: list[tuple[str, bytes, float]] = field(default_factory=list)  # key, value, ack time


def error_code(exc: redis.ResponseError) -> str:
    """The reply's error code: redis-py strips the ones it maps to exception classes."""
    for cls, code in ((redis.exceptions.OutOfMemoryError, "OOM"), (redis.exceptions.BusyLoadingError, "LOADING"),
                      (redis.exceptions.ReadOnlyError, "READONLY"), (redis.exceptions.NoPermissionError, "NOPERM")):
        if isinstance(exc, cls):
            return code
    first = str(exc).split("caused error: ", 1)[-1].split(" ", 1)[0]
    return first if first.isalpha() and first.isupper() and len(first) > 2 else "ERR"


def chunk_value(key_id: int, size: int) -> bytes:
    """An 8-byte header (key id, size) + a slice of one random pool: checkable on GET."""
    header = key_id.to_bytes(4, "little") + size.to_bytes(4, "little")
    return header + _POOL[(key_id * 4099) % 4096:][:size - 8]


def chunk_ok(value: bytes) -> bool:
    key_id, size = int.from_bytes(value[:4], "little"), int.from_bytes(value[4:8], "little")
    return len(value) == size and value == chunk_value(key_id, size)


def layer_blob(prefix: int, side: str, layer: int) -> bytes:
    start = (prefix * 131 + layer * 17 + (0 if side == "k" else 7)) % 4096
    return _POOL[start:start + N_TOKENS * KV_DIM * 2]


class Soak:
    """The server, the client threads, the killer and the samplers of one soak run."""

    def __init__(self, config: SoakConfig, data_dir: Path) -> None:
        self.config = config
        self.data_dir = data_dir
        self.n_chunks = max(4, int(config.working_set_mb * 0.7 * 1024**2 / ((CHUNK_MIN + CHUNK_MAX) / 2)))
        self.n_prefixes = max(2, int(config.working_set_mb * 0.3 * 1024**2 / PREFIX_BYTES))
        working_set = self.n_chunks * (CHUNK_MIN + CHUNK_MAX) // 2 + self.n_prefixes * PREFIX_BYTES
        self.maxmemory = working_set // 2
        self.port = free_port()
        self.args = ["--maxmemory", str(self.maxmemory), "--appendfsync", "everysec", "--binary-port", "0",
                     "--wal-max-bytes", "128mb", "--loglevel", "warning"]
        if config.maxmemory_policy:
            self.args += ["--maxmemory-policy", config.maxmemory_policy]
        self.stop = threading.Event()
        self.t0 = 0.0
        self.server: ServerProcess | None = None
        self.rss: list[tuple[float, int]] = []
        self.kills: list[dict[str, Any]] = []
        self.evictions: Counter[str] = Counter()  # summed over server lives
        self._life_evictions: dict[str, int] = {}
        self.idle_rss = 0

    # ---- server life ------------------------------------------------------------------------
    def start(self) -> float:
        started = time.monotonic()
        self.server = start_server(self.data_dir, *self.args, port=self.port, wait_s=300)
        return time.monotonic() - started

    def _sample(self) -> None:
        """RSS twice a second; INFO eviction counters once a second (they restart at 0 per life)."""
        tick = 0
        while not self.stop.is_set():
            server = self.server
            if server is not None and server.proc.poll() is None:
                try:
                    status = Path(f"/proc/{server.proc.pid}/status").read_text()
                    rss_kb = int(next(line for line in status.splitlines() if line.startswith("VmRSS")).split()[1])
                    self.rss.append((time.monotonic() - self.t0, rss_kb * 1024))
                except (OSError, StopIteration, ValueError):
                    pass
                if tick % 2 == 0:
                    try:
                        with server.client(socket_timeout=2) as r:
                            info = r.info("everything")
                        self._life_evictions = {k: int(info.get(k, 0)) for k in ("evicted_keys", "vstore_evicted_sessions")}
                    except (redis.RedisError, OSError):
                        pass
            tick += 1
            self.stop.wait(0.5)

    def overhead(self) -> int:
        """The stated RSS overhead over 1.2 x maxmemory: the idle server (interpreter, numpy,
        hiredis) plus, per client, one largest request being received and one reply being sent
        (2 x 1 MB): buffers Redis does not count toward maxmemory either."""
        return self.idle_rss + self.config.clients * 2 * CHUNK_MAX

    def _end_life(self) -> None:
        self.evictions.update(self._life_evictions)
        self._life_evictions = {}

    # ---- clients ----------------------------------------------------------------------------
    def _client(self, index: int, stats: ClientStats) -> None:
        rng = random.Random(self.config.seed * 1000 + index)
        ops, weights = list(WEIGHTS), list(WEIGHTS.values())
        r = redis.Redis(port=self.port, socket_timeout=30, socket_connect_timeout=2)
        n_ledger = 0
        while not self.stop.is_set():
            op = rng.choices(ops, weights)[0]
            started = time.monotonic()
            try:
                n_ledger = self._one(r, rng, op, index, n_ledger, stats)
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                stats.unavailable += 1
                time.sleep(0.05)
                continue
            except redis.ResponseError as exc:
                text = str(exc).split("caused error: ", 1)[-1]  # a pipeline's error names the command first
                if op in ("v_store", "v_fetch") and ("not found" in text or "outside the" in text):
                    stats.evicted_between_commands += 1
                else:
                    key = f"{op}:{error_code(exc)}"
                    stats.errors[key] += 1
                    stats.samples.setdefault(key, text[:160])
                    if isinstance(exc, redis.exceptions.BusyLoadingError):
                        time.sleep(0.05)
            done = time.monotonic()
            stats.latencies[op].append(done - started)
            stats.per_second[(int(done - self.t0), op)] += 1
        r.close()

    def _one(self, r: redis.Redis, rng: random.Random, op: str, index: int, n_ledger: int,
             stats: ClientStats) -> int:
        if op in ("lmc_set", "lmc_get", "lmc_exists"):
            key_id = rng.randrange(self.n_chunks)
            key = f"lmc:chunk:{key_id}"
            if op == "lmc_set":
                r.set(key, chunk_value(key_id, rng.randrange(CHUNK_MIN, CHUNK_MAX)), ex=CHUNK_TTL_S)
            elif op == "lmc_get":
                value = r.get(key)
                if value is not None and not chunk_ok(value):
                    stats.corrupt.append(key)
            else:
                r.exists(key)
        elif op in ("v_store", "v_fetch", "kv_lookup"):
            prefix = rng.randrange(self.n_prefixes)
            ns = f"soak{prefix}"
            if op == "kv_lookup":
                r.execute_command("KV.PREFIX.LOOKUP", ns)
            elif op == "v_store":
                pipe = r.pipeline(transaction=False)
                pipe.execute_command("KV.PREFIX.REGISTER", ns, KV_DIM, "fp16", "LAYERS", N_LAYERS)
                for side in ("k", "v"):
                    for layer in range(N_LAYERS):
                        pipe.execute_command("V.STOREBATCH", f"{ns}_p{side}", layer, 0, layer_blob(prefix, side, layer),
                                             "DTYPE", "f16")
                pipe.execute()
            elif r.execute_command("KV.PREFIX.LOOKUP", ns) == b"HIT":
                pipe = r.pipeline(transaction=False)
                for side in ("k", "v"):
                    pipe.execute_command("V.MFETCH", f"{ns}_p{side}", 0, N_LAYERS, "RANGE", 0, N_TOKENS, "DTYPE", "f16")
                got = pipe.execute()
                want = [[layer_blob(prefix, side, layer) for layer in range(N_LAYERS)] for side in ("k", "v")]
                if got != want:
                    stats.corrupt.append(ns)
        elif op == "small_set":
            key, value = f"ledger:{index}:{n_ledger}", b"v%d" % n_ledger
            r.set(key, value)
            stats.ledger.append((key, value, time.monotonic()))
            return n_ledger + 1
        else:
            r.get(f"ledger:{index}:{rng.randrange(max(1, n_ledger))}")
        return n_ledger

    # ---- checks -----------------------------------------------------------------------------
    def _check_ledger(self, all_stats: list[ClientStats], kill_at: float) -> dict[str, int]:
        """After a restart: every ledger key acknowledged before the kill, by age at the kill."""
        entries = [e for s in all_stats for e in list(s.ledger) if e[2] < kill_at]
        assert self.server is not None
        missing_old = missing_any = 0
        with self.server.client(socket_timeout=60) as r:
            for i in range(0, len(entries), 1000):
                batch = entries[i:i + 1000]
                for (_, value, acked), got in zip(batch, r.mget([e[0] for e in batch])):
                    if got != value:
                        missing_any += 1
                        missing_old += acked < kill_at - 1.0
        return {"checked": len(entries), "missing_acked_1s_before_kill": missing_old,
                "missing_any_acked": missing_any}

    def run(self) -> dict[str, Any]:
        """The whole soak; returns the report (also the JSON written by ``main``)."""
        self.start()
        time.sleep(0.5)
        assert self.server is not None
        status = Path(f"/proc/{self.server.proc.pid}/status").read_text()
        self.idle_rss = int(next(x for x in status.splitlines() if x.startswith("VmRSS")).split()[1]) * 1024
        self.t0 = time.monotonic()
        all_stats = [ClientStats() for _ in range(self.config.clients)]
        threads = [threading.Thread(target=self._client, args=(i, s), daemon=True) for i, s in enumerate(all_stats)]
        sampler = threading.Thread(target=self._sample, daemon=True)
        for t in [*threads, sampler]:
            t.start()
        end = self.t0 + self.config.duration_s
        next_kill = self.t0 + self.config.kill_every_s
        while time.monotonic() < end:
            time.sleep(max(0.0, min(next_kill, end) - time.monotonic()))
            if time.monotonic() >= end - 5.0:  # no kill in the last seconds: leave time to check
                break
            kill_at = time.monotonic()
            self._end_life()
            self.server.kill9()
            restart_s = self.start()
            check = self._check_ledger(all_stats, kill_at)
            self.kills.append({"at_s": round(kill_at - self.t0, 1), "restart_s": round(restart_s, 2), **check})
            next_kill = kill_at + self.config.kill_every_s
        self.stop.set()
        for t in threads:
            t.join(timeout=60)
        sampler.join(timeout=10)
        self._end_life()
        self.server.stop()
        return self._report(all_stats)

    def _report(self, all_stats: list[ClientStats]) -> dict[str, Any]:
        per_second: Counter[tuple[int, str]] = Counter()
        latencies: dict[str, list[float]] = defaultdict(list)
        errors: Counter[str] = Counter()
        samples: dict[str, str] = {}
        for s in all_stats:
            per_second.update(s.per_second)
            errors.update(s.errors)
            samples.update(s.samples)
            for op, values in s.latencies.items():
                latencies[op].extend(values)
        seconds = int(self.config.duration_s)
        ops_per_s = [sum(per_second[(t, op)] for op in WEIGHTS) for t in range(seconds)]
        disallowed = {k: v for k, v in errors.items() if k.split(":")[1] not in ALLOWED_CODES}
        rss_limit = int(1.2 * self.maxmemory + self.overhead())
        peak_rss = max((v for _, v in self.rss), default=0)
        checkable = not (self.config.maxmemory_policy or "").startswith("allkeys")
        lost = sum(k["missing_acked_1s_before_kill"] for k in self.kills) if checkable else 0
        corrupt = [c for s in all_stats for c in s.corrupt]
        return {
            "config": asdict(self.config), "maxmemory": self.maxmemory, "n_chunks": self.n_chunks,
            "n_prefixes": self.n_prefixes, "idle_rss": self.idle_rss, "overhead": self.overhead(),
            "rss_limit": rss_limit, "peak_rss": peak_rss,
            "ops_total": sum(ops_per_s), "ops_per_s": ops_per_s,
            "per_class_per_s": {op: [per_second[(t, op)] for t in range(seconds)] for op in WEIGHTS},
            "latency_ms": {op: {"n": len(v), "p50": 1e3 * statistics.median(v),
                                "p99": 1e3 * float(np.percentile(v, 99))} for op, v in sorted(latencies.items()) if v},
            "errors": dict(errors), "error_samples": samples, "disallowed_errors": disallowed,
            "unavailable": sum(s.unavailable for s in all_stats),
            "evicted_between_commands": sum(s.evicted_between_commands for s in all_stats),
            "evictions": dict(self.evictions), "kills": self.kills, "corrupt": corrupt[:20],
            "durability_checkable": checkable,
            "rss": self.rss,
            "checks": {"no_disallowed_errors": not disallowed, "no_corrupt_reads": not corrupt,
                       "no_lost_acknowledged_writes": lost == 0,  # True (unchecked) under allkeys-*
                       "rss_within_limit": peak_rss <= rss_limit,
                       "restarted": len(self.kills) >= 1},
        }


def plot(report: dict[str, Any], path: Path) -> bool:
    """ops/s and RSS over time with the kills marked; False when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    t = list(range(len(report["ops_per_s"])))
    top.plot(t, report["ops_per_s"], label="all", color="black", linewidth=1)
    for op, series in report["per_class_per_s"].items():
        top.plot(t, series, label=op, linewidth=0.7)
    top.set_ylabel("ops/s")
    top.legend(fontsize=7, ncol=5, loc="upper right")
    rss_t = [x for x, _ in report["rss"]]
    bottom.plot(rss_t, [v / 2**20 for _, v in report["rss"]], label="server RSS", color="tab:blue")
    bottom.axhline(report["maxmemory"] / 2**20, color="tab:green", linestyle="--", label="maxmemory")
    bottom.axhline(report["rss_limit"] / 2**20, color="tab:red", linestyle=":", label="limit 1.2 x maxmemory + overhead")
    bottom.set_ylabel("MiB")
    bottom.set_xlabel("seconds")
    bottom.legend(fontsize=7, loc="lower right")
    for ax in (top, bottom):
        for kill in report["kills"]:
            ax.axvline(kill["at_s"], color="grey", linewidth=0.8, linestyle="-.")
    cfg = report["config"]
    top.set_title(f"pion-server soak: {cfg['clients']} clients, {cfg['duration_s']:.0f} s, kill -9 every "
                  f"{cfg['kill_every_s']:.0f} s (dash-dot), maxmemory {report['maxmemory'] / 2**20:.0f} MiB")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def markdown(report: dict[str, Any]) -> str:
    """The docs-ready summary table."""
    lines = ["| class | ops | p50 ms | p99 ms |", "|---|---|---|---|"]
    for op, row in report["latency_ms"].items():
        lines.append(f"| {op} | {row['n']:,} | {row['p50']:.2f} | {row['p99']:.2f} |")
    ops = report["ops_per_s"]
    mid = ops[len(ops) // 10: -len(ops) // 10 or None] or ops
    lines += ["", f"ops/s: mean {statistics.mean(mid):,.0f} (middle 80 % of the run), min {min(mid):,} per second",
              f"kills: {json.dumps(report['kills'])}",
              f"evictions: {report['evictions']}; evicted between two commands of a client: "
              f"{report['evicted_between_commands']}; unavailable (connection refused during restarts): "
              f"{report['unavailable']}",
              f"errors: {report['errors'] or 'none'} ({report['error_samples']})",
              f"RSS peak {report['peak_rss'] / 2**20:.0f} MiB, limit {report['rss_limit'] / 2**20:.0f} MiB "
              f"(1.2 x maxmemory {report['maxmemory'] / 2**20:.0f} MiB + overhead {report['overhead'] / 2**20:.0f} MiB: "
              f"idle RSS {report['idle_rss'] / 2**20:.0f} MiB + {report['config']['clients']} clients x 2 MiB)",
              f"checks: {report['checks']}"]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--duration", type=float, default=600.0, help="seconds")
    parser.add_argument("--kill-every", type=float, default=120.0, help="seconds between kill -9s")
    parser.add_argument("--working-set-mb", type=float, default=256.0)
    parser.add_argument("--maxmemory-policy", default="volatile-lru",
                        help="the server's policy (default volatile-lru: chunks evictable, ledger keys not; "
                             "allkeys-* skips the durability check; '' = the server's default)")
    parser.add_argument("--plot", type=Path, default=None, help="write the PNG here")
    parser.add_argument("--json", type=Path, default=None, help="write the full report here")
    args = parser.parse_args()
    config = SoakConfig(args.clients, args.duration, args.kill_every, args.working_set_mb, args.maxmemory_policy)
    with tempfile.TemporaryDirectory(prefix="pion-soak-") as tmp:
        report = Soak(config, Path(tmp) / "data").run()
    print(markdown(report))
    if args.json is not None:
        args.json.write_text(json.dumps(report))
    if args.plot is not None and not plot(report, args.plot):
        print("matplotlib is not installed: no plot", file=sys.stderr)
    return 0 if all(report["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
