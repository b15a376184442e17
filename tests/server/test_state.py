"""The worker's typed state: built once in a fixed order, and a damaged data directory is a
clean exit code rather than a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pion.server.config import load_config
from pion.server.state import build_state
from support.procs import free_port


def test_build_state_builds_every_part_from_the_config(tmp_path: Path) -> None:
    config = load_config(["--dir", str(tmp_path), "--max-sessions", "7", "--maxmemory", "1mb",
                          "--prefill-us-per-token", "10"], env={})
    state = build_state(config)
    assert (state.stores.vstore.max_sessions, state.stores.vstore.max_bytes) == (7, 1024**2)
    state.stores.keyspace.set(b"k", b"v")
    assert state.stores.vstore.external_bytes() == state.stores.keyspace.used_bytes
    assert state.receipt.prefill_us_per_token == 10.0
    assert state.persist.options.data_dir == tmp_path
    assert state.network.state is state
    assert state.network.dispatcher is state.dispatcher
    assert state.dispatcher.specs is state.table.specs
    assert state.persist.wal is None  # nothing touches the data files before open_state


def test_a_damaged_wal_makes_pion_server_exit_with_code_1_naming_the_file(tmp_path: Path) -> None:
    wal = tmp_path / "pion.vstore.0.wal"
    good = bytes(24) + b"garbage"  # not a record, and more data follows: damage, not a torn tail
    wal.write_bytes(b"PREC" + good + b"x" * 200)
    proc = subprocess.run([sys.executable, "-m", "pion.server", "--port", str(free_port()), "--dir",
                           str(tmp_path)], capture_output=True, timeout=60)
    log = proc.stdout.decode() + proc.stderr.decode()
    assert proc.returncode == 1
    assert "pion.vstore.0.wal is damaged at offset 0" in log
    assert "Traceback" not in log


def test_every_handler_is_named_after_its_family_as_cmd_family_verb() -> None:
    from pion.server.commands.table import build_table

    table = build_table()
    misnamed = [(module.__name__, spec.handler.__name__) for module in table.families for spec in module.COMMANDS
                if not spec.handler.__name__.startswith(f"cmd_{module.__name__.rsplit('.', 1)[1]}_")]
    assert misnamed == []


def test_build_state_hands_the_slowlog_settings_to_the_dispatcher(tmp_path: Path) -> None:
    config = load_config(["--dir", str(tmp_path), "--slowlog-max-len", "5",
                          "--slowlog-log-slower-than", "250"], env={})
    state = build_state(config)
    assert (state.dispatcher.slow_s, state.dispatcher.slowlog.max_len) == (250e-6, 5)
