"""benchmarks/limits.py's formulas against independent counts: the model's own parameters and XLA's FLOP count."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from benchmark_scripts import load_benchmark
from flax import nnx

ARGV = ["--num-layers", "2", "--embed-dim", "64", "--hidden-dim", "128", "--num-heads", "4", "--num-kv-heads", "2",
        "--head-dim", "16", "--vocab-size", "512", "--tied-embedding", "1", "--dtype", "float32",
        "--batch", "2", "--seq-len", "32"]


@pytest.fixture(scope="module")
def limits():
    return load_benchmark("limits")


@pytest.fixture(scope="module")
def model():
    from tunix_lit.models.transformer import ModelConfig, create_model

    cfg = ModelConfig.from_name("tiny-qwen3", vocab_size=512, embed_dim=64, hidden_dim=128, num_layers=2, num_heads=4,
                                num_kv_heads=2, head_dim=16, tie_embeddings=True)
    return create_model(cfg, seed=0)


def test_the_parameter_count_is_the_models_own(limits, model):
    s = limits.shape_of(ARGV)
    counted = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    assert limits.all_params(s) == counted


def test_forward_flops_match_xlas_count_of_the_products(limits, model):
    s = limits.shape_of(ARGV)
    tokens = jnp.zeros((s["batch"], s["seq_len"]), jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(s["seq_len"]), tokens.shape)
    graph, state = nnx.split(model)

    def forward(state, tokens, positions):
        return nnx.merge(graph, state)(tokens, positions, None, None)[0]

    xla = jax.jit(forward).lower(state, tokens, positions).compile().cost_analysis()
    xla = xla[0] if isinstance(xla, (list, tuple)) else xla
    ours = limits.forward_flops(s, s["batch"], s["seq_len"])
    # XLA also counts the elementwise work (norms, softmax, activations, RoPE) that the formula leaves out on
    # purpose: the products are most of it, and the formula must neither exceed XLA's count nor fall far short
    assert ours <= xla["flops"] <= 1.3 * ours, (ours, xla["flops"])


def test_a_lora_step_counts_two_passes_and_the_adapters(limits):
    s = limits.shape_of(ARGV + ["--lora-rank", "8"])
    fwd = limits.forward_flops(s, 2, 32)
    assert limits.train_flops(s, 2, 32) == pytest.approx(2 * fwd + 2 * limits.lora_params(s) * 64)
    full = limits.shape_of(ARGV)
    assert limits.train_flops(full, 2, 32) == pytest.approx(3 * limits.forward_flops(full, 2, 32))
    # q: 64->64 and o: 64->64, k and v: 64->32, gate/up: 64->128, down: 128->64; two layers, rank 8
    assert limits.lora_params(s) == 2 * 8 * ((64 + 64) * 2 + (64 + 32) * 2 + 3 * (64 + 128))


def test_decode_bytes_sum_the_weights_each_step_and_the_filled_slots(limits):
    s = limits.shape_of(ARGV)
    rows, prompt, gen = 3, 5, 4
    weights = limits.all_params(s) * 4
    slot = 2 * 2 * 2 * 16 * 4  # K and V, 2 layers, 2 KV heads, head_dim 16, float32
    by_hand = sum(weights + rows * (prompt + i) * slot for i in range(gen))
    assert limits.decode_bytes(s, rows, prompt, gen) == by_hand
    assert limits.roofline_fraction(819e9, 2.0) == 0.5 and limits.mfu(197e12, 4.0) == 0.25
    assert limits.mfu(1.0, 0) is None
