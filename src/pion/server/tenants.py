"""Tenants: named users confined to a namespace prefix (``--tenant``, ``--ns-prefix``).

The model (docs/security.md) follows Redis ACL's vocabulary where it fits:

  admin     the ``default`` user: ``--requirepass``'s password (or no password at all), with no
            prefix — every command, every key.
  tenant    ``--tenant <name>:<password>:<ns-prefix>``: ``AUTH <name> <password>`` (or
            ``HELLO 3 AUTH <name> <password>``, what redis-py sends for ``username=``); may only
            name keys, sessions and namespaces that start with its prefix; listings show only
            its own; PION.STATS is its own receipt.
  confined  ``--ns-prefix <p>`` confines the ``default`` user itself to ``p`` (one process per
            tenant, or a guard against a mistyped namespace); there is then no admin login.

A namespace is not a credential: the prefix is only enforced for a connection that
authenticated as a tenant. Which arguments of a command are keys is declared once per command
(``commands/access.py``); the dispatcher checks them before the handler runs, so a refusal
(``-NOPERM``) has touched nothing.

Spec grammar: ``name:password:prefix`` — the name and the password cannot hold ``:``, the
prefix may (``acme:``); several specs are separated by spaces (``PION_TENANTS``), or given as
repeated ``--tenant`` flags.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pion.common.errors import ConfigError
from pion.server.receipt import Receipt

if TYPE_CHECKING:
    from pion.server.context import CommandContext

DEFAULT_USER = "default"


@dataclass(frozen=True, slots=True)
class TenantSpec:
    """One ``--tenant`` value, validated."""

    name: str
    password: str
    prefix: str


def parse_tenants(key: str, text: str) -> tuple[TenantSpec, ...]:
    """``name:password:prefix`` specs separated by whitespace; ConfigError names the bad one."""
    specs: list[TenantSpec] = []
    for item in text.split():
        name, sep1, rest = item.partition(":")
        password, sep2, prefix = rest.partition(":")
        if not (sep1 and sep2) or not name or not password or not prefix:
            raise ConfigError(f"{key}: expected <name>:<password>:<ns-prefix> with all three "
                              f"non-empty, got {item.split(':')[0]!r}:...")
        if name == DEFAULT_USER:
            raise ConfigError(f"{key}: 'default' is the admin user (--requirepass), not a tenant")
        specs.append(TenantSpec(name, password, prefix))
    _check_distinct(key, specs)
    return tuple(specs)


def _check_distinct(key: str, specs: list[TenantSpec]) -> None:
    """Refuse duplicate names and nested prefixes (tenant 'a' would read all of 'ab')."""
    for i, a in enumerate(specs):
        for b in specs[i + 1:]:
            if a.name == b.name:
                raise ConfigError(f"{key}: tenant {a.name!r} is declared twice")
            if a.prefix.startswith(b.prefix) or b.prefix.startswith(a.prefix):
                raise ConfigError(f"{key}: the prefixes of tenants {a.name!r} ({a.prefix!r}) and "
                                  f"{b.name!r} ({b.prefix!r}) overlap: one could read the other's data")


class TenantReceipt(Receipt):
    """A tenant's own PION.STATS counters; every count also reaches the worker's receipt."""

    def __init__(self, server: Receipt) -> None:
        super().__init__(server.prefill_us_per_token)
        self.server = server

    def record_prefix_lookup(self, hit: bool, tokens: int = 0, measured_ms: float | None = None) -> None:
        super().record_prefix_lookup(hit, tokens, measured_ms)
        self.server.record_prefix_lookup(hit, tokens, measured_ms)

    def record_bytes_served(self, n_bytes: int) -> None:
        super().record_bytes_served(n_bytes)
        self.server.record_bytes_served(n_bytes)

    def record_semantic(self, hit: bool) -> None:
        super().record_semantic(hit)
        self.server.record_semantic(hit)

    def record_admission(self, deferred: bool) -> None:
        super().record_admission(deferred)
        self.server.record_admission(deferred)

    def record_vector_query(self) -> None:
        super().record_vector_query()
        self.server.record_vector_query()


@dataclass(eq=False)
class Tenant:
    """An authenticated principal confined to ``prefix`` (bytes, as keys arrive)."""

    name: str
    prefix: bytes
    receipt: Receipt
    password: bytes = field(default=b"", repr=False)

    def owns(self, key: bytes) -> bool:
        return key.startswith(self.prefix)


class TenantRegistry:
    """The worker's users: the admin (``default``) and the tenants, built once from the config."""

    def __init__(self, specs: tuple[TenantSpec, ...], requirepass: str | None, ns_prefix: str | None,
                 server_receipt: Receipt) -> None:
        self.requirepass = requirepass
        self.by_name = {s.name: Tenant(s.name, s.prefix.encode(), TenantReceipt(server_receipt),
                                       s.password.encode()) for s in specs}
        # --ns-prefix: the default user is itself a confined principal, sharing the server receipt.
        self.default_tenant = (None if ns_prefix is None else
                               Tenant(DEFAULT_USER, ns_prefix.encode(), server_receipt))

    @property
    def enabled(self) -> bool:
        """Whether any connection can be confined (the dispatcher then checks key access)."""
        return bool(self.by_name) or self.default_tenant is not None

    @property
    def auth_required(self) -> bool:
        """Tenants imply AUTH: an unauthenticated connection must not act as the admin."""
        return self.requirepass is not None or bool(self.by_name)

    def authenticate(self, user: bytes, password: bytes) -> Tenant | None:
        """The principal for ``user``/``password`` (None = the admin); raises ``LookupError``
        on an unknown user or a wrong password (compared in constant time)."""
        name = user.decode("utf-8", "replace")
        if name.lower() == DEFAULT_USER:
            if self.requirepass is None and self.by_name:
                raise LookupError("the default user has no password while tenants are configured")
            expected = self.requirepass
            if expected is not None and not hmac.compare_digest(password, expected.encode()):
                raise LookupError("wrong password")
            return self.default_tenant
        tenant = self.by_name.get(name)
        if tenant is None or not hmac.compare_digest(password, tenant.password):
            raise LookupError("unknown user or wrong password")
        return tenant


def receipt_for(ctx: CommandContext) -> Receipt:
    """The receipt a command counts into: the tenant's (which also counts into the worker's)."""
    tenant = ctx.client.tenant
    return ctx.server.receipt if tenant is None else tenant.receipt


def visible(ctx: CommandContext, key: bytes) -> bool:
    """Whether a listing (V.LIST, KEYS, SCAN...) may show ``key`` to this connection."""
    tenant = ctx.client.tenant
    return tenant is None or key.startswith(tenant.prefix)
