"""Tiny random Hugging Face checkpoints of each family, made with `transformers` (test references only).

Import from a test module (`tests/models` is on the path when pytest collects it; elsewhere add it):

    from hf_fixtures import make_hf_model, padded_batch, hf_logits, our_logits, max_gap

Each builder returns a float32 `transformers` model in eval mode with the eager attention path (no SDPA
differences), weights drawn from `torch.manual_seed(seed)`, and every norm weight perturbed so that zero-init
(Gemma) and one-init (Llama, Qwen) norms are not a no-op that would hide a wrong mapping.
"""
import numpy as np
import torch
import transformers

# Shared tiny shape: D 64, F 128, 4 query heads, 2 key/value heads, head_dim 16, V 256.
TINY = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            vocab_size=256, initializer_range=0.1, max_position_embeddings=128)
SLIDING_WINDOW = 4  # Gemma 3's window in the tiny config; test sequences are longer than this
FAMILIES = ("llama3", "qwen3", "gemma3", "gemma3_multimodal")


def hf_config(family: str, **overrides) -> transformers.PretrainedConfig:
    """A tiny transformers config of one family ('llama3', 'qwen3', 'gemma3', 'gemma3_multimodal')."""
    if family == "llama3":  # Llama 3.1-style rope scaling whose low frequencies really are rescaled at H=16
        kw = dict(TINY, num_hidden_layers=2, tie_word_embeddings=False, rope_theta=500_000.0,
                  rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                    original_max_position_embeddings=16))
        return transformers.LlamaConfig(**{**kw, **overrides})
    if family == "qwen3":  # tied embeddings, as the small Qwen 3 checkpoints are
        kw = dict(TINY, num_hidden_layers=2, tie_word_embeddings=True, rope_theta=1_000_000.0)
        return transformers.Qwen3Config(**{**kw, **overrides})
    if family in ("gemma3", "gemma3_multimodal"):
        # sliding, full, sliding; a query scalar unlike head_dim; linear scaling on the global layer
        kw = dict(TINY, num_hidden_layers=3, sliding_window=SLIDING_WINDOW, sliding_window_pattern=2,
                  query_pre_attn_scalar=24, rope_theta=10_000.0, rope_local_base_freq=1_000.0,
                  rope_scaling=dict(rope_type="linear", factor=2.0), final_logit_softcapping=30.0,
                  attn_logit_softcapping=50.0)
        text = transformers.Gemma3TextConfig(**{**kw, **overrides})
        if family == "gemma3":
            return text
        vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                      image_size=28, patch_size=14)
        return transformers.Gemma3Config(text_config=text.to_dict(), vision_config=vision, mm_tokens_per_image=4)
    raise ValueError(f"unknown family {family!r}; choose one of: {', '.join(FAMILIES)}")


_CLASSES = {"llama3": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM", "gemma3": "Gemma3ForCausalLM",
            "gemma3_multimodal": "Gemma3ForConditionalGeneration"}


def make_hf_model(family: str, seed: int = 0, **overrides) -> torch.nn.Module:
    """A tiny random float32 HF model of `family` (eager attention, eval mode, norms perturbed)."""
    config = hf_config(family, **overrides)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = getattr(transformers, _CLASSES[family])(config).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.5 * torch.randn_like(p))
    return model


def save_hf_checkpoint(family: str, path, seed: int = 0, max_shard_size=None, **overrides) -> torch.nn.Module:
    """Write a tiny random checkpoint of `family` to directory `path` with save_pretrained; the model is returned."""
    model = make_hf_model(family, seed, **overrides)
    kw = {} if max_shard_size is None else dict(max_shard_size=max_shard_size)
    model.save_pretrained(path, **kw)
    return model


def save_word_tokenizer(path, words) -> None:
    """A word-level tokenizer.json (+ tokenizer_config.json) over <pad> <eos> <bos> <unk> and `words`, in `path`."""
    import json

    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {t: i for i, t in enumerate(["<pad>", "<eos>", "<bos>", "<unk>"] + list(words))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<bos>", "eos_token": "<eos>",
                                                            "pad_token": "<pad>", "unk_token": "<unk>"}))


def load_transformers(path) -> torch.nn.Module:
    """`AutoModelForCausalLM.from_pretrained(path)` in float32, eager attention, eval mode."""
    return transformers.AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager",
                                                             dtype=torch.float32).eval()


def padded_batch(vocab: int, lengths=(14, 9, 3), seq_len: int = 14, seed: int = 0):
    """Left-padded token batch: tokens int32 [B, T], mask bool [B, T] (True = real), positions int32 [B, T]."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, vocab, size=(len(lengths), seq_len)).astype(np.int32)
    mask = np.arange(seq_len)[None, :] >= seq_len - np.asarray(lengths)[:, None]
    tokens[~mask] = 0
    positions = np.clip(np.cumsum(mask, axis=1) - 1, 0, None).astype(np.int32)
    return tokens, mask, positions


def hf_logits(model: torch.nn.Module, tokens, mask, positions) -> np.ndarray:
    """float32 [B, T, V] logits of a HF model on a left-padded batch."""
    with torch.no_grad():
        out = model(input_ids=torch.as_tensor(tokens, dtype=torch.long), attention_mask=torch.as_tensor(mask).long(),
                    position_ids=torch.as_tensor(positions, dtype=torch.long))
    return out.logits.float().numpy()


def our_logits(model, tokens, mask, positions) -> np.ndarray:
    """float32 [B, T, V] logits of a tunix_lit Transformer on the same batch (key mask [B, T])."""
    import jax.numpy as jnp

    logits, _ = model(jnp.asarray(tokens), jnp.asarray(positions), None, jnp.asarray(mask))
    return np.asarray(logits)


def max_gap(a: np.ndarray, b: np.ndarray, mask) -> float:
    """Largest |a - b| over real (non-pad) positions."""
    return float(np.abs(a - b)[np.asarray(mask)].max())
