"""The warm tier <-> cold tier moves: promote on a warm miss, write on store, demote on eviction.

``ColdBridge`` owns the decisions (docs/scale-out.md); ``commands.py`` calls it from the
KV.PREFIX / V.STOREBATCH handlers and the V-store calls ``before_evict`` at its eviction point.

Modes (``--cold-tier-mode``):
  through  (default) a write to a registered prefix is acknowledged after the cluster
           acknowledged it: once a client saw the reply, a front that dies (kill -9) loses
           nothing the cold tier does not hold.
  behind   the reply goes out after the warm write; a flusher copies dirty layers to the
           cluster within ~FLUSH_INTERVAL_S (coalescing repeated writes to a layer). A front
           killed in that window loses those rows from the cold tier (its own WAL still has
           them); a clean shutdown flushes first.
In both modes a failed cluster write is logged, counted and retried by the flusher; the
client's write to the warm tier still succeeds (the cold tier is a cache, not the record).

Consistency across fronts (``invalidation.py``): a fresh registration gets a new generation;
a DROP or a registration on another front, heard on the invalidation channel, drops this
front's warm copy (and its ATTEND slots) unless it is of the announced generation; a warm hit
held since before the last (re)subscription re-reads the generation once (``promote``).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

from pion.common.errors import CommandError
from pion.common.ids import K_SUFFIX, V_SUFFIX, SessionId, k_session, v_session
from pion.server.coldtier.freshness import Freshness
from pion.server.coldtier.invalidation import Subscriber
from pion.server.coldtier.layout import PrefixMeta
from pion.server.coldtier.tier import ColdTier, LayerRows
from pion.server.store.attend_slots import AttendSlots
from pion.server.store.prefixes import BlockTable, PrefixEntry
from pion.server.store.vstore import VStore

if TYPE_CHECKING:
    from pion.server.commands.spec import CommandSpec

log = logging.getLogger("pion.server.coldtier")

FLUSH_INTERVAL_S = 0.01  # write-behind: how long dirty layers wait (to coalesce) before the flush
RETRY_INTERVAL_S = 1.0  # after a failed cluster write
META = ("meta", -1)  # the pending-set marker for "write the index meta"
Part = tuple[str, int]
Parts = dict[Part, int]  # part -> its first row not yet in the cold tier (0: the whole layer)


def merge_parts(into: Parts, parts: Parts) -> None:
    """Add ``parts`` to a pending set: a layer's dirty range starts at the lower first row."""
    for part, start in parts.items():
        into[part] = min(start, into.get(part, start))


def whole(parts: Parts | set[Part]) -> Parts:
    """The same parts, each to be written whole."""
    return {part: 0 for part in parts}


ATTN_SUFFIX = "_attn"  # PionPromptCache's ATTEND session of a prefix (pion.client.stage2.wire)
MAX_DEMOTED = 4096  # namespaces remembered as demoted (for ATTEND's -COLDMISS), oldest forgotten


def side_of(sid: str) -> tuple[str, str] | None:
    """``<ns>_pk`` -> (ns, "k"), ``<ns>_pv`` -> (ns, "v"), anything else None."""
    if sid.endswith(K_SUFFIX):
        return sid[: -len(K_SUFFIX)], "k"
    if sid.endswith(V_SUFFIX):
        return sid[: -len(V_SUFFIX)], "v"
    return None


def meta_of(entry: PrefixEntry) -> PrefixMeta:
    blocks = entry.blocks
    return PrefixMeta(entry.kv_dim, entry.k_formats, entry.v_formats, entry.uniform, entry.layers,
                      None if blocks is None else blocks.block_size,
                      None if blocks is None else blocks.blob(), entry.prefill_ms)


