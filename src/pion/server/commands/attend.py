"""ATTEND.PREFIX.* (Stage 2): attention computed in the server on resident prefix K/V.

  ATTEND.PREFIX.STORE  <sid> <layer> <H> <N> <D> <K_blob> <V_blob> [DTYPE f32|f16]      -> +OK
  ATTEND.PREFIX.LOOKUP <sid> <layer>                                        -> +HIT | +COLD | +MISS
  ATTEND.PREFIX.QUERY  <sid> <layer> <H> <D> <top_k> <Q> [<fa_window>]
                                          -> M=1: H*D fp32; M>1: H*M*D fp32 then H*M fp32 LSE
  ATTEND.PREFIX.QUERY_FUSED <sid> <layer> <H_q> <D> <S_suf> <H_kv> <Q> <K_suf> <V_suf>
                            <head_map> [<fa_window>]                        -> H_q*M*D fp32
  ATTEND.PREFIX.QUERY_SPARSE <sid> <layer> <H> <D> <K_sparse_max> <Q> <indices> <counts>
                             [<fa_window>]                                  -> as QUERY
  ATTEND.PREFIX.QUERY_SPARSE_AUTO <sid> <layer> <H_q> <D> <B> <K_top> <H_kv> <Q> <head_map>
                                  [<fa_window>]                             -> as QUERY
  ATTEND.PREFIX.QUERY_SPARSE_AUTO_FUSED <sid> <layer> <H_q> <D> <B> <K_top> <H_kv> <S_suf>
                                  <Q> <K_suf> <V_suf> <head_map> [<fa_window>] -> H_q*M*D fp32
  KV.PREFIX.WARM <ns> <H> <D> [<attend_sid>]          -> +<layers> [skipped_dim=<k>]

Q is ``[H, M, D]`` fp32 with M taken from its length; a demoted entry answers
``-COLDMISS <sid> <layer>``. The slots are derived data and never logged (see
``pion.server.store.attend_slots``); torch is imported on the first ATTEND command.
Byte layouts, head_map and the sparse lists are in docs/protocol.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pion.common.errors import CommandError
from pion.common.ids import k_session, v_session
from pion.server.commands.attend_args import (
    MAX_TOKENS, float_tensor, head_map_tensor, parse_head_dim, parse_heads, parse_layer,
    parse_window, query_tensor, sparse_lists, suffix_tensor,
)
from pion.server.commands.spec import CommandSpec
from pion.server.commands.store_args import option, parse_dtype, parse_int, syntax_error, word
from pion.server.resp.replies import OK, SimpleString
from pion.server.store.attend_slots import AttendSlots, Slot

if TYPE_CHECKING:
    from pion.server.context import CommandContext, ServerState


MISSING_RUNTIME = "ATTEND needs torch, the [runtime] extra: pip install 'pion[runtime]'"


def _slots(state: ServerState) -> AttendSlots:
    """The worker's ATTEND slot table (``state.stores.attend``); torch is imported, and its
    thread pool sized, by the first ATTEND command (a server without them never maps torch)."""
    slots = state.stores.attend
    if not slots.torch_loaded:
        _load_torch(state.config.attention_threads)
        slots.torch_loaded = True
    return slots


def _load_torch(threads: int) -> None:
    """Import torch (first ATTEND command only) and size its thread pool.

    Measured on a shared 2-core box: with torch's default 2 threads an M=1 QUERY took ~30 ms
    p50 against 0.7 ms with 1 (OpenMP spin-waiting against the client process).
    """
    try:
        import torch
    except ImportError:  # a core install: ATTEND needs the [runtime] extra
        raise CommandError(MISSING_RUNTIME) from None

    if threads > 0:
        torch.set_num_threads(threads)


def attend_bytes(state: ServerState) -> int:
    """Bytes held by warm slots (they count against --maxmemory)."""
    return int(state.stores.attend.nbytes)


def _ops() -> Any:
    from pion.server.attention import prefix_ops  # torch loads here, on the first query

    return prefix_ops


def _warm_slot(ctx: CommandContext, sid_arg: bytes, layer_arg: bytes, head_dim: int) -> Slot:
    slot = _slots(ctx.server).get((word(sid_arg), parse_layer(layer_arg)))
    if slot.head_dim != head_dim:
        raise CommandError(f"D {head_dim} does not match the stored layer's head_dim {slot.head_dim}")
    return slot


def _check_kv_heads(slot: Slot, h_kv: int) -> None:
    if h_kv != slot.n_heads:
        raise CommandError(f"H_kv {h_kv} does not match the stored layer's {slot.n_heads} heads")


def _check_grouping(slot: Slot, h_q: int) -> None:
    if h_q % slot.n_heads:
        raise CommandError(f"H {h_q} is not a multiple of the stored layer's {slot.n_heads} heads")


def _reply(result: tuple[Any, Any], with_lse: bool) -> bytes:
    out, lse = result
    data: bytes = out.contiguous().numpy().tobytes()
    if with_lse:
        data += lse.contiguous().numpy().tobytes()
    return data


def _suffix(args: list[bytes], i_k: int, h_kv: int, s_arg: bytes, d: int, m: int) -> tuple[Any, Any]:
    s = parse_int(s_arg, "S_suf", 0, MAX_TOKENS)
    if s and m > s:
        raise CommandError(f"Q has {m} rows but the suffix only {s} tokens (M must be <= S_suf)")
    return (suffix_tensor(args[i_k], h_kv, s, d, "K_suf"), suffix_tensor(args[i_k + 1], h_kv, s, d, "V_suf"))


def cmd_attend_store(ctx: CommandContext, args: list[bytes]) -> object:
    slots = _slots(ctx.server)
    sid, layer = word(args[0]), parse_layer(args[1])
    h, n, d = parse_heads(args[2]), parse_int(args[3], "N", 1, MAX_TOKENS), parse_head_dim(args[4])
    dtype = "f32"
    if len(args) > 7:
        if len(args) != 9 or option(args[7]) != "DTYPE":
            raise syntax_error(args[7])
        dtype = parse_dtype(args[8], ("f32", "f16"))
    keys = float_tensor(args[5], "K_blob", h * n * d, dtype).view(h, n, d)
    values = float_tensor(args[6], "V_blob", h * n * d, dtype).view(h, n, d)
    slots.put((sid, layer), keys, values, h, n, d)
    return OK


def cmd_attend_lookup(ctx: CommandContext, args: list[bytes]) -> object:
    return SimpleString(_slots(ctx.server).state((word(args[0]), parse_layer(args[1]))))


def cmd_attend_query(ctx: CommandContext, args: list[bytes]) -> object:
    _slots(ctx.server)
    h, d = parse_heads(args[2]), parse_head_dim(args[3])
    top_k = parse_int(args[4], "top_k", 0, MAX_TOKENS)
    q = query_tensor(args[5], h, d)
    window = parse_window(args, 6)
    slot = _warm_slot(ctx, args[0], args[1], d)
    _check_grouping(slot, h)
    return _reply(_ops().dense(slot.keys, slot.values, q, None, window, top_k), q.shape[1] > 1)


def cmd_attend_query_fused(ctx: CommandContext, args: list[bytes]) -> object:
    _slots(ctx.server)
    h_q, d, h_kv = parse_heads(args[2], "H_q"), parse_head_dim(args[3]), parse_heads(args[5], "H_kv")
    q = query_tensor(args[6], h_q, d)
    k_suf, v_suf = _suffix(args, 7, h_kv, args[4], d, q.shape[1])
    head_map = head_map_tensor(args[9], h_q, h_kv)
    window = parse_window(args, 10)
    slot = _warm_slot(ctx, args[0], args[1], d)
    _check_kv_heads(slot, h_kv)
    return _reply(_ops().fused(slot.keys, slot.values, q, k_suf, v_suf, head_map, window), False)


def cmd_attend_query_sparse(ctx: CommandContext, args: list[bytes]) -> object:
    _slots(ctx.server)
    h, d = parse_heads(args[2]), parse_head_dim(args[3])
    k_max = parse_int(args[4], "K_sparse_max", 1, MAX_TOKENS)
    q = query_tensor(args[5], h, d)
    window = parse_window(args, 8)
    slot = _warm_slot(ctx, args[0], args[1], d)
    _check_grouping(slot, h)
    indices, counts = sparse_lists(args[6], args[7], h, k_max, slot.n_tokens)
    return _reply(_ops().sparse(slot.keys, slot.values, q, indices, counts, window), q.shape[1] > 1)


def _blocks(args: list[bytes], i: int) -> tuple[int, int]:
    return parse_int(args[i], "B", 1, MAX_TOKENS), parse_int(args[i + 1], "K_top", 1, MAX_TOKENS)


def cmd_attend_query_sparse_auto(ctx: CommandContext, args: list[bytes]) -> object:
    _slots(ctx.server)
    h_q, d = parse_heads(args[2], "H_q"), parse_head_dim(args[3])
    block, k_top = _blocks(args, 4)
    h_kv = parse_heads(args[6], "H_kv")
    q = query_tensor(args[7], h_q, d)
    head_map = head_map_tensor(args[8], h_q, h_kv)
    window = parse_window(args, 9)
    slot = _warm_slot(ctx, args[0], args[1], d)
    _check_kv_heads(slot, h_kv)
    result = _ops().sparse_auto(slot.keys, slot.values, q, block, k_top, head_map, window)
    return _reply(result, q.shape[1] > 1)


def cmd_attend_query_sparse_auto_fused(ctx: CommandContext, args: list[bytes]) -> object:
    _slots(ctx.server)
    h_q, d = parse_heads(args[2], "H_q"), parse_head_dim(args[3])
    block, k_top = _blocks(args, 4)
    h_kv = parse_heads(args[6], "H_kv")
    q = query_tensor(args[8], h_q, d)
    k_suf, v_suf = _suffix(args, 9, h_kv, args[7], d, q.shape[1])
    head_map = head_map_tensor(args[11], h_q, h_kv)
    window = parse_window(args, 12)
    slot = _warm_slot(ctx, args[0], args[1], d)
    _check_kv_heads(slot, h_kv)
    result = _ops().sparse_auto_fused(slot.keys, slot.values, q, k_suf, v_suf, block, k_top, head_map, window)
    return _reply(result, False)


def cmd_attend_kvprefix_warm(ctx: CommandContext, args: list[bytes]) -> object:
    """Rebuild every layer's slot from the V-store's ``<ns>_pk``/``<ns>_pv`` (any stored format)."""
    slots = _slots(ctx.server)  # first: answers -ERR naming the extra when torch is missing
    import torch

    ns, h, d = word(args[0]), parse_heads(args[1]), parse_head_dim(args[2])
    if len(args) > 4:
        raise syntax_error(args[4])
    attend_sid = word(args[3]) if len(args) == 4 else ns
    store = ctx.server.stores.vstore
    k_side, v_side = store.get(k_session(ns)), store.get(v_session(ns))
    if k_side is None or v_side is None:
        raise CommandError(f"prefix '{ns}' not found in the V-store (prefill and store it first)")
    layers = sorted(layer for layer in set(k_side.layers) & set(v_side.layers)
                    if k_side.rows_in(layer) and k_side.rows_in(layer) == v_side.rows_in(layer))
    if k_side.kv_dim != h * d:
        return SimpleString(f"0 skipped_dim={len(layers)}")
    slots.check_fits(sum(2 * 4 * k_side.kv_dim * k_side.rows_in(layer) for layer in layers))
    for layer in layers:
        n = k_side.rows_in(layer)
        sides = []
        for sid in (k_session(ns), v_session(ns)):
            rows = store.fetch(sid, layer, 0, n, "f32")
            flat = torch.frombuffer(bytearray(rows), dtype=torch.float32)
            sides.append(flat.view(n, h, d).transpose(0, 1).contiguous())
        slots.put((attend_sid, layer), sides[0], sides[1], h, n, d)
    return SimpleString(str(len(layers)))


def attend_info_fields(state: ServerState) -> list[tuple[str, int]]:
    """The four cold-tier fields KV.PREFIX.INFO reports."""
    slots = state.stores.attend
    return [("sdpa_warm", slots.n_warm), ("sdpa_cold", slots.n_cold), ("sdpa_demotions", slots.demotions),
            ("sdpa_rehydrates", slots.rehydrates)]


def info(state: ServerState) -> dict[str, list[tuple[str, object]]]:
    lane = state.binary_lane
    return {"Memory": [("attend_bytes", attend_bytes(state))],
            "Server": [("binary_port", 0 if lane is None else lane.port),
                       ("tls_binary_port", 0 if lane is None else lane.tls_port)]}


_R = frozenset({"readonly"})
_S: frozenset[str] = frozenset()  # derived data, not logged: no "write" flag, so no WAL barrier
COMMANDS: list[CommandSpec] = [
    CommandSpec("ATTEND.PREFIX.STORE", -8, cmd_attend_store, _S, "hold a layer's prefix K/V for queries"),
    CommandSpec("ATTEND.PREFIX.LOOKUP", 3, cmd_attend_lookup, _R, "is a layer warm? (+HIT/+COLD/+MISS)"),
    CommandSpec("ATTEND.PREFIX.QUERY", -7, cmd_attend_query, _R, "attention of Q over a stored prefix"),
    CommandSpec("ATTEND.PREFIX.QUERY_FUSED", -11, cmd_attend_query_fused, _R,
                "prefix + causal suffix attention, merged"),
    CommandSpec("ATTEND.PREFIX.QUERY_SPARSE", -9, cmd_attend_query_sparse, _R,
                "attention over caller-chosen prefix keys"),
    CommandSpec("ATTEND.PREFIX.QUERY_SPARSE_AUTO", -10, cmd_attend_query_sparse_auto, _R,
                "attention over server-chosen prefix blocks"),
    CommandSpec("ATTEND.PREFIX.QUERY_SPARSE_AUTO_FUSED", -13, cmd_attend_query_sparse_auto_fused, _R,
                "sparse prefix + causal suffix attention, merged"),
    CommandSpec("KV.PREFIX.WARM", -4, cmd_attend_kvprefix_warm, _S, "rebuild ATTEND slots from the V-store"),
]
