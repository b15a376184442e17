"""Process lifecycle: start-up summary, config errors, env overrides, clean SIGTERM/SIGINT shutdown."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pion.common.errors import ConfigError
from pion.server.config import OPTIONS, ServerConfig, load_config
from pion.server.tenants import TenantSpec
from support.procs import start_server


def run_server_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pion.server", *args], capture_output=True,
                          text=True, timeout=60, env=env)


# ---- config (in-process) --------------------------------------------------------------------
def test_config_defaults_match_the_documented_flags() -> None:
    cfg = load_config([], env={})
    assert cfg == ServerConfig()
    assert (cfg.port, cfg.bind, cfg.max_sessions, cfg.maxmemory) == (1974, "127.0.0.1", 256, 0)
    assert cfg.proto_max_bulk_len == 512 * 1024 * 1024
    assert cfg.prefill_us_per_token == 555.0
    assert (cfg.data_dir, cfg.requirepass, cfg.maxclients, cfg.workers) == (Path("./pion-data"), None, 10000, 1)
    assert (cfg.appendfsync, cfg.wal_max_bytes, cfg.wal_repair) == ("everysec", 1024**3, False)
    assert (cfg.loglevel, cfg.kvcache) == ("notice", True)


# A non-default value for every option, as text, and what it must become.
ENV_SAMPLES: dict[str, tuple[str, object]] = {
    "port": ("1975", 1975), "bind": ("127.0.0.2", "127.0.0.2"), "kvcache": ("no", False),
    "workers": ("1", 1), "data_dir": ("/tmp/elsewhere", Path("/tmp/elsewhere")),
    "requirepass": ("pw", "pw"), "max_sessions": ("7", 7), "maxmemory": ("8gb", 8 * 1024**3),
    "prefill_us_per_token": ("12.5", 12.5), "loglevel": ("warning", "warning"),
    "maxclients": ("9", 9), "proto_max_bulk_len": ("1mb", 1024**2),
    "client_query_buffer_limit": ("2mb", 2 * 1024**2), "client_output_buffer_limit": ("0", 0),
    "slowlog_log_slower_than_us": ("-1", -1), "slowlog_max_len": ("5", 5),
    "embed_threads": ("2", 2), "hz": ("50", 50), "appendonly": ("no", False), "appendfsync": ("always", "always"),
    "wal_max_bytes": ("300kb", 300 * 1024), "wal_repair": ("yes", True),
    "binary_port": ("0", 0), "attention_threads": ("2", 2),
    "worker_port_base": ("0", 0), "independent_workers": ("yes", True),
    "worker_placement": ("hash", "hash"), "directory_slots": ("128", 128),
    "worker_forward_batch": ("16", 16),
    "tenants": ("alice:pw:a| bob:pw2:b|", (TenantSpec("alice", "pw", "a|"), TenantSpec("bob", "pw2", "b|"))),
    "ns_prefix": ("app|", "app|"), "admission": ("2hit", "2hit"), "admission_window": ("99", 99),
    "databases": ("4", 4), "maxmemory_policy": ("volatile-ttl", "volatile-ttl"),
    "maxmemory_samples": ("10", 10),
    "cold_tier": ("redis://10.0.0.9:6380", "redis://10.0.0.9:6380"), "cold_tier_mode": ("behind", "behind"),
    "tls_port": ("6380", 6380), "tls_binary_port": ("0", 0), "tls_cert_file": ("/tmp/s.crt", Path("/tmp/s.crt")),
    "tls_key_file": ("/tmp/s.key", Path("/tmp/s.key")), "tls_ca_cert_file": ("/tmp/ca.crt", Path("/tmp/ca.crt")),
    "tls_auth_clients": ("optional", "optional"), "metrics_port": ("9121", 9121),
}


def test_every_flag_has_a_pion_env_override() -> None:
    assert sorted(ENV_SAMPLES) == sorted(opt.field for opt in OPTIONS)
    env = {opt.env_name: ENV_SAMPLES[opt.field][0] for opt in OPTIONS}
    assert env["PION_MAX_SESSIONS"] == "7"
    cfg = load_config([], env=env)
    assert {f: getattr(cfg, f) for f in ENV_SAMPLES} == {f: v for f, (_, v) in ENV_SAMPLES.items()}


def test_cli_flag_wins_over_env_which_wins_over_default() -> None:
    env = {"PION_MAXMEMORY": "8gb", "PION_MAX_SESSIONS": "9"}
    cfg = load_config(["--max-sessions", "3", "--kvcache", "-w", "1"], env=env)
    assert cfg.maxmemory == 8 * 1024**3
    assert cfg.max_sessions == 3
    assert cfg.kvcache is True


@pytest.mark.parametrize(("argv", "env", "fragment"), [
    (["--maxmemory", "lots"], {}, "--maxmemory: cannot parse size 'lots'"),
    (["--port", "70000"], {}, "--port: must be 0..65535, got 70000"),
    ([], {"PION_PORT": "x"}, "PION_PORT: expected an integer, got 'x'"),
    (["--loglevel", "loud"], {}, "--loglevel: must be one of"),
    (["-w", "0"], {}, "--workers: must be"),
    (["-w", "65"], {}, "--workers: must be"),
    (["--worker-placement", "random"], {}, "--worker-placement: must be one of"),
])
def test_bad_config_values_name_the_key_and_value(argv: list[str], env: dict[str, str],
                                                  fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(argv, env=env)
    assert fragment in str(info.value)


# ---- the process ----------------------------------------------------------------------------
def test_version_flag_prints_the_version() -> None:
    done = run_server_cli("--version")
    assert done.returncode == 0
    assert done.stdout.startswith("pion-server ")


def test_sigterm_answers_what_was_received_then_exits_zero(tmp_path: Path) -> None:
    server = start_server(tmp_path / "d", env={"PION_MAXMEMORY": "1gb"})
    try:
        assert "maxmemory=1073741824" in server.log()
        n = 5000
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(b"".join(b"SET k%d v\r\n" % i for i in range(n)))
            first = sock.recv(5)
            assert first == b"+OK\r\n"
            server.proc.send_signal(signal.SIGTERM)
            rest = b""
            while chunk := sock.recv(1 << 16):
                rest += chunk
        replies = first + rest
        assert replies == b"+OK\r\n" * (len(replies) // 5)
        assert server.proc.wait(timeout=15) == 0
        assert "pion-server stopped cleanly" in server.log()
    finally:
        server.stop(signal.SIGKILL)


def test_sigint_stops_cleanly_and_slow_commands_go_to_slowlog_not_the_log(tmp_path: Path) -> None:
    server = start_server(tmp_path / "d", "--slowlog-log-slower-than", "0")
    try:
        with server.client() as conn:
            conn.set("slow-key", "v")
            assert conn.slowlog_get(1)[0]["command"] == b"SET slow-key v"
            assert server.stop(signal.SIGINT) == 0
        log = server.log()
        assert "shutdown requested" in log
        assert "slow-key" not in log
    finally:
        server.stop(signal.SIGKILL)
