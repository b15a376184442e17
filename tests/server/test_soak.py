"""The soak's CI variant: benchmarks/soak.py for 60 s (64 clients, one kill -9 + restart at 30 s,
maxmemory at half a 64 MB working set) with every check of the full run. About 70 s; slow."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from soak import Soak, SoakConfig

pytestmark = pytest.mark.slow


def test_sixty_seconds_of_mixed_load_with_a_kill_9_loses_no_acknowledged_write(tmp_path: Path) -> None:
    report = Soak(SoakConfig(clients=64, duration_s=60.0, kill_every_s=30.0, working_set_mb=64.0), tmp_path / "d").run()
    assert report["checks"] == {"no_disallowed_errors": True, "no_corrupt_reads": True,
                                "no_lost_acknowledged_writes": True, "rss_within_limit": True, "restarted": True}, (
        report["disallowed_errors"], report["corrupt"], report["kills"], report["peak_rss"], report["rss_limit"])
    assert [k["missing_any_acked"] for k in report["kills"]] == [0]
    assert report["kills"][0]["checked"] > 0
    assert sorted(report["latency_ms"]) == ["kv_lookup", "lmc_exists", "lmc_get", "lmc_set", "small_get", "small_set",
                                            "v_fetch", "v_store"]
