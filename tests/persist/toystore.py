"""A small dict-backed store that logs through ``Persistence`` like the real V-store does.

Real parts for the persistence library's own tests: the WAL, snapshot and recovery
code under test is the production code; only the store is small and readable.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pion.server.persist import Persistence, RecordType


class ToyStore:
    """Sessions of byte rows per layer, and a keyspace; every mutation is logged first."""

    def __init__(self, persist: Persistence | None = None) -> None:
        self.persist = persist
        self.sessions: dict[str, dict[int, bytearray]] = {}
        self.row_bytes: dict[str, int] = {}
        self.keys: dict[bytes, bytes] = {}

    # -- mutations (log, then apply) ----------------------------------------------------------

    def _log(self, rtype: RecordType, fields: Mapping[str, Any]) -> None:
        if self.persist is not None:
            self.persist.append(rtype, fields)

    def create(self, sid: str, row_bytes: int) -> None:
        fields = {"sid": sid, "kv_dim": row_bytes, "formats": ("raw",), "uniform": True}
        self._log(RecordType.V_CREATE, fields)
        self.apply(RecordType.V_CREATE, fields)

    def store(self, sid: str, layer: int, start_id: int, rows: bytes) -> None:
        fields = {"sid": sid, "layer": layer, "start_id": start_id,
                  "n_rows": len(rows) // self.row_bytes[sid], "rows": memoryview(rows)}
        self._log(RecordType.V_STOREBATCH, fields)
        self.apply(RecordType.V_STOREBATCH, fields)

    def drop(self, sid: str) -> None:
        self._log(RecordType.V_DROP, {"sid": sid})
        self.apply(RecordType.V_DROP, {"sid": sid})

    def set(self, key: bytes, value: bytes) -> None:
        fields = {"key": key, "value": value, "expire_at_ms": None}
        self._log(RecordType.SET, fields)
        self.apply(RecordType.SET, fields)

    # -- replay -----------------------------------------------------------------------------

    def apply(self, rtype: int, fields: Mapping[str, Any]) -> None:
        """Apply one record (the recovery sink); raises on a record that does not fit."""
        if rtype == RecordType.V_CREATE:
            sid = fields["sid"]
            if sid in self.sessions and self.row_bytes[sid] != fields["kv_dim"]:
                raise ValueError(f"session {sid} exists with other params")
            self.sessions.setdefault(sid, {})
            self.row_bytes[sid] = fields["kv_dim"]
        elif rtype == RecordType.V_STOREBATCH:
            layers = self.sessions[fields["sid"]]
            buf = layers.setdefault(fields["layer"], bytearray())
            start = fields["start_id"] * self.row_bytes[fields["sid"]]
            if start > len(buf):
                raise ValueError("gap")
            rows = bytes(fields["rows"])
            buf[start:start + len(rows)] = rows
        elif rtype == RecordType.V_DROP:
            self.sessions.pop(fields["sid"], None)
            self.row_bytes.pop(fields["sid"], None)
        elif rtype == RecordType.SET:
            self.keys[bytes(fields["key"])] = bytes(fields["value"])
        else:
            raise ValueError(f"unexpected record type {rtype}")

    def snapshot_records(self) -> Iterator[tuple[RecordType, dict[str, Any]]]:
        """Walk the live state lazily (so a background snapshot sees concurrent changes)."""
        for sid in list(self.sessions):
            layers = self.sessions.get(sid)
            if layers is None:
                continue
            yield RecordType.V_CREATE, {"sid": sid, "kv_dim": self.row_bytes[sid], "formats": ("raw",),
                                        "uniform": True}
            for layer in list(layers):
                buf = layers.get(layer)
                if buf is not None:
                    yield RecordType.V_STOREBATCH, {"sid": sid, "layer": layer, "start_id": 0,
                                                    "n_rows": len(buf) // self.row_bytes[sid],
                                                    "rows": memoryview(bytes(buf))}
        for key in list(self.keys):
            if key in self.keys:
                yield RecordType.SET, {"key": key, "value": self.keys[key], "expire_at_ms": None}

    def state(self) -> tuple[dict[str, dict[int, bytes]], dict[bytes, bytes]]:
        return ({sid: {layer: bytes(buf) for layer, buf in layers.items()}
                 for sid, layers in self.sessions.items()}, dict(self.keys))
