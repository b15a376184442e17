"""The V-store: sessions of per-layer K/V rows, LRU eviction, byte accounting, prefix registry.

Narrow interface, no globals: one ``VStore`` per worker, in ``ServerState.stores``.
Commands (V.*, KV.PREFIX.*) call it; every mutation is handed to the ``journal``
(``store/journal.py``) as a record of ``store/records.py``, and recovery replays those
records into it through the same methods.

Mutations, each validated first, then journaled, then applied:
  create_session, store_rows, drop, register_prefix, drop_prefixes, evict_sessions, flush
Reads (touch LRU, count fetches): fetch, fetch_ids, mfetch, lookup_prefix
Iteration (no side effects): iter_sessions, iter_prefixes, get, prefix, sids

Eviction: sessions are kept in last-access order. When a new session would
exceed ``max_sessions`` or new rows would push V-store bytes plus
``external_bytes()`` (the keyspace) over ``max_bytes``, the least recently
accessed sessions are evicted — ``<ns>_pk`` and ``<ns>_pv`` always together,
never the pair being written. Victims are chosen before anything is evicted, so
a request that cannot fit is refused with nothing evicted.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator

import numpy as np

from pion.codecs import Codec, get_codec
from pion.codecs.base import token_group
from pion.common.errors import CodecError, CommandError
from pion.common.ids import K_SUFFIX, V_SUFFIX, Namespace, SessionId, k_session, v_session
from pion.server.errors import codec_error, oom_error
from pion.server.store.glob import compile_glob
from pion.server.store.journal import Journal, NullJournal
from pion.server.store.prefixes import BlockTable, PrefixEntry
from pion.server.store.records import Evict, PrefixDrop, PrefixRegister, VCreate, VDrop, VFlush, VStoreBatch
from pion.server.store.session import INPUT_DTYPES, SAME_ENCODING, Session, check_formats
from pion.server.store.token_groups import check_store_range, enclosing_groups, gather_ids

OUTPUT_DTYPES = {"f32": "<f4", "f16": "<f2", "raw": None}
log = logging.getLogger("pion.server.vstore")


def pair_of(sid: str) -> tuple[SessionId, ...]:
    """The eviction group of a session: both sides of a KV prefix, or the session alone."""
    if sid.endswith(K_SUFFIX):
        return SessionId(sid), SessionId(sid[: -len(K_SUFFIX)] + V_SUFFIX)
    if sid.endswith(V_SUFFIX):
        return SessionId(sid[: -len(V_SUFFIX)] + K_SUFFIX), SessionId(sid)
    return (SessionId(sid),)


def _namespace_of(sid: str) -> Namespace | None:
    for suffix in (K_SUFFIX, V_SUFFIX):
        if sid.endswith(suffix):
            return Namespace(sid[: -len(suffix)])
    return None


def encode_input(codec: Codec, fmt: str, kv_dim: int, blob: bytes | memoryview, dtype: str) -> memoryview:
    """Client rows (f32/f16 floats, or ``raw`` encoded rows) -> encoded rows of ``fmt``.

    Raises CommandError when the blob is not a whole number of rows or the codec
    refuses the values (NaN/Inf in a quantized format); nothing is stored then.
    """
    row_bytes = codec.row_bytes(kv_dim)
    in_row = row_bytes if dtype == "raw" else INPUT_DTYPES[dtype][1] * kv_dim
    if len(blob) == 0 or len(blob) % in_row:
        raise CommandError(f"blob of {len(blob)} bytes is not a whole number of {in_row}-byte rows "
                           f"(kv_dim {kv_dim}, DTYPE {dtype})")
    if dtype == "raw" or SAME_ENCODING.get(fmt) == dtype:
        return memoryview(blob)
    rows = np.frombuffer(blob, dtype=INPUT_DTYPES[dtype][0]).reshape(-1, kv_dim)
    try:
        encoded = codec.encode(rows.astype(np.float32, copy=False))
    except CodecError as e:
        raise codec_error(e) from e
    if len(encoded) != rows.shape[0] * row_bytes:
        raise CommandError(f"codec {fmt} produced {len(encoded)} bytes for {rows.shape[0]} rows")
    return memoryview(encoded)


def decode_output(codec: Codec, fmt: str, kv_dim: int, raw: memoryview, dtype: str) -> memoryview:
    """Encoded rows -> reply payload; zero-copy when the stored encoding is what was asked for."""
    if dtype == "raw" or SAME_ENCODING.get(fmt) == dtype:
        return raw
    out_dtype = np.dtype(OUTPUT_DTYPES[dtype])
    try:
        rows = codec.decode(raw, kv_dim, out_dtype)
    except CodecError as e:
        raise codec_error(e) from e
    flat = np.ascontiguousarray(rows, dtype=out_dtype).reshape(-1)
    return flat.view(np.uint8).data


class VStore:
    """Sessions by id in last-access order, plus KV prefix registrations.

    Args:
        max_sessions: session slots; 0 = unlimited.
        max_bytes: budget for stored rows plus ``external_bytes()``; 0 = unlimited.
        external_bytes: other bytes sharing the budget (the keyspace), read when needed.
        journal: receives every mutation before it is applied.
    """

    def __init__(self, *, max_sessions: int = 256, max_bytes: int = 0,
                 external_bytes: Callable[[], int] | None = None, journal: Journal | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_sessions = max_sessions
        self.max_bytes = max_bytes
        self.external_bytes = external_bytes or (lambda: 0)
        self.journal: Journal = journal or NullJournal()
        self._clock = clock
        self._sessions: OrderedDict[SessionId, Session] = OrderedDict()
        self._prefixes: dict[Namespace, PrefixEntry] = {}
        self._bytes = 0
        self.total_fetches = 0
        self.evicted_sessions = 0
        # Companion state of a prefix (SSM.PREFIX.*): told when a side of <ns> goes, and asked
        # how many bytes leave with <ns>'s group when planning an eviction.
        self.on_prefix_removed: list[Callable[[Namespace], None]] = []
        self.group_extra_bytes: Callable[[Namespace], int] = lambda ns: 0
        # Other eviction groups sharing the budget (state-only SSM namespaces): asked, when the
        # sessions do not free enough, to plan ``need`` bytes; returns (bytes, evict-them callback).
        self.plan_extra_room: Callable[[int, tuple[SessionId, ...]], tuple[int, Callable[[], None]]] | None = None
        # The cold tier (server/coldtier/): told which sessions are about to be evicted, so it
        # demotes them instead of losing them. None without --cold-tier.
        self.before_evict: Callable[[list[SessionId]], None] | None = None

    # ---- queries -------------------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        """Bytes of stored rows across every session, in their stored formats."""
        return self._bytes

    @property
    def allocated_bytes(self) -> int:
        """Bytes of buffer memory held (up to ~2x ``nbytes`` because buffers double)."""
        return sum(s.allocated_bytes for s in self._sessions.values())

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, sid: str) -> Session | None:
        """A session without touching its LRU position."""
        return self._sessions.get(SessionId(sid))

    def session(self, sid: str) -> Session:
        """A session, marked as just accessed; CommandError if absent."""
        session = self._sessions.get(SessionId(sid))
        if session is None:
            raise CommandError(f"session '{sid}' not found")
        self._touch(session)
        return session

    def iter_sessions(self) -> Iterator[Session]:
        """Sessions from least to most recently accessed (a snapshot writes them in this order)."""
        return iter(list(self._sessions.values()))

    def iter_prefixes(self) -> Iterator[PrefixEntry]:
        return iter(list(self._prefixes.values()))

    def prefix(self, ns: str) -> PrefixEntry | None:
        return self._prefixes.get(Namespace(ns))

    def sids(self, pattern: str | None = None) -> list[SessionId]:
        """Session ids, sorted, optionally filtered by a Redis-style glob."""
        names = sorted(self._sessions)
        if pattern is None:
            return names
        regex = compile_glob(pattern.encode("utf-8", "surrogateescape"))
        return [sid for sid in names if regex.match(sid.encode("utf-8", "surrogateescape"))]

    # ---- mutations -----------------------------------------------------------------------
    def create_session(self, sid: str, kv_dim: int, formats: tuple[str, ...], uniform: bool) -> bool:
        """Create a session; True if created, False if it already existed with these params."""
        _check_formats(kv_dim, formats)
        existing = self._sessions.get(SessionId(sid))
        if existing is not None:
            if not existing.same_shape(kv_dim, formats, uniform):
                raise CommandError(f"session '{sid}' exists with kv_dim {existing.kv_dim} and "
                                   f"format {_describe(existing.formats, existing.uniform)}")
            self._touch(existing)
            return False
        self._make_room(0, 1, pair_of(sid))
        self.journal.append(VCreate(sid, kv_dim, formats, uniform))
        self._insert(SessionId(sid), kv_dim, formats, uniform)
        return True

    def store_rows(self, sid: str, layer: int, start_id: int, blob: bytes | memoryview, dtype: str = "f32") -> int:
        """Write rows at ``start_id`` (overwrite allowed, no gaps); returns rows now in the layer."""
        session = self._sessions.get(SessionId(sid))
        if session is None:
            raise CommandError(f"session '{sid}' not found")
        session.check_layer(layer)
        n_rows = session.rows_in(layer)
        if not 0 <= start_id <= n_rows:
            raise CommandError(f"start_id {start_id} would leave a gap: layer {layer} of '{sid}' holds {n_rows} rows")
        fmt = session.format_of(layer)
        codec = get_codec(fmt)
        encoded = encode_input(codec, fmt, session.kv_dim, blob, dtype)
        row_bytes = codec.row_bytes(session.kv_dim)
        end_id = start_id + len(encoded) // row_bytes
        check_store_range(codec, fmt, start_id, end_id, n_rows)
        delta = max(0, end_id - n_rows) * row_bytes
        self._make_room(delta, 0, pair_of(sid))
        self.journal.append(VStoreBatch(sid, layer, start_id, end_id - start_id, encoded))
        rows_now = session.layer_buffer(layer).write(start_id, encoded)
        self._bytes += delta
        self._touch(session)
        return rows_now

    def drop(self, sids: list[str]) -> int:
        """Drop sessions; returns how many existed. Dropping a prefix side unregisters the prefix."""
        dropped = 0
        for sid in sids:
            if SessionId(sid) in self._sessions:
                self.journal.append(VDrop(sid))
                self._remove(SessionId(sid))
                dropped += 1
        return dropped

    def register_prefix(self, ns: str, kv_dim: int, k_formats: tuple[str, ...], v_formats: tuple[str, ...],
                        uniform: bool, *, block_size: int | None = None, hashes: bytes | None = None,
                        layers: int | None = None, prefill_ms: float | None = None) -> None:
        """Create (or re-confirm) ``<ns>_pk``/``<ns>_pv`` and record the prefix's metadata.

        Re-registering with the same kv_dim and formats updates BLOCKS, LAYERS and
        PREFILL_MS when given; different kv_dim/formats are refused.
        """
        _check_formats(kv_dim, k_formats + v_formats)
        if not uniform:
            layers = len(k_formats)
        entry = self._prefixes.get(Namespace(ns))
        if entry is not None and (entry.kv_dim, entry.k_formats, entry.v_formats, entry.uniform) != (
                kv_dim, k_formats, v_formats, uniform):
            raise CommandError(f"prefix '{ns}' is registered with kv_dim {entry.kv_dim} and format "
                               f"{_describe(entry.k_formats, entry.uniform)}")
        sides = ((k_session(ns), k_formats), (v_session(ns), v_formats))
        missing = 0
        for sid, formats in sides:
            existing = self._sessions.get(sid)
            if existing is None:
                missing += 1
            elif not existing.same_shape(kv_dim, formats, uniform):
                raise CommandError(f"session '{sid}' exists with kv_dim {existing.kv_dim} and "
                                   f"format {_describe(existing.formats, existing.uniform)}")
        self._make_room(0, missing, pair_of(k_session(ns)))
        # PREFILL_MS is not logged: a restarted server credits the per-token estimate.
        self.journal.append(PrefixRegister(ns, kv_dim, k_formats, v_formats, uniform, block_size, hashes,
                                           layers))
        for sid, formats in sides:
            session = self._sessions.get(sid) or self._insert(sid, kv_dim, formats, uniform)
            self._touch(session)
        if entry is None:
            entry = PrefixEntry(Namespace(ns), kv_dim, k_formats, v_formats, uniform)
            self._prefixes[Namespace(ns)] = entry
        if block_size is not None and hashes is not None:
            entry.blocks = BlockTable.from_blob(block_size, hashes)
        if layers is not None:
            entry.layers = layers
        if prefill_ms is not None:
            entry.prefill_ms = prefill_ms

    def drop_prefixes(self, namespaces: list[str]) -> int:
        """Drop both sessions and the registration of each prefix; returns how many were held."""
        dropped = 0
        for ns in namespaces:
            sides = [sid for sid in (k_session(ns), v_session(ns)) if sid in self._sessions]
            if not sides and Namespace(ns) not in self._prefixes:
                continue
            self.journal.append(PrefixDrop(ns))
            for sid in sides:
                self._remove(sid)
            self._prefixes.pop(Namespace(ns), None)
            dropped += 1
        return dropped

    def flush(self) -> None:
        """Drop every session and registration (FLUSHALL)."""
        if not self._sessions and not self._prefixes:
            return
        self.journal.append(VFlush())
        self._sessions.clear()
        self._prefixes.clear()
        self._bytes = 0

    def evict_sessions(self, sids: list[SessionId]) -> None:
        """Evict these sessions (the caller passes whole K/V pairs)."""
        present = [sid for sid in sids if sid in self._sessions]
        if not present:
            return
        if self.before_evict is not None:
            self.before_evict(present)
        self.journal.append(Evict(present))
        for sid in present:
            self._remove(sid)
        self.evicted_sessions += len(present)

    def make_room(self, extra_bytes: int, protect: tuple[str, ...] = ()) -> None:
        """Evict LRU sessions so ``extra_bytes`` more fit the budget (for the keyspace's writes).

        Raises CommandError(code="OOM") and evicts nothing when they cannot fit.
        """
        self._make_room(extra_bytes, 0, tuple(SessionId(s) for s in protect))

    # ---- reads ---------------------------------------------------------------------------
    def fetch(self, sid: str, layer: int, start_id: int, end_id: int, dtype: str = "f32") -> memoryview:
        """Rows ``start_id .. end_id-1`` of one layer as f32/f16 values or raw encoded bytes."""
        session = self.session(sid)
        view = self._read_range(session, layer, start_id, end_id, dtype)
        session.n_fetches += 1
        self.total_fetches += 1
        return view

    def mfetch(self, sid: str, layer_from: int, layer_to: int, start_id: int, end_id: int,
               dtype: str = "f32") -> list[memoryview]:
        """The same row range of layers ``layer_from .. layer_to-1``; all checked before any is read."""
        session = self.session(sid)
        if layer_from > layer_to:
            raise CommandError(f"layer range {layer_from}..{layer_to} is reversed")
        for layer in range(layer_from, layer_to):
            self._check_range(session, layer, start_id, end_id)
        views = [self._read_range(session, layer, start_id, end_id, dtype) for layer in range(layer_from, layer_to)]
        session.n_fetches += len(views)
        self.total_fetches += len(views)
        return views

    def fetch_ids(self, sid: str, layer: int, ids: list[int], dtype: str = "f32") -> memoryview:
        """Rows for a list of token ids, in the order given (the legacy V.FETCH form)."""
        session = self.session(sid)
        session.check_layer(layer)
        n_rows = session.rows_in(layer)
        bad = [i for i in ids if not 0 <= i < n_rows]
        if bad:
            raise CommandError(f"token id {bad[0]} outside the {n_rows} rows of layer {layer} of '{sid}'")
        fmt = session.format_of(layer)
        buf = session.layer_buffer(layer)
        session.n_fetches += 1
        self.total_fetches += 1
        if dtype == "raw" or not ids or token_group(buf.codec) == 1:
            return decode_output(buf.codec, fmt, session.kv_dim, buf.gather_raw(ids).data, dtype)
        lo, hi, positions = gather_ids(buf.codec, ids, n_rows)  # decode the groups around the ids
        decoded = decode_output(buf.codec, fmt, session.kv_dim, buf.raw(lo, hi), dtype)
        rows = np.frombuffer(decoded, dtype=np.uint8).reshape(hi - lo, -1)
        picked: np.ndarray = rows[positions].reshape(-1)
        return picked.data

    def lookup_prefix(self, ns: str) -> tuple[bool, int]:
        """(hit, K-side layer-0 tokens). A hit needs both sessions, and with LAYERS n registered
        every one of the 2n layers holding the same non-zero token count. A hit touches both."""
        hit, tokens = self.peek_prefix(ns)
        if hit:
            self._touch(self._sessions[k_session(ns)])
            self._touch(self._sessions[v_session(ns)])
        return hit, tokens

    def peek_prefix(self, ns: str) -> tuple[bool, int]:
        """``lookup_prefix`` without touching the LRU order (the cross-worker directory's view)."""
        k = self._sessions.get(k_session(ns))
        v = self._sessions.get(v_session(ns))
        if k is None or v is None:
            return False, 0
        entry = self._prefixes.get(Namespace(ns))
        if entry is not None and entry.layers:
            counts = {side.rows_in(layer) for side in (k, v) for layer in range(entry.layers)}
            if len(counts) != 1 or 0 in counts:
                return False, 0
        return True, k.rows_in(0)

    # ---- internals -----------------------------------------------------------------------
    def _touch(self, session: Session) -> None:
        session.last_access = self._clock()
        self._sessions.move_to_end(session.sid)

    def _insert(self, sid: SessionId, kv_dim: int, formats: tuple[str, ...], uniform: bool) -> Session:
        session = Session(sid, kv_dim, formats, uniform, last_access=self._clock())
        self._sessions[sid] = session
        return session

    def _remove(self, sid: SessionId) -> None:
        session = self._sessions.pop(sid)
        self._bytes -= session.nbytes
        ns = _namespace_of(sid)
        if ns is not None:
            self._prefixes.pop(ns, None)
            for hook in self.on_prefix_removed:
                hook(ns)

    def _check_range(self, session: Session, layer: int, start_id: int, end_id: int) -> None:
        session.check_layer(layer)
        n_rows = session.rows_in(layer)
        if not 0 <= start_id <= end_id <= n_rows:
            raise CommandError(f"range {start_id}..{end_id} outside the {n_rows} rows of layer {layer} "
                               f"of '{session.sid}'")

    def _read_range(self, session: Session, layer: int, start_id: int, end_id: int, dtype: str) -> memoryview:
        self._check_range(session, layer, start_id, end_id)
        fmt = session.format_of(layer)
        buf = session.layers.get(layer)
        if buf is None:  # an empty layer, range 0..0
            return memoryview(b"")
        lo, hi = start_id, end_id
        if dtype != "raw" and start_id < end_id:  # token-grouped formats decode whole groups
            lo, hi = enclosing_groups(buf.codec, start_id, end_id, buf.n_rows)
        view = decode_output(buf.codec, fmt, session.kv_dim, buf.raw(lo, hi), dtype)
        if (lo, hi) == (start_id, end_id):
            return view
        row = len(view) // (hi - lo)
        return view[(start_id - lo) * row:(end_id - lo) * row]

    def _make_room(self, extra_bytes: int, new_sessions: int, protect: tuple[SessionId, ...]) -> None:
        """Plan LRU victims (whole pairs, never ``protect``), then evict them; refuse if they do not suffice."""
        def over_slots(n_sessions: int) -> bool:
            return self.max_sessions > 0 and n_sessions + new_sessions > self.max_sessions

        def over_bytes(n_bytes: int) -> bool:
            return self.max_bytes > 0 and n_bytes + extra_bytes > self.max_bytes

        n_sessions = len(self._sessions)
        n_bytes = self._bytes + (self.external_bytes() if self.max_bytes > 0 else 0)
        if not over_slots(n_sessions) and not over_bytes(n_bytes):
            return
        planned: list[SessionId] = []
        chosen: set[SessionId] = set(protect)
        for sid in self._sessions:
            if not (over_slots(n_sessions) or over_bytes(n_bytes)):
                break
            if sid in chosen:
                continue
            group = [s for s in pair_of(sid) if s in self._sessions and s not in chosen]
            if any(s in protect for s in pair_of(sid)):
                continue
            for member in group:
                chosen.add(member)
                planned.append(member)
                n_sessions -= 1
                n_bytes -= self._sessions[member].nbytes
            group_ns = _namespace_of(sid)
            if group_ns is not None and group:
                n_bytes -= self.group_extra_bytes(group_ns)
        if over_slots(n_sessions):
            raise CommandError(f"max-sessions {self.max_sessions} reached and no session can be evicted")
        evict_extra = None
        if over_bytes(n_bytes) and self.plan_extra_room is not None:
            freed, evict_extra = self.plan_extra_room(n_bytes + extra_bytes - self.max_bytes, protect)
            n_bytes -= freed
        if over_bytes(n_bytes):
            raise oom_error()
        reason = "max-sessions" if over_slots(len(self._sessions)) else "maxmemory"
        if evict_extra is not None:
            evict_extra()
        i = 0
        while i < len(planned):  # evict pair by pair so each journal record is one group
            group = [s for s in pair_of(planned[i]) if s in planned]
            self.evict_sessions(group)
            log.debug("evicted %s (least recently used, %s)", " ".join(group), reason)
            i += len(group)


def _check_formats(kv_dim: int, formats: tuple[str, ...]) -> None:
    try:
        check_formats(kv_dim, formats)
    except CodecError as e:
        raise codec_error(e) from e


def _describe(formats: tuple[str, ...], uniform: bool) -> str:
    return formats[0] if uniform else "SCHEMA " + " ".join(formats)
