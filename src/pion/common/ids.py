"""Typed identifiers: namespaces, session ids and block hashes are not bare str/bytes."""

from __future__ import annotations

from typing import NewType

Namespace = NewType("Namespace", str)
SessionId = NewType("SessionId", str)
BlockHash = NewType("BlockHash", int)

K_SUFFIX = "_pk"
V_SUFFIX = "_pv"


def k_session(ns: Namespace | str) -> SessionId:
    """The V-store session holding a prefix's keys."""
    return SessionId(f"{ns}{K_SUFFIX}")


def v_session(ns: Namespace | str) -> SessionId:
    """The V-store session holding a prefix's values."""
    return SessionId(f"{ns}{V_SUFFIX}")
