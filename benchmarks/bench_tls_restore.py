"""The restore path over TLS vs plain TCP: the same pion-server, the same prefix, both ports, one run.

Prefix of SmolLM2-135M's shape (bench_prefix_restore.py): 30 layers x K,V x N tokens x kv_dim 192
fp16 (2048 tokens = 47.2 MB). Restore = ``V.MFETCH <ns>_pk 0 30 RANGE 0 N DTYPE f16`` and the same
for ``_pv``, pipelined (one round trip), with redis-py (hiredis parser): ``ssl=True`` with a client
certificate (``--tls-auth-clients yes``) against the plain port. A small-command line (pipelined
GETs of 3-byte values) shows the per-request TLS cost apart from bulk encryption. Phases run
interleaved (plain, TLS, plain, ...): median wall time, and mean CPU of the server (/proc) and
of the client process, the figure that holds on a shared machine.

The CA and certificates are made with the openssl CLI (tests/support/tls_certs.py), EC P-256:
TLS 1.3 with AES-GCM (the cipher OpenSSL negotiates on x86 with AES-NI).

    .venv/bin/python benchmarks/bench_tls_restore.py [--repeat 7] [--tokens 2048]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from support.procs import free_port, start_server
from support.tls_certs import make_test_pki

N_LAYERS, KV_DIM = 30, 192


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def medians(fns: list[Callable[[], object]], repeat: int, server_pid: int) -> list[tuple[float, float, float]]:
    """(median wall s, mean server CPU s, mean client CPU s) of each function, run interleaved so
    both see the same machine load. CPU is the robust figure on a shared machine: wall time
    includes waiting for cores other work holds."""
    walls: list[list[float]] = [[] for _ in fns]
    server_cpu = [0.0] * len(fns)
    client_cpu = [0.0] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            s0, c0, t0 = cpu_seconds(server_pid), time.process_time(), time.perf_counter()
            fn()
            walls[i].append(time.perf_counter() - t0)
            client_cpu[i] += time.process_time() - c0
            server_cpu[i] += cpu_seconds(server_pid) - s0
    return [(statistics.median(w), s / repeat, c / repeat) for w, s, c in zip(walls, server_cpu, client_cpu)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--small-ops", type=int, default=2000, help="pipelined GETs in the small-command line")
    args = parser.parse_args()
    if shutil.which("openssl") is None:
        print("openssl not found: apt-get install -y openssl", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="bench-tls-"))
    pki = make_test_pki(tmp / "pki")
    tls_port = free_port()
    server = start_server(tmp / "pion", *pki.server_args(tls_port), "--loglevel", "warning", "--binary-port", "0")
    n = args.tokens
    rng = np.random.default_rng(0)
    blobs = {side: [rng.standard_normal((n, KV_DIM)).astype("<f2").tobytes() for _ in range(N_LAYERS)]
             for side in ("_pk", "_pv")}
    total = sum(len(b) for side in blobs.values() for b in side)
    try:
        plain = redis.Redis(port=server.port)
        secure = redis.Redis(port=tls_port, ssl=True, ssl_ca_certs=str(pki.ca_cert),
                             ssl_certfile=str(pki.client_cert), ssl_keyfile=str(pki.client_key))
        pipe = plain.pipeline(transaction=False)
        pipe.execute_command("KV.PREFIX.REGISTER", "bench", KV_DIM, "fp16", "LAYERS", N_LAYERS)
        for suffix, layers in blobs.items():
            for layer, blob in enumerate(layers):
                pipe.execute_command("V.STOREBATCH", "bench" + suffix, layer, 0, blob, "DTYPE", "f16")
        pipe.execute()
        plain.set("small", "abc")

        def restore(client: redis.Redis) -> list[list[bytes]]:
            p = client.pipeline(transaction=False)
            for suffix in blobs:
                p.execute_command("V.MFETCH", "bench" + suffix, 0, N_LAYERS, "RANGE", 0, n, "DTYPE", "f16")
            return p.execute()  # type: ignore[no-any-return]

        def small(client: redis.Redis) -> list[bytes]:
            p = client.pipeline(transaction=False)
            for _ in range(args.small_ops):
                p.get("small")
            return p.execute()  # type: ignore[no-any-return]

        expected = [blobs["_pk"], blobs["_pv"]]
        if restore(plain) != expected or restore(secure) != expected:
            raise RuntimeError("restored bytes differ from stored bytes")
        pid = server.proc.pid
        r_plain, r_tls = medians([lambda: restore(plain), lambda: restore(secure)], args.repeat, pid)
        s_plain, s_tls = medians([lambda: small(plain), lambda: small(secure)], args.repeat, pid)
        with socket.create_connection(("127.0.0.1", tls_port)) as raw, \
                pki.client_context().wrap_socket(raw, server_hostname="127.0.0.1") as probe:
            cipher = probe.cipher() or ("?", "?", 0)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    mb = total / 1e6
    print(f"prefix: {N_LAYERS} layers x K,V x {n} tokens x kv_dim {KV_DIM} fp16 = {mb:.1f} MB; "
          f"median of {args.repeat}; TLS cipher {cipher[0]} ({cipher[1]})")
    print()
    print("| phase | plain wall | TLS wall | TLS ÷ plain (wall) | server CPU plain / TLS | "
          "client CPU plain / TLS | TLS ÷ plain (server + client CPU) |")
    print("|---|---|---|---|---|---|---|")
    for label, (p_wall, p_srv, p_cli), (t_wall, t_srv, t_cli) in (
            ("restore (2 × V.MFETCH, 1 round trip)", r_plain, r_tls),
            (f"{args.small_ops} pipelined GET (3 B)", s_plain, s_tls)):
        print(f"| {label} | {p_wall * 1e3:.1f} ms | {t_wall * 1e3:.1f} ms | {t_wall / p_wall:.2f}× | "
              f"{p_srv * 1e3:.1f} / {t_srv * 1e3:.1f} ms | {p_cli * 1e3:.1f} / {t_cli * 1e3:.1f} ms | "
              f"{(t_srv + t_cli) / max(p_srv + p_cli, 1e-9):.2f}× |")
    print(f"\nrestore throughput: plain {mb / r_plain[0]:,.0f} MB/s, TLS {mb / r_tls[0]:,.0f} MB/s (wall)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
