"""The cold tier's pure parts: the --cold-tier URL, the index layout and its hit rule, the
invalidation message, which warm copies are trusted, and pending dirty rows."""

from __future__ import annotations

import pytest

from pion.common.errors import ConfigError
from pion.server.coldtier.bridge import merge_parts, whole
from pion.server.coldtier.freshness import Freshness
from pion.server.coldtier.layout import ColdIndex, PrefixMeta, index_key, invalidation, parse_invalidation, rows_key
from pion.server.coldtier.url import ColdTierUrl, parse_cold_tier_option, parse_cold_tier_url
from pion.server.config import load_config


def test_a_cluster_url_lists_every_seed_node() -> None:
    url = parse_cold_tier_url("--cold-tier", "redis-cluster://127.0.0.1:7000,10.0.0.2:7001,[::1]:7002")
    assert url == ColdTierUrl(True, (("127.0.0.1", 7000), ("10.0.0.2", 7001), ("::1", 7002)))


def test_a_single_redis_url_is_not_a_cluster() -> None:
    assert parse_cold_tier_url("--cold-tier", "redis://cache:6379") == ColdTierUrl(False, (("cache", 6379),))


def test_the_config_keeps_the_normalised_url_and_an_empty_value_means_none() -> None:
    assert parse_cold_tier_option("--cold-tier", "REDIS-CLUSTER://h:1,h:2") == "redis-cluster://h:1,h:2"
    assert parse_cold_tier_option("--cold-tier", "") is None


def test_the_cold_tier_options_come_from_flags_or_the_environment() -> None:
    config = load_config([], {"PION_COLD_TIER": "redis://h:1", "PION_COLD_TIER_MODE": "behind"})
    assert (config.cold_tier, config.cold_tier_mode) == ("redis://h:1", "behind")
    assert (load_config([]).cold_tier, load_config([]).cold_tier_mode) == (None, "through")


@pytest.mark.parametrize("text, message", [
    ("rediss://h:1", "must start with redis-cluster:// or redis://"),
    ("redis-cluster://", "must be redis-cluster://host:port[,host:port...]"),
    ("redis-cluster://h:1,h", "'h' in 'redis-cluster://h:1,h' is not host:port"),
    ("redis://h:99999", "port '99999'"),
    ("redis://user:pw@h:1", "no path, credentials or query"),
])
def test_a_bad_url_is_a_config_error_naming_the_problem(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_cold_tier_url("--cold-tier", text)
    assert message in str(info.value)


def test_a_cold_tier_is_accepted_with_shared_and_with_independent_workers() -> None:
    config = load_config(["--cold-tier", "redis://h:1", "-w", "2"], {})
    assert (config.cold_tier, config.workers, config.independent_workers) == ("redis://h:1", 2, False)
    config = load_config(["--cold-tier", "redis://h:1", "-w", "2", "--independent-workers"], {})
    assert (config.cold_tier, config.workers, config.independent_workers) == ("redis://h:1", 2, True)


def test_a_bad_cold_tier_mode_is_refused() -> None:
    with pytest.raises(ConfigError, match="must be one of through, behind"):
        load_config(["--cold-tier-mode", "sometimes"], {})


def test_every_key_of_a_prefix_shares_its_hash_tag() -> None:
    assert index_key("sys-prompt") == "pion:{sys-prompt}:idx"
    assert rows_key("sys-prompt", "v", 29) == "pion:{sys-prompt}:v:29"


def test_prefix_meta_survives_its_json_round_trip() -> None:
    meta = PrefixMeta(192, ("fp16", "int8"), ("fp16", "fp8"), False, 2, 16, b"\x01" * 16, 12.5)
    assert PrefixMeta.from_json(meta.to_json()) == meta


def _index(layers: int | None, rows: dict[bytes, bytes]) -> ColdIndex:
    meta = PrefixMeta(192, ("fp16",), ("fp16",), True, layers)
    decoded = ColdIndex.decode({b"meta": meta.to_json().encode(), **rows})
    assert decoded is not None
    return decoded


def test_with_layers_the_index_is_a_hit_only_when_every_layer_holds_the_same_rows() -> None:
    full = _index(2, {b"k:0": b"8", b"k:1": b"8", b"v:0": b"8", b"v:1": b"8"})
    assert (full.hit(), full.tokens()) == (True, 8)
    assert _index(2, {b"k:0": b"8", b"k:1": b"8", b"v:0": b"8"}).hit() is False
    assert _index(2, {b"k:0": b"8", b"k:1": b"8", b"v:0": b"8", b"v:1": b"7"}).hit() is False


def test_without_layers_the_registration_alone_is_a_hit_as_in_the_warm_tier() -> None:
    assert _index(None, {}).hit() is True


def test_an_index_without_meta_is_no_prefix() -> None:
    assert ColdIndex.decode({b"k:0": b"8"}) is None


def test_the_index_carries_its_generation_and_ignores_it_as_a_layer() -> None:
    decoded = _index(1, {b"gen": b"00ff00ff00ff00ff", b"k:0": b"4", b"v:0": b"4"})
    assert (decoded.gen, decoded.rows, decoded.hit()) == ("00ff00ff00ff00ff", {("k", 0): 4, ("v", 0): 4}, True)
    assert _index(1, {}).gen is None


def test_an_invalidation_message_round_trips_a_namespace_with_spaces() -> None:
    assert parse_invalidation(invalidation("f1", "abc", "my ns|v1")) == ("f1", "abc", "my ns|v1")
    assert parse_invalidation(invalidation("f1", None, "gone").encode()) == ("f1", None, "gone")
    assert parse_invalidation(b"not-ours") is None


def test_a_copy_is_trusted_only_while_subscribed_and_rechecked_after_a_resubscription() -> None:
    fresh = Freshness()
    fresh.held("ns", "g1")
    assert fresh.trusted("ns") is False  # not subscribed yet
    fresh.subscription(True)
    assert (fresh.trusted("ns"), fresh.unverified) == (False, {"ns"})  # held before it
    fresh.held("ns", "g1")  # re-checked
    assert fresh.trusted("ns") is True
    fresh.subscription(False)
    assert fresh.trusted("ns") is False
    fresh.subscription(True)
    fresh.forget("ns")
    assert (fresh.trusted("ns"), fresh.gens, fresh.unverified) == (False, {}, set())


def test_pending_parts_keep_each_layers_lowest_dirty_row() -> None:
    pending = {("k", 0): 24}
    merge_parts(pending, {("k", 0): 12, ("v", 0): 36})
    merge_parts(pending, {("k", 0): 30})
    assert pending == {("k", 0): 12, ("v", 0): 36}
    assert whole({("k", 0), ("v", 1)}) == {("k", 0): 0, ("v", 1): 0}


def test_a_drop_always_stales_a_copy_and_a_registration_elsewhere_only_a_promoted_one() -> None:
    fresh = Freshness()
    fresh.held("promoted", "g1", own=False)
    fresh.held("mine", "g1", own=True)
    assert [fresh.stale("promoted", g) for g in (None, "g1", "g2")] == [True, False, True]
    assert [fresh.stale("mine", g) for g in (None, "g1", "g2")] == [True, False, False]
    fresh.held("mine", "g3", own=False)  # promoted over it later: no longer ours
    assert fresh.stale("mine", "g2") is True
