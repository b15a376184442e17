"""``--cold-tier`` URLs: ``redis-cluster://host:port[,host:port...]`` or ``redis://host:port``.

Parsed once at start-up so a typo is refused with exit 2 and a message naming what is wrong,
instead of surfacing as connection errors on the first LOOKUP.
"""

from __future__ import annotations

from dataclasses import dataclass

from pion.common.errors import ConfigError

SCHEMES = ("redis-cluster", "redis")


@dataclass(frozen=True, slots=True)
class ColdTierUrl:
    """Where the cold tier lives: cluster seed nodes, or the one Redis."""

    cluster: bool
    nodes: tuple[tuple[str, int], ...]

    def text(self) -> str:
        scheme = "redis-cluster" if self.cluster else "redis"
        return f"{scheme}://" + ",".join(f"{host}:{port}" for host, port in self.nodes)


def _node(key: str, text: str, part: str) -> tuple[str, int]:
    host, sep, port_text = part.rpartition(":")
    if not sep or not host:
        raise ConfigError(f"{key}: '{part}' in {text!r} is not host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]  # [::1]:7000
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ConfigError(f"{key}: port '{port_text}' in {text!r} is not a port number (1..65535)")
    return host, int(port_text)


def parse_cold_tier_url(key: str, text: str) -> ColdTierUrl:
    """A validated URL; ConfigError (exit 2 at start-up) on anything else."""
    scheme, sep, rest = text.partition("://")
    if not sep or scheme.lower() not in SCHEMES:
        raise ConfigError(f"{key}: {text!r} must start with redis-cluster:// or redis://")
    cluster = scheme.lower() == "redis-cluster"
    if not rest or "/" in rest or "@" in rest or "?" in rest:
        raise ConfigError(f"{key}: {text!r} must be {scheme}://host:port"
                          + ("[,host:port...]" if cluster else "")
                          + " (no path, credentials or query)")
    parts = rest.split(",")
    if not cluster and len(parts) != 1:
        raise ConfigError(f"{key}: redis:// takes one host:port; use redis-cluster:// for several")
    return ColdTierUrl(cluster, tuple(_node(key, text, p) for p in parts))


def parse_cold_tier_option(key: str, text: str) -> str | None:
    """The config value: the URL text, validated (empty = no cold tier)."""
    if not text:
        return None
    return parse_cold_tier_url(key, text).text()
