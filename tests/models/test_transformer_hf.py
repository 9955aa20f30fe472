"""The decoder against `transformers` with real weight layouts: RoPE frequencies per layer, and cached decoding."""
import numpy as np
import pytest

from hf_fixtures import hf_logits, make_hf_model, max_gap, padded_batch, save_hf_checkpoint
from tunix_lit.models.loader import config_from_hf, load_hf
from tunix_lit.models.transformer import rope_frequencies


def _hf_inv_freq(hf_model, layer_type: str) -> np.ndarray:
    rotary = hf_model.model.rotary_emb
    name = "inv_freq" if hasattr(rotary, "inv_freq") else f"{layer_type}_inv_freq"
    return getattr(rotary, name).numpy()


@pytest.mark.parametrize("family", ["llama3", "qwen3", "gemma3"])
def test_rope_frequencies_match_transformers_for_every_layer(family):
    """Each layer's (base, scaling) from the mapped config gives HF's inv_freq for that layer type."""
    hf_model = make_hf_model(family)
    cfg = config_from_hf(hf_model.config.to_dict())
    for i in range(cfg.num_layers):
        local = cfg.layer_type(i) == "local"
        theta = (cfg.local_rope_theta or cfg.rope_theta) if local else cfg.rope_theta
        ours = rope_frequencies(cfg.head_dim, theta, None if local else cfg.rope_scaling)
        ref = _hf_inv_freq(hf_model, "sliding_attention" if local else "full_attention")
        np.testing.assert_allclose(ours, ref, rtol=1e-6)


@pytest.mark.parametrize("family", ["llama3", "qwen3", "gemma3"])
def test_prefill_then_decode_matches_transformers_full_pass(family, tmp_path):
    """Left-padded prefill of 5 slots, then one token at a time through the KV cache, equals HF's full pass."""
    hf_model = save_hf_checkpoint(family, tmp_path)
    model = load_hf(tmp_path)
    tokens, mask, positions = padded_batch(256, lengths=(12, 7, 3), seq_len=12)
    B, T = tokens.shape
    cache = model.init_cache(B, 16)
    key_mask = np.zeros((B, 16), bool)
    key_mask[:, :T] = mask
    out, cache = model(tokens[:, :5], positions[:, :5], cache, key_mask)
    outs = [np.asarray(out)]
    for t in range(5, T):
        out, cache = model(tokens[:, t:t + 1], positions[:, t:t + 1], cache, key_mask)
        outs.append(np.asarray(out))
    assert max_gap(np.concatenate(outs, axis=1), hf_logits(hf_model, tokens, mask, positions), mask) <= 1e-4
