"""The attention kernels (in-process) against an fp64 reference: dense (flash op and matmul),
causal masks, the LSE merge, and the sparse gathers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pion.server.attention import prefix_ops
from pion.server.attention.dense import MASKED, attend, causal_mask, flash_available
from pion.server.attention.merge import merge
from support.attention_ref import causal_allowed, close_to_reference, reference

IMPLS = ["flash", "matmul"]


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(np.float32)


def test_the_flash_op_exists_in_this_torch() -> None:
    assert flash_available() is True


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("h_q,h_kv,m,n", [(4, 4, 1, 37), (8, 2, 5, 64), (6, 3, 16, 200)])
def test_dense_attention_matches_fp64_with_its_lse(impl: str, h_q: int, h_kv: int, m: int, n: int) -> None:
    q, k, v = rand(h_q, m, 32), rand(h_kv, n, 32, seed=1), rand(h_kv, n, 32, seed=2)
    out, lse = attend(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), 32 ** -0.5, impl=impl)
    want_out, want_lse = reference(q, k, v)
    assert close_to_reference(out.numpy(), want_out)[0] == True
    assert float(np.abs(lse.numpy() - want_lse).max()) < 1e-5


@pytest.mark.parametrize("impl", IMPLS)
def test_zero_keys_give_zero_output_and_minus_infinite_lse(impl: str) -> None:
    q = torch.ones(2, 3, 8)
    out, lse = attend(q, torch.zeros(2, 0, 8), torch.zeros(2, 0, 8), 1.0, impl=impl)
    assert out.abs().sum().item() == 0.0
    assert lse.tolist() == [[float("-inf")] * 3] * 2


@pytest.mark.parametrize("impl", IMPLS)
def test_a_fully_masked_row_gives_zero_and_minus_infinite_lse(impl: str) -> None:
    q, k, v = (torch.from_numpy(rand(2, 2, 8, seed=s)) for s in range(3))
    mask = torch.zeros(1, 2, 2)
    mask[0, 0, :] = MASKED
    out, lse = attend(q, k, v, 8 ** -0.5, mask, impl=impl)
    assert out[:, 0].abs().sum().item() == 0.0
    assert lse[:, 0].tolist() == [float("-inf"), float("-inf")]
    want_out, _ = reference(q.numpy(), k.numpy(), v.numpy())
    assert float(np.abs(out[:, 1].numpy() - want_out[:, 1]).max()) < 1e-5


def test_causal_mask_is_bottom_right_aligned() -> None:
    mask = causal_mask(2, 4)
    assert (mask[0] == 0).tolist() == [[True, True, True, False], [True, True, True, True]]


@pytest.mark.parametrize("m,s", [(1, 1), (3, 3), (4, 9)])
def test_fused_prefix_and_causal_suffix_equal_one_dense_attention(m: int, s: int) -> None:
    p, d = 50, 16
    q, k, v = rand(4, m, d), rand(2, p, d, seed=1), rand(2, p, d, seed=2)
    ks, vs = rand(2, s, d, seed=3), rand(2, s, d, seed=4)
    out, _ = prefix_ops.fused(*(torch.from_numpy(x) for x in (k, v, q, ks, vs)))
    want, _ = reference(q, np.concatenate([k, ks], 1), np.concatenate([v, vs], 1), causal_allowed(m, p, s))
    assert close_to_reference(out.numpy(), want)[0] == True


def test_merge_of_two_halves_equals_attention_over_both() -> None:
    q, k, v = rand(3, 4, 8), rand(3, 30, 8, seed=1), rand(3, 30, 8, seed=2)
    t = [torch.from_numpy(x) for x in (q, k, v)]
    a = attend(t[0], t[1][:, :12], t[2][:, :12], 8 ** -0.5)
    b = attend(t[0], t[1][:, 12:], t[2][:, 12:], 8 ** -0.5)
    out, lse = merge(a[0], a[1], b[0], b[1])
    want_out, want_lse = reference(q, k, v)
    assert close_to_reference(out.numpy(), want_out)[0] == True
    assert float(np.abs(lse.numpy() - want_lse).max()) < 1e-5


def test_fa_window_attends_only_the_last_w_prefix_positions() -> None:
    q, k, v = rand(2, 3, 8), rand(2, 40, 8, seed=1), rand(2, 40, 8, seed=2)
    out, _ = prefix_ops.dense(torch.from_numpy(k), torch.from_numpy(v), torch.from_numpy(q), window=10)
    want, _ = reference(q, k[:, 30:], v[:, 30:])
    assert close_to_reference(out.numpy(), want)[0] == True


def test_an_explicit_head_map_routes_each_query_head_to_its_kv_head() -> None:
    q, k, v = rand(4, 2, 8), rand(2, 20, 8, seed=1), rand(2, 20, 8, seed=2)
    head_map = [1, 0, 0, 1]
    out, _ = prefix_ops.dense(torch.from_numpy(k), torch.from_numpy(v), torch.from_numpy(q),
                              torch.tensor(head_map))
    want, _ = reference(q, k, v, head_map=head_map)
    assert close_to_reference(out.numpy(), want)[0] == True


@pytest.mark.parametrize("n", [64, 100])
def test_sparse_auto_with_every_block_selected_equals_dense(n: int) -> None:
    q, k, v = rand(4, 3, 16), rand(2, n, 16, seed=1), rand(2, n, 16, seed=2)
    t = [torch.from_numpy(x) for x in (k, v, q)]
    out, lse = prefix_ops.sparse_auto(*t, block=16, k_top=64)
    want_out, want_lse = reference(q, k, v)
    assert close_to_reference(out.numpy(), want_out)[0] == True
    assert float(np.abs(lse.numpy() - want_lse).max()) < 1e-5


def test_sparse_auto_attends_the_first_last_and_best_scoring_blocks() -> None:
    d, block = 8, 4
    k = np.zeros((1, 32, d), dtype=np.float32)
    k[0, 12:16, 0] = 5.0  # block 3 stands out for a query along axis 0
    v = rand(1, 32, d, seed=2)
    q = np.zeros((1, 1, d), dtype=np.float32)
    q[0, 0, 0] = 1.0
    out, _ = prefix_ops.sparse_auto(torch.from_numpy(k), torch.from_numpy(v), torch.from_numpy(q), block, 1)
    allowed = np.zeros((1, 1, 32), dtype=bool)
    allowed[0, 0, [*range(0, 4), *range(12, 16), *range(28, 32)]] = True
    want, _ = reference(q, k, v, allowed)
    assert close_to_reference(out.numpy(), want)[0] == True


def test_caller_sparse_indices_match_attention_over_those_keys() -> None:
    q, k, v = rand(2, 1, 8), rand(2, 30, 8, seed=1), rand(2, 30, 8, seed=2)
    indices = torch.tensor([[3, 7, 9, 0], [29, 1, 0, 0]])
    counts = torch.tensor([3, 2])
    out, _ = prefix_ops.sparse(torch.from_numpy(k), torch.from_numpy(v), torch.from_numpy(q), indices, counts)
    allowed = np.zeros((2, 1, 30), dtype=bool)
    allowed[0, 0, [3, 7, 9]] = True
    allowed[1, 0, [29, 1]] = True
    want, _ = reference(q, k, v, allowed)
    assert close_to_reference(out.numpy(), want)[0] == True


def test_top_k_keeps_the_highest_scoring_keys() -> None:
    q, k, v = rand(2, 2, 8), rand(2, 30, 8, seed=1), rand(2, 30, 8, seed=2)
    out, _ = prefix_ops.dense(torch.from_numpy(k), torch.from_numpy(v), torch.from_numpy(q), top_k=5)
    scores = np.einsum("hmd,hnd->hmn", q.astype(np.float64), k.astype(np.float64))
    allowed = scores >= np.sort(scores, axis=-1)[..., -5:-4]
    want, _ = reference(q, k, v, allowed)
    assert close_to_reference(out.numpy(), want)[0] == True
