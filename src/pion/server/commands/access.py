"""Which arguments of each command name tenant data: the key specs (Redis's ``key_specs``, as code).

Every command in the table has exactly one ``Access``: its ``CommandSpec.access`` or, for the
families that predate tenants, a row in ``ACCESS`` below. ``CommandTable`` refuses to build
when a command has neither, so a new command cannot skip the tenant check (and
``tests/server/test_tenant_matrix.py`` runs every command against every kind of caller).

Kinds:
  ``keys``     the arguments at ``positions`` (and ``first..``, every ``step``-th, to the end
               when ``rest`` is set) are keys, sessions or namespaces: a tenant may only name
               ones that start with its prefix, else ``-NOPERM No permissions to access a key``.
  ``listing``  the command lists or counts data (KEYS, SCAN, V.LIST, DBSIZE, KV.PREFIX.INFO,
               PION.STATS): a tenant may run it and the handler shows only the tenant's own.
  ``none``     touches no stored data (PING, HELLO, COMMAND, AI.EMBED): open to tenants.
  ``admin``    server-wide (FLUSHALL, SAVE, CONFIG, FT.*): tenants get ``-NOPERM``.
A ``none`` container command may list ``tenant_verbs``: the only subcommands a tenant may use
(CLIENT ID is the caller's own; CLIENT LIST shows everyone's).

Example: ``MSET k1 v1 k2 v2`` is ``Access.keys(0, rest=True, step=2)``: args 0 and 2 are keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from pion.server.tenants import Tenant

AccessKind = Literal["keys", "listing", "none", "admin"]
NOPERM_KEY = "No permissions to access a key"


@dataclass(frozen=True, slots=True)
class Access:
    """What a command may touch, for the tenant check (see the module docstring)."""

    kind: AccessKind
    positions: tuple[int, ...] = ()  # argument indexes after the command name
    rest_from: int = -1  # with ``rest``: every ``step``-th argument from here to the end
    step: int = 1
    tenant_verbs: frozenset[bytes] = frozenset()

    @staticmethod
    def keys(*positions: int, rest: bool = False, step: int = 1) -> Access:
        """Keys at ``positions``; with ``rest``, also every ``step``-th argument after the last."""
        if rest:
            return Access("keys", positions[:-1], positions[-1], step)
        return Access("keys", positions)

    def key_args(self, args: list[bytes]) -> list[bytes]:
        """The arguments (after the command name) that are keys; missing optional ones are skipped."""
        found = [args[i] for i in self.positions if i < len(args)]
        if self.rest_from >= 0:
            found.extend(args[self.rest_from::self.step])
        return found

    def legacy_key_range(self) -> tuple[int, int, int]:
        """COMMAND INFO's (first key, last key, step), counting the command name as 0 like Redis:
        ``MSET`` is (1, -1, 2), ``GET`` (1, 1, 1), a command without keys (0, 0, 0). Keys that the
        triple cannot express (KV.PREFIX.WARM's optional 4th argument) are left to the first."""
        if self.kind != "keys":
            return 0, 0, 0
        if self.rest_from >= 0:
            return (self.positions[0] if self.positions else self.rest_from) + 1, -1, self.step
        first = self.positions[0] + 1
        return first, first, 1

    def refusal(self, tenant: Tenant, name: str, args: list[bytes]) -> str | None:
        """None when ``tenant`` may run this call; else the -NOPERM message."""
        kind = self.kind
        if kind == "keys":
            prefix = tenant.prefix
            for key in self.key_args(args):
                if not key.startswith(prefix):
                    return NOPERM_KEY
            return None
        if kind == "admin" or (self.tenant_verbs and args and args[0].upper() not in self.tenant_verbs):
            verb = f"{name}|{args[0].decode('utf-8', 'replace').lower()}" if self.tenant_verbs and args else name
            return f"User {tenant.name} has no permissions to run the '{verb.lower()[:128]}' command"
        return None


NONE = Access("none")
LISTING = Access("listing")
ADMIN = Access("admin")
KEY0 = Access.keys(0)
ALL_KEYS = Access.keys(0, rest=True)

# The families written before tenants; a new family declares ``access=`` in its CommandSpec.
ACCESS: dict[str, Access] = {
    # admin.py
    "PING": NONE, "ECHO": NONE, "HELLO": NONE, "AUTH": NONE, "SELECT": NONE, "QUIT": NONE,
    "COMMAND": NONE, "INFO": ADMIN, "CONFIG": ADMIN, "FLUSHALL": ADMIN,
    "CLIENT": Access("none", tenant_verbs=frozenset({b"ID", b"SETNAME", b"GETNAME", b"SETINFO",
                                                     b"INFO", b"HELP"})),
    # keyspace.py
    "GET": KEY0, "SET": KEY0, "MGET": ALL_KEYS, "MSET": Access.keys(0, rest=True, step=2),
    "EXISTS": ALL_KEYS, "DEL": ALL_KEYS, "UNLINK": ALL_KEYS, "EXPIRE": KEY0, "PEXPIRE": KEY0,
    "TTL": KEY0, "PTTL": KEY0, "KEYS": LISTING, "SCAN": LISTING, "DBSIZE": LISTING,
    # hashes.py
    "HSET": KEY0, "HMSET": KEY0, "HSETNX": KEY0, "HGET": KEY0, "HMGET": KEY0, "HGETALL": KEY0,
    "HDEL": KEY0, "HLEN": KEY0, "HEXISTS": KEY0, "HKEYS": KEY0, "HVALS": KEY0, "HSTRLEN": KEY0,
    "HINCRBY": KEY0, "TYPE": KEY0,
    # stats.py: a tenant reads (and RESETs) its own receipt
    "PION.STATS": LISTING,
    # vstore.py
    "V.CREATE": KEY0, "V.STOREBATCH": KEY0, "V.FETCH": KEY0, "V.MFETCH": KEY0, "V.INFO": KEY0,
    "V.DROP": ALL_KEYS, "V.LIST": LISTING,
    # kvprefix.py (a namespace's sessions <ns>_pk/_pv share its prefix)
    "KV.PREFIX.REGISTER": KEY0, "KV.PREFIX.REGISTER.SCHEMA": KEY0, "KV.PREFIX.LOOKUP": KEY0,
    "KV.PREFIX.DROP": ALL_KEYS, "KV.PREFIX.BLOCKS": KEY0, "KV.PREFIX.MEMBERSHIP": KEY0,
    "KV.PREFIX.INFO": LISTING,
    # semantic.py: AI.SEMANTIC_CACHE <verb> <cache> ...: the cache name is the key
    "AI.EMBED": NONE, "AI.SEMANTIC_CACHE": Access.keys(1),
    # slowlog.py, persist.py: server-wide
    "SLOWLOG": ADMIN, "KV.PREFIX.SAVE": ADMIN, "SAVE": ADMIN, "BGSAVE": ADMIN, "LASTSAVE": NONE,
    # search.py: an index spans hashes by prefix, so FT.* stays the admin's (docs/security.md)
    "FT.CREATE": ADMIN, "FT.DROPINDEX": ADMIN, "FT.INFO": ADMIN, "FT._LIST": ADMIN,
    "FT.SEARCH": ADMIN, "FT.HYBRID": ADMIN, "MODULE": NONE,
    # ssm.py
    "SSM.PREFIX.STORE": KEY0, "SSM.PREFIX.FETCH": KEY0, "SSM.PREFIX.MFETCH": KEY0, "SSM.PREFIX.DROP": KEY0,
    # attend.py: <sid> first; KV.PREFIX.WARM <ns> <H> <D> [<attend_sid>]
    "ATTEND.PREFIX.STORE": KEY0, "ATTEND.PREFIX.LOOKUP": KEY0, "ATTEND.PREFIX.QUERY": KEY0,
    "ATTEND.PREFIX.QUERY_FUSED": KEY0, "ATTEND.PREFIX.QUERY_SPARSE": KEY0,
    "ATTEND.PREFIX.QUERY_SPARSE_AUTO": KEY0, "ATTEND.PREFIX.QUERY_SPARSE_AUTO_FUSED": KEY0,
    "KV.PREFIX.WARM": Access.keys(0, 3),
    # workers.py: which worker this connection is on (addresses only, no data)
    "PION.WORKER": NONE,
}
