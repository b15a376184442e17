"""CONFIG SET: the settings that may change while the server runs — ``maxmemory``,
``maxmemory-policy`` and ``maxmemory-samples`` (the eviction budget, ``store/eviction.py``).

Everything else is fixed at start-up (flags, ``PION_*`` env). A change replaces
``state.config`` (a frozen dataclass: readers always see one consistent config) and applies
the budget to the stores at once, so lowering ``maxmemory`` evicts now. Errors use Redis 7's
texts (``maxmemory-samples`` stops at 64 here); a CONFIG SET with several pairs changes nothing
unless every pair is valid.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

from pion.common.errors import CommandError, ConfigError, clip_for_echo
from pion.common.sizes import parse_size
from pion.server.context import ServerState
from pion.server.store.eviction import POLICIES

SETTABLE = ("maxmemory", "maxmemory-policy", "maxmemory-samples")
# The order Redis 7 lists them in its error text.
REDIS_POLICY_ORDER = ("volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl", "allkeys-lru",
                      "allkeys-lfu", "allkeys-random", "noeviction")


def _failed(name: str, why: str) -> CommandError:
    return CommandError(f"CONFIG SET failed (possibly related to argument '{name}') - {why}")


def _parse(name: str, raw: bytes) -> tuple[str, object]:
    text = raw.decode("utf-8", "replace")
    if name == "maxmemory":
        try:
            value = parse_size(text, name)
        except (ConfigError, ValueError):
            raise _failed(name, "argument must be a memory value") from None
        if value < 0:
            raise _failed(name, "argument must be a memory value")
        return "maxmemory", value
    if name == "maxmemory-policy":
        policy = text.lower()
        if policy not in POLICIES:
            raise _failed(name, "argument(s) must be one of the following: " + ", ".join(REDIS_POLICY_ORDER))
        return "maxmemory_policy", policy
    try:
        samples = int(text)
    except ValueError:
        raise _failed(name, "argument couldn't be parsed into an integer") from None
    if not 1 <= samples <= 64:  # Redis allows up to INT_MAX; more than 64 per database buys nothing
        raise _failed(name, "argument must be between 1 and 64 inclusive")
    return "maxmemory_samples", samples


def config_set(state: ServerState, args: list[bytes], known: Collection[str] = ()) -> None:
    """Apply ``name value [name value ...]`` or raise CommandError (nothing changed).

    ``known``: the names CONFIG GET shows; setting one of those that is fixed at start-up is
    refused with Redis's text for an immutable config, any other name with its unknown-option text.
    """
    if not args or len(args) % 2:
        raise CommandError("wrong number of arguments for 'config|set' command")
    changes: dict[str, object] = {}
    for i in range(0, len(args), 2):
        name = args[i].decode("utf-8", "replace").lower()
        if name not in SETTABLE:
            if name in known:
                raise _failed(name, "can't set immutable config")
            raise CommandError(f"Unknown option or number of arguments for CONFIG SET - "
                               f"'{clip_for_echo(args[i])}'")
        field, value = _parse(name, args[i + 1])
        changes[field] = value
    config = dataclasses.replace(state.config, **changes)  # type: ignore[arg-type]
    state.config = config
    state.stores.set_budget(config.maxmemory, config.maxmemory_policy, config.maxmemory_samples)
