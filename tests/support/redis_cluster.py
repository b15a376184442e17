"""A real Redis Cluster on loopback (Debian's redis-server 7), started and always stopped.

Each node is a ``redis-server`` child with its own directory under the test's tmp path
(``cluster-enabled yes``, its own ``cluster-config-file``, no AOF, no RDB saves);
``redis-cli --cluster create`` assigns the slots (and replicas). Tests skip when the
binaries are missing (CI installs them: .ci/run).
"""

from __future__ import annotations

import atexit
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from support.procs import free_port

NODE_TIMEOUT_MS = 1000  # failover within ~2-3 s of a master's death
_NODES: list[subprocess.Popen[bytes]] = []  # every redis-server started, so none outlives the run


@atexit.register
def _kill_leftovers() -> None:
    """A test run that died before a fixture's teardown leaves no redis-server behind."""
    for proc in _NODES:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


def cluster_tools_missing() -> str | None:
    """Why a cluster cannot be started here (for pytest.skip), or None."""
    for tool in ("redis-server", "redis-cli"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install redis-server redis-tools; .ci/run does)"
    return None


@dataclass
class RedisNode:
    port: int
    proc: subprocess.Popen[bytes]

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2.0)

    def kill9(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)


@dataclass
class RedisCluster:
    nodes: list[RedisNode] = field(default_factory=list)

    @property
    def url(self) -> str:
        return "redis-cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes[:3])

    def alive(self) -> list[RedisNode]:
        return [n for n in self.nodes if n.proc.poll() is None]

    def master_of(self, key: str) -> RedisNode:
        """The node serving ``key``'s slot now."""
        probe = self.alive()[0].client()
        slot = int(probe.execute_command("CLUSTER", "KEYSLOT", key))
        for start, end, master, *_ in probe.execute_command("CLUSTER", "SLOTS"):
            if start <= slot <= end:
                port = int(master[1])
                return next(n for n in self.nodes if n.port == port)
        raise RuntimeError(f"no master serves slot {slot}")

    def wait_ok(self, timeout_s: float = 30.0) -> None:
        """Every live node reports cluster_state:ok (after create, or after a failover)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if all(b"cluster_state:ok" in n.client().execute_command("CLUSTER", "INFO")
                       for n in self.alive()):
                    return
            except redis.RedisError:
                pass
            time.sleep(0.1)
        raise RuntimeError("the Redis Cluster did not reach cluster_state:ok")

    def stop(self) -> None:
        for node in self.nodes:
            node.kill9()


def start_cluster(base: Path, masters: int = 3, replicas: int = 0) -> RedisCluster:
    """``masters`` masters with ``replicas`` replicas each, slots assigned, state ok."""
    cluster = RedisCluster()
    try:
        for i in range(masters * (1 + replicas)):
            port = free_port()
            node_dir = base / f"node-{port}"
            node_dir.mkdir(parents=True)
            proc = subprocess.Popen(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(node_dir),
                 # the bus port is port + 10000 by default, past 65535 for an ephemeral port
                 "--cluster-port", str(free_port()),
                 "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                 "--cluster-node-timeout", str(NODE_TIMEOUT_MS), "--appendonly", "no", "--save", "",
                 "--logfile", str(node_dir / "redis.log"), "--daemonize", "no"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _NODES.append(proc)
            cluster.nodes.append(RedisNode(port, proc))
        for node in cluster.nodes:
            _wait_ping(node)
        subprocess.run(["redis-cli", "--cluster", "create",
                        *(f"127.0.0.1:{n.port}" for n in cluster.nodes),
                        "--cluster-replicas", str(replicas), "--cluster-yes"],
                       check=True, capture_output=True, timeout=60)
        cluster.wait_ok()
        if replicas:
            _wait_replicas_linked(cluster, masters * replicas)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _wait_ping(node: RedisNode, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if node.client().ping():
                return
        except redis.RedisError:
            time.sleep(0.05)
    raise RuntimeError(f"redis-server on {node.port} did not answer PING")


def _wait_replicas_linked(cluster: RedisCluster, expected: int, timeout_s: float = 30.0) -> None:
    """Replicas finished their first sync (a failover before that would lose the data)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        linked = 0
        for node in cluster.alive():
            info = node.client().info("replication")
            if info.get("role") == "slave" and info.get("master_link_status") == "up":
                linked += 1
        if linked == expected:
            return
        time.sleep(0.1)
    raise RuntimeError(f"only some of {expected} replicas linked to their masters")
