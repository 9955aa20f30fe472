"""Sequence packing: the packer's layout, the segment mask against loops, and a packed batch's per-token loss, loss and
gradients against the same sequences padded one a row (a forward pass without segment ids)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tunix_lit.data.datasets import pack_sequences, pad_sequences
from tunix_lit.models.transformer import ModelConfig, create_model, segment_mask, segment_positions
from tunix_lit.sft.core import next_token_loss
from tunix_lit.sft.trainer import validate_batch


def mixed(seed, n=9, low=2, high=16, vocab=512):
    r = np.random.default_rng(seed)
    seqs = [r.integers(1, vocab, int(k)) for k in r.integers(low, high + 1, n)]
    masks = [(r.random(len(s)) < 0.8).astype(np.int32) for s in seqs]
    return seqs, masks


def test_the_packer_lays_every_sequence_once_with_its_own_positions_and_targets():
    seqs, masks = mixed(0, n=30)
    p = pack_sequences(seqs, masks, 16, pad_id=0)
    assert p["tokens"].shape[1] == 16 and p["tokens"].shape[0] < len(seqs)
    found = []
    for r in range(p["tokens"].shape[0]):
        ids = p["segment_ids"][r]
        used = ids > 0
        assert not used[np.argmin(used):].any() if not used.all() else True  # padding only at the end
        for s in np.unique(ids[used]):
            where = np.flatnonzero(ids == s)
            assert (np.diff(where) == 1).all()  # a segment is contiguous
            np.testing.assert_array_equal(p["positions"][r, where], np.arange(len(where)))
            found.append((p["tokens"][r, where].tolist(), p["loss_mask"][r, where].tolist()))
        assert (p["tokens"][r, ~used] == 0).all() and (p["loss_mask"][r, ~used] == 0).all()
    want = sorted((s.tolist(), [0] + m[1:].tolist()) for s, m in zip(seqs, masks))
    assert sorted(found) == want
    padded = pad_sequences(seqs, masks, 16)
    assert padded["loss_mask"].sum() == p["loss_mask"].sum()
    with pytest.raises(ValueError, match="sequence 1 has 17 tokens; a row holds 1 to 16"):
        pack_sequences([np.ones(3), np.ones(17)], [np.ones(3), np.ones(17)], 16)
    with pytest.raises(ValueError, match="2 token sequences but 1 loss masks"):
        pack_sequences([np.ones(3), np.ones(3)], [np.ones(3)], 16)


def test_segment_mask_and_positions_against_loops():
    seg = np.array([[1, 1, 2, 2, 2, 3, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1], [1, 2, 3, 4, 5, 0, 0, 0]])
    got, pos = np.asarray(segment_mask(jnp.asarray(seg))), np.asarray(segment_positions(jnp.asarray(seg)))
    for b in range(seg.shape[0]):
        for i in range(seg.shape[1]):
            assert pos[b, i] == (i - min(j for j in range(i + 1) if all(seg[b, k] == seg[b, i] for k in range(j, i + 1))))
            for j in range(seg.shape[1]):
                assert got[b, i, j] == (j <= i and seg[b, i] == seg[b, j] and seg[b, j] > 0), (b, i, j)


def _nll(logits, seq):
    """Per-target NLL of one sequence from its logits rows, in NumPy: -log softmax(logits[t])[seq[t+1]], f64 [n-1]."""
    z = np.asarray(logits, np.float64)[:len(seq) - 1]
    z = z - z.max(-1, keepdims=True)
    return -(z - np.log(np.exp(z).sum(-1, keepdims=True)))[np.arange(len(seq) - 1), seq[1:]]


@pytest.mark.parametrize("preset, layers", [("tiny-qwen3", 1), pytest.param("tiny-gemma3", None, marks=pytest.mark.slow)])
def test_a_packed_batch_has_the_loss_and_gradients_of_the_padded_batch(preset, layers):
    """Gemma's sliding-window layers see a window inside a segment; the padded batch runs without segment ids."""
    cfg = ModelConfig.from_name(preset)
    cfg = cfg.replace(num_layers=layers) if layers else cfg  # one layer: the default run compiles less
    model = create_model(cfg, seed=1)
    seqs, masks = mixed(1, n=6, high=12, vocab=cfg.vocab_size)
    packed, padded = pack_sequences(seqs, masks, 24), pad_sequences(seqs, masks, 12)
    assert packed["tokens"].shape[0] < len(seqs)
    validate_batch(packed)  # the SFT trainer takes it as it is
    # per-token losses: every target of the packed rows against the same sequence in its own padded row
    forward = nnx.jit(lambda m, tokens, seg=None: m(tokens, segment_ids=seg)[0])  # one program a shape, not an op each
    logits = np.asarray(forward(model, jnp.asarray(packed["tokens"]), jnp.asarray(packed["segment_ids"])))
    alone = np.asarray(forward(model, jnp.asarray(padded["tokens"])))  # right padding: a causal query never sees it
    by_tokens = {}
    for r in range(packed["tokens"].shape[0]):
        for s in np.unique(packed["segment_ids"][r][packed["segment_ids"][r] > 0]):
            where = np.flatnonzero(packed["segment_ids"][r] == s)
            by_tokens[tuple(packed["tokens"][r, where])] = logits[r, where]
    for i, seq in enumerate(seqs):
        np.testing.assert_allclose(_nll(by_tokens[tuple(seq)], seq), _nll(alone[i], seq), rtol=1e-4, atol=1e-4)

    # the loss, normalised as if unpacked, and its gradient
    def mean_loss(m, batch):
        out = next_token_loss(m, batch)
        return out.total / out.weight, out.weight

    step = nnx.jit(nnx.value_and_grad(mean_loss, has_aux=True))
    (l_pack, w_pack), g_pack = step(model, packed)
    (l_pad, w_pad), g_pad = step(model, padded)
    assert float(w_pack) == float(w_pad) == sum(int(np.sum(m[1:])) for m in masks)
    np.testing.assert_allclose(float(l_pack), float(l_pad), rtol=1e-5)
    g_pack, g_pad = jax.tree.leaves(g_pack), jax.tree.leaves(g_pad)
    scale = max(float(jnp.abs(g).max()) for g in g_pad)
    for a, b in zip(g_pack, g_pad):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-5 * scale)