class ColdBridge:
    """One front's cold-tier policy over its V-store."""

    def __init__(self, tier: ColdTier, vstore: VStore, attend: AttendSlots | None = None) -> None:
        self.tier = tier
        self.vstore = vstore
        self.attend = attend
        self.fresh = Freshness()
        self.demoted: OrderedDict[str, None] = OrderedDict()  # evicted here, kept in the cold tier
        self._subscriber: Subscriber | None = None
        self.on_promoted: list[Callable[[str], None]] = []  # -w N: publish it in the workers' directory
        self.binary_specs: dict[str, CommandSpec] = {}  # sync Stage-2 variants for the binary lane (stage2.py)
        self._writing: dict[str, int] = {}  # namespaces with a cold write in flight (own writes)
        self.pending: dict[str, Parts] = {}
        self._flusher: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._demotions: set[asyncio.Task[set[Part] | None]] = set()
        self._promoting: dict[str, asyncio.Future[bool]] = {}  # one cold read per namespace at a time
        # of those in _promoting: the generation last announced meanwhile (None: a DROP)
        self._invalidated: dict[str, str | None] = {}

    # ---- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        """After recovery (replayed evictions are not demotions): hook the V-store, start the flusher."""
        self.vstore.before_evict = self.before_evict
        loop = asyncio.get_running_loop()
        self._flusher = loop.create_task(self._flush_forever())
        self._subscriber = Subscriber(self.tier.url, loop, self.invalidate, self.fresh.subscription)
        self._subscriber.start()

    def close(self) -> None:
        """Stop the flusher and write what is still pending (a clean shutdown loses nothing)."""
        if self._flusher is not None:
            self._flusher.cancel()
            self._flusher = None
        if self._subscriber is not None:
            self._subscriber.stop()
            self._subscriber = None
        for ns in list(self.pending):
            meta, layers = self._snapshot(ns, whole(self.pending.pop(ns)))
            if meta is not None or layers:
                self.tier.write_blocking(ns, meta, layers, self.fresh.gens.get(ns))
        self.tier.close()

    # ---- warm-tier reads -----------------------------------------------------------------
    def warm_absent(self, ns: str) -> bool:
        """Nothing of ``ns`` in the warm tier: only then may the cold tier answer for it."""
        store = self.vstore
        return store.prefix(ns) is None and store.get(k_session(ns)) is None and store.get(v_session(ns)) is None

    def _layer(self, ns: str, side: str, layer: int, start: int) -> LayerRows | None:
        """Rows ``start..`` of one layer (all of it when ``start`` is 0 or past its end)."""
        session = self.vstore.get(k_session(ns) if side == "k" else v_session(ns))
        if session is None or layer not in session.layers:
            return None
        n = session.rows_in(layer)
        start = start if start < n else 0
        return LayerRows(side, layer, n, bytes(session.layers[layer].raw(start, n)), start)

    def _all_parts(self, ns: str) -> Parts:
        parts: Parts = {META: 0}
        for side in ("k", "v"):
            session = self.vstore.get(k_session(ns) if side == "k" else v_session(ns))
            if session is not None:
                parts.update(((side, layer), 0) for layer in session.layers)
        return parts

    def _snapshot(self, ns: str, parts: Parts) -> tuple[PrefixMeta | None, list[LayerRows]]:
        """Copy the parts out of the warm tier now (the write happens later, in a thread)."""
        entry = self.vstore.prefix(ns)
        if entry is None:
            return None, []
        meta = meta_of(entry) if META in parts else None
        layers = [rows for (side, layer), start in sorted(p for p in parts.items() if p[0] != META)
                  if (rows := self._layer(ns, side, layer, start)) is not None]
        return meta, layers

    # ---- the four hook points --------------------------------------------------------------
    async def registered(self, ns: str, fresh: bool) -> None:
        """After KV.PREFIX.REGISTER(.SCHEMA): the index meta and whatever rows are already held.

        ``fresh`` (the namespace was not registered here before): a new generation, announced
        once the cluster has the meta, so the other fronts drop any copy they hold of an
        earlier registration. A re-confirmation keeps the generation (the rows did not change)."""
        gen = self.fresh.gens.get(ns)
        if fresh or gen is None:
            gen = secrets.token_hex(8)
        self.fresh.held(ns, gen, own=True)
        self.demoted.pop(ns, None)
        await self._write(ns, self._all_parts(ns))

    async def stored(self, sid: str, layer: int, start: int) -> None:
        """After V.STOREBATCH on a registered prefix's side: that layer's rows from ``start``
        (the rows this batch wrote and any after them) and its row count — a layer appended in
        k chunks sends each byte once, not ~k/2 times."""
        which = side_of(sid)
        if which is None or self.vstore.prefix(which[0]) is None:
            return
        await self._write(which[0], {(which[1], layer): start})

    def needs_refresh(self, ns: str) -> bool:
        """Before a LOOKUP answers: a warm miss (promote), or a warm copy this front cannot vouch
        for (no subscription, or held since before the last resubscription: re-read its generation)."""
        return self.warm_absent(ns) or not self.fresh.trusted(ns)

    async def promote(self, ns: str) -> bool:
        """A warm miss: read the index (one round trip); on a cold hit copy the rows in. A warm
        copy that is not trusted is checked against the index first (``_revalidate``).

        Concurrent LOOKUPs of one namespace on this front share one promotion (single flight):
        a popular prefix is read from its shard once per front, not once per waiting client."""
        running = self._promoting.get(ns)
        if running is not None:
            return await asyncio.shield(running)
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._promoting[ns] = future
        result = False
        try:
            if not self.warm_absent(ns) and await self._revalidate(ns):
                result = True
            else:
                result = await self._promote(ns)
        finally:
            del self._promoting[ns]
            self._invalidated.pop(ns, None)
            future.set_result(result)  # on an exception the waiters read a miss
        return result

    async def _revalidate(self, ns: str) -> bool:
        """A warm copy nobody vouched for: True to keep serving it, False once it was dropped
        as stale (the caller then promotes whatever the cold tier holds now)."""
        reachable, index = await self.tier.read_index_checked(ns)
        if not reachable or ns in self.pending or ns in self._writing:
            return True  # cannot tell, or our own write is not there yet: keep serving
        if ns in self._invalidated:
            return False  # invalidate() already dropped it, or it is of another generation now
        local = self.fresh.gens.get(ns)
        if index is not None and ns in self.fresh.own:
            self.fresh.held(ns, local)  # ours: kept while the cluster has the prefix (Freshness.stale)
            return True
        if index is not None and local in (None, index.gen):
            self.fresh.held(ns, index.gen)  # a recovered copy adopts the cluster's generation
            return True
        self._drop_warm(ns)  # dropped or re-registered elsewhere while we were not listening
        return False

    async def _promote(self, ns: str) -> bool:
        tier, stats = self.tier, self.tier.stats
        index = await tier.read_index(ns)
        rows = await tier.read_rows(ns, index) if index is not None and index.hit() else None
        if index is None or rows is None or self._superseded(ns, index.gen):
            stats.coldtier_misses += 1
            return False
        if not self.warm_absent(ns):  # another client brought it in while we waited
            return True
        meta = index.meta
        try:
            self.vstore.register_prefix(ns, meta.kv_dim, meta.k_formats, meta.v_formats, meta.uniform,
                                        block_size=meta.block_size, hashes=meta.hashes,
                                        layers=meta.layers, prefill_ms=meta.prefill_ms)
            for part in rows:
                sid = k_session(ns) if part.side == "k" else v_session(ns)
                self.vstore.store_rows(sid, part.layer, 0, part.data, "raw")
        except CommandError as exc:  # no room (OOM), or a format this build refuses
            log.warning("cannot promote prefix '%s' from the cold tier: %s", ns, exc.message)
            self.vstore.drop_prefixes([ns])
            stats.coldtier_misses += 1
            return False
        self.fresh.held(ns, index.gen, own=False)
        self.demoted.pop(ns, None)
        for hook in self.on_promoted:
            hook(ns)
        stats.coldtier_hits += 1
        stats.coldtier_promotions += 1
        return True

    def _superseded(self, ns: str, read_gen: str | None) -> bool:
        """An invalidation heard during this promotion announced something newer than what it
        read: a DROP, or a registration of another generation. The announcement of the very
        registration it read (published by the writing front, often delivered late) is not."""
        if ns not in self._invalidated:
            return False
        announced = self._invalidated[ns]
        return announced is None or announced != read_gen

    def invalidate(self, front: str, gen: str | None, ns: str) -> None:
        """Heard on the invalidation channel (run on the loop): another front dropped ``ns``
        (``gen`` None) or registered it afresh. Drop our copy unless it is that generation."""
        if front == self.tier.front_id:
            return
        if ns in self._promoting:
            self._invalidated[ns] = gen  # a promotion reading older rows must not install them
        self.demoted.pop(ns, None)
        if self.warm_absent(ns):
            self.fresh.forget(ns)
            return
        if self.fresh.stale(ns, gen):  # not when it is of that registration, or our own
            self._drop_warm(ns)

    def _drop_warm(self, ns: str) -> None:
        """Forget this front's copy of a prefix that went stale: V-store (journaled, so a restart
        does not bring it back), ATTEND slots, pending writes."""
        self.vstore.drop_prefixes([ns])
        self.forget_attend(ns)
        self.pending.pop(ns, None)
        self.fresh.forget(ns)
        self.tier.stats.coldtier_invalidations += 1

    def forget_attend(self, ns: str) -> None:
        if self.attend is not None:
            self.attend.forget(ns)
            self.attend.forget(ns + ATTN_SUFFIX)

    async def blocks(self, ns: str) -> BlockTable | None:
        """KV.PREFIX.BLOCKS / MEMBERSHIP on a front without the prefix: the cold index's table."""
        index = await self.tier.read_index(ns)
        if index is None or index.meta.block_size is None or index.meta.hashes is None:
            return None
        return BlockTable.from_blob(index.meta.block_size, index.meta.hashes)

    async def dropped(self, namespaces: list[str]) -> set[str]:
        """After KV.PREFIX.DROP: drop everywhere; the namespaces the cold tier held."""
        for ns in namespaces:
            self.pending.pop(ns, None)
            self.fresh.forget(ns)
            self.demoted.pop(ns, None)
            self.forget_attend(ns)
        return await self.tier.drop(namespaces) or set()

    def before_evict(self, sids: list[SessionId]) -> None:
        """The V-store is about to evict these sessions: demote, do not drop.

        With every write already acknowledged by the cluster the rows are there and this only
        counts; with writes still pending (write-behind, or a failed write) the whole prefix
        is copied out now and written in the background."""
        for ns in {which[0] for sid in sids if (which := side_of(sid)) is not None}:
            if self.vstore.prefix(ns) is None:
                continue
            self.tier.stats.coldtier_demotions += 1
            self.demoted[ns] = None
            self.demoted.move_to_end(ns)
            while len(self.demoted) > MAX_DEMOTED:
                self.demoted.popitem(last=False)
            parts = self.pending.pop(ns, None)
            if parts is None:
                continue
            meta, layers = self._snapshot(ns, self._all_parts(ns))
            task = asyncio.get_running_loop().create_task(self.tier.write(ns, meta, layers,
                                                                          self.fresh.gens.get(ns)))
            self._demotions.add(task)
            task.add_done_callback(self._demotions.discard)

    # ---- writing -------------------------------------------------------------------------
    async def _write(self, ns: str, parts: Parts) -> None:
        if self.tier.mode == "behind":
            merge_parts(self.pending.setdefault(ns, {}), parts)
            self._wake.set()
            return
        meta, layers = self._snapshot(ns, parts)
        self._writing[ns] = self._writing.get(ns, 0) + 1
        try:
            written = await self.tier.write(ns, meta, layers, self.fresh.gens.get(ns))
        finally:
            left = self._writing.pop(ns) - 1
            if left:
                self._writing[ns] = left
        if written is None:
            merge_parts(self.pending.setdefault(ns, {}), parts)  # retried by the flusher
            self._wake.set()
        elif written:  # a partial write the cluster could not take (a gap): the whole layers now
            await self._write(ns, whole(written))

    async def _flush_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await asyncio.sleep(FLUSH_INTERVAL_S)
            failed = False
            for ns in list(self.pending):
                parts = self.pending.pop(ns, None)
                if not parts:
                    continue
                meta, layers = self._snapshot(ns, parts)
                if meta is None and not layers:
                    continue
                written = await self.tier.write(ns, meta, layers, self.fresh.gens.get(ns))
                if written is None:
                    merge_parts(self.pending.setdefault(ns, {}), parts)
                    failed = True
                elif written:
                    merge_parts(self.pending.setdefault(ns, {}), whole(written))
                    self._wake.set()
            if failed:
                await asyncio.sleep(RETRY_INTERVAL_S)
                self._wake.set()
