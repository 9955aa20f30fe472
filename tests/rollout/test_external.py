"""vLLM and SGLang-JAX adapters against honest fakes (tests/rollout/fakes/): parity with the actor, and broken syncs caught.

The fakes import nothing from tunix_lit: each holds its own weights under the engine's names and layout (heads
padded / repeated, a separate LM head, bf16 when asked) and runs its own NumPy forward pass, so an adapter that
writes the wrong tensor, the wrong dtype or forgets a cache step gives different log-probs or an error.
"""
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import optax
import pytest
from flax import nnx

from tunix_lit.generate.sampler import Sampler
from tunix_lit.models import tiny
from tunix_lit.models import transformer as tfm
from tunix_lit.rollout import engines
from tunix_lit.rollout import external as ext
from tunix_lit.sft import lora

FAKES = str(Path(__file__).parent / "fakes")
ENGINES = {"vllm": ext.VllmEngine, "sglang_jax": ext.SglangJaxEngine}
TOL = {"float32": 1e-4, "bfloat16": 2e-2}
P, G, TEMP = 16, 8, 0.8  # max prompt length, new tokens, sampling temperature


@pytest.fixture
def fakes(monkeypatch):
    monkeypatch.syspath_prepend(FAKES)


# ---------------------------------------------------------------- actors and the independent recompute

def _batch(tok, n=8, seed=0):
    rng = np.random.default_rng(seed)
    texts = [f"{a}+{b}={a + b}" for a, b in rng.integers(0, 50, (n, 2))]
    ids = [tok.encode(t) + [tok.eos_id] for t in texts]
    width = max(map(len, ids))
    return np.asarray([i + [tok.pad_id] * (width - len(i)) for i in ids], np.int32)


def _train(model, tok, steps=3, wrt=nnx.Param):
    """A few Adam steps of next-token cross-entropy: the actor moves away from what the engine was built with."""
    opt = nnx.Optimizer(model, optax.adam(3e-2), wrt=wrt)
    batch = jnp.asarray(_batch(tok))

    def loss_fn(m):
        logits, _ = m(batch[:, :-1])
        logp = jax.nn.log_softmax(logits)
        nll = -jnp.take_along_axis(logp, batch[:, 1:, None], -1)[..., 0]
        mask = batch[:, 1:] != tok.pad_id
        return (nll * mask).sum() / mask.sum()

    @nnx.jit
    def step(m, o):
        grads = nnx.grad(loss_fn, argnums=nnx.DiffState(0, wrt))(m)
        o.update(m, grads)

    for _ in range(steps):
        step(model, opt)
    return model


def _snapshot(model):
    graphdef, state = nnx.split(model)
    return nnx.merge(graphdef, jax.tree.map(jnp.copy, state))


@pytest.fixture(scope="module")
def actors():
    """mode -> (actor before training, actor after 3 optimizer steps, tokenizer); tiny Qwen 3 default."""
    model, tok = tiny.load()
    full0 = _snapshot(model)
    full1 = _train(_snapshot(model), tok)
    lora0 = lora.apply_lora(_snapshot(model), rank=4, alpha=8.0)
    lora1 = _train(_snapshot(lora0), tok, wrt=nnx.LoRAParam)
    return {"full": (full0, full1, tok), "lora": (lora0, lora1, tok)}


def _rounded(actor):
    """The actor with LoRA merged and every weight rounded to bf16 (kept in f32 storage)."""
    model = lora.merge_lora(actor) if getattr(actor, "lora_config", None) else actor
    graphdef, state = nnx.split(model)
    return nnx.merge(graphdef, jax.tree.map(lambda x: x.astype(jnp.bfloat16).astype(x.dtype), state))


def _prompts(tok):
    return [np.asarray(tok.encode(t), np.int32) for t in ("12+34=", "7+8=", "40+41=", "3+9=")]


@nnx.jit
def _logits(model, seq):
    return model(seq)[0]


def actor_logprobs(model, prompts, completions, temperature):
    """log softmax(logits / T) of each completion id, recomputed by the actor on prompt + completion (right-padded)."""
    seqs = [np.concatenate([p, c]) for p, c in zip(prompts, completions)]
    batch = np.zeros((len(seqs), P + G), np.int32)  # causal: padding on the right changes no earlier logit
    for row, s in enumerate(seqs):
        batch[row, :len(s)] = s
    logp = np.asarray(jax.nn.log_softmax(_logits(model, jnp.asarray(batch)) / temperature))
    return [logp[row, len(p) - 1 + np.arange(len(c)), c] for row, (p, c) in enumerate(zip(prompts, completions))]


def gap(model, prompts, out, temperature=TEMP):
    ref = actor_logprobs(model, prompts, out.tokens, temperature)
    return max(float(np.abs(a - b).max()) for a, b in zip(out.logprobs, ref))


def _round_trip(engine, actor0, actor1, tok, **gen):
    """Generate (filling any prefix cache), sync the trained actor, generate again: what a rollout after a step sees."""
    prompts = _prompts(tok)
    engine.generate(prompts, G, temperature=TEMP, seed=1)
    engine.sync_weights(actor1)
    return prompts, engine.generate(prompts, G, temperature=TEMP, seed=2, **gen)


# ---------------------------------------------------------------- missing packages

def test_missing_packages_name_the_package_and_pip_command(monkeypatch):
    """With the real packages absent (the fakes off the path), choosing either engine fails before any model exists."""
    for name in [m for m in sys.modules if m.split(".")[0] in ("vllm", "sgl_jax", "_fake_decoder")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != FAKES])
    for name, cls in ENGINES.items():
        package, pip, _ = ext.PACKAGES[name]
        with pytest.raises(engines.EngineUnavailable, match=package) as info:
            cls.check_available()
        assert pip in str(info.value) and "Colab" in str(info.value)
        with pytest.raises(engines.EngineUnavailable, match=pip):
            engines.check_engine(name)


# ---------------------------------------------------------------- mapping tables and layouts

def flat(state) -> dict:
    """Dotted name -> array of a nested nnx.State (the engines' real structure)."""
    return {".".join(map(str, p)): v.get_value() for p, v in nnx.to_flat_state(state)}


@pytest.mark.parametrize("engine", ["vllm", "sglang_jax"])
def test_gemma3_is_refused_before_the_engine_starts(fakes, engine):
    """Neither engine has a JAX Gemma 3 model at the pinned versions: refused by name, before any engine is built."""
    model = tfm.create_model(tfm.ModelConfig.from_name("tiny-gemma3", vocab_size=19))
    _, tok = tiny.load()
    with pytest.raises(ValueError, match="'gemma3' has no .* JAX weight state"):
        ENGINES[engine].build(model, tok, max_prompt_length=P, max_new_tokens=G)


@pytest.mark.parametrize("family", ["qwen3", "llama3"])
@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("engine", ["vllm", "sglang_jax"])
def test_mapping_covers_every_parameter_and_engine_tensor(fakes, family, tied, engine):
    """A first sync of a random tiny model of each family fills every engine tensor; bytes as sync_bytes says."""
    model = tfm.create_model(tfm.ModelConfig.from_name(f"tiny-{family}", vocab_size=19, tie_embeddings=tied))
    _, tok = tiny.load()
    kw = {"tensor_parallel_size": 8} if engine == "vllm" else {"tp_size": 8}
    eng = ENGINES[engine].build(model, tok, max_prompt_length=P, max_new_tokens=G, dtype="bfloat16", **kw)
    report = eng.sync_weights(model)
    assert report.bytes_moved == eng.sync_bytes(model) > 0
    assert report.tensors == len(eng._targets())
    assert all(np.dtype(d) == np.dtype(ml_dtypes.bfloat16) for _, d in eng._targets().values())
    heads = [n for n in eng._targets() if "lm_head" in n]
    assert (heads == []) == tied  # tied: the engine reads the embedding, and holds no head to write


def test_vllm_layout_pads_heads_and_repeats_kv_heads(fakes, actors):
    """Engine q/k tensors hold our heads in their first H lanes (zeros after), each KV head repeated tp/K times."""
    actor, _, tok = actors["full"]
    eng = ext.VllmEngine.build(actor, tok, max_prompt_length=P, max_new_tokens=G, tensor_parallel_size=4)
    ours = np.asarray(actor.layers[1].attn.k_proj.kernel[...])  # [D, K=2, H=32]
    theirs = np.asarray(flat(eng.runner.state)["model.layers.1.self_attn.k_proj.weight"])  # [D, 4, 128]
    assert theirs.shape == (ours.shape[0], 4, 128)
    np.testing.assert_array_equal(theirs[:, [0, 1], :32], ours[:, [0, 0]])
    np.testing.assert_array_equal(theirs[:, [2, 3], :32], ours[:, [1, 1]])
    assert not theirs[..., 32:].any()
    assert "lm_head.weight" not in flat(eng.runner.state)  # tied: tpu-inference's logits use the embedding


# ---------------------------------------------------------------- parity after optimizer steps

@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("mode", ["full", "lora"])
@pytest.mark.parametrize("engine", ["vllm", "sglang_jax"])
def test_logprobs_match_actor_after_optimizer_steps(fakes, actors, engine, mode, dtype):
    actor0, actor1, tok = actors[mode]
    eng = ENGINES[engine].build(actor0, tok, max_prompt_length=P, max_new_tokens=G, dtype=dtype)
    prompts, out = _round_trip(eng, actor0, actor1, tok)
    assert sum(len(t) for t in out.tokens) >= 8
    # bf16: the actor's recompute with its weights in bf16 (what the engine was sent); the f32 actor differs by the
    # rounding itself, 0.005-0.05 on this sharp tiny model, which is bf16's gap, not the sync's
    reference = actor1 if dtype == "float32" else _rounded(actor1)
    assert gap(reference, prompts, out) <= TOL[dtype]
    assert gap(actor0, prompts, out) > TOL[dtype]  # the sync moved something the recompute can see


@pytest.fixture(scope="module")
def ours_greedy(actors):
    """Our Sampler's greedy completions after the optimizer steps, per mode (compiled once)."""
    out = {}
    for mode, (_, actor1, tok) in actors.items():
        out[mode] = Sampler(actor1, tok, max_len=P + G).generate(_prompts(tok), G, temperature=0.0, max_prompt_length=P)
    return out


@pytest.mark.parametrize("mode", ["full", "lora"])
@pytest.mark.parametrize("engine", ["vllm", "sglang_jax"])
def test_greedy_completions_equal_our_sampler(fakes, actors, ours_greedy, engine, mode):
    actor0, actor1, tok = actors[mode]
    eng = ENGINES[engine].build(actor0, tok, max_prompt_length=P, max_new_tokens=G)
    prompts, _ = _round_trip(eng, actor0, actor1, tok)
    greedy, ours = eng.generate(prompts, G, temperature=0.0), ours_greedy[mode]
    assert [t.tolist() for t in greedy.tokens] == [t.tolist() for t in ours.tokens]
    assert greedy.text == ours.text and (greedy.finished == ours.finished).all()


@pytest.fixture(scope="module")
def llama():
    """Two random tiny Llama 3 models (untied head, llama3 RoPE scaling), the second playing the updated actor."""
    cfg = tfm.ModelConfig.from_name("tiny-llama3", vocab_size=19, tie_embeddings=False, num_layers=3)
    a, b = tfm.create_model(cfg, seed=3), tfm.create_model(cfg, seed=4)
    _, tok = tiny.load()
    return a, b, tok, Sampler(b, tok, max_len=P + G).generate(_prompts(tok), G, temperature=0.0, max_prompt_length=P,
                                                               stop_tokens=())


@pytest.mark.parametrize("engine", ["vllm", "sglang_jax"])
def test_llama3_untied_parity(fakes, llama, engine):
    """Llama 3: after a sync from one model to another, sampled log-probs and greedy tokens match the new one."""
    actor0, actor1, tok, ours = llama
    eng = ENGINES[engine].build(actor0, tok, max_prompt_length=P, max_new_tokens=G)
    prompts, out = _round_trip(eng, actor0, actor1, tok, stop_tokens=())
    assert gap(actor1, prompts, out) <= 1e-4 < gap(actor0, prompts, out)
    greedy = eng.generate(prompts, G, temperature=0.0, stop_tokens=())
    assert [t.tolist() for t in greedy.tokens] == [t.tolist() for t in ours.tokens]


@pytest.mark.parametrize("engine", ["vllm", "sglang_jax"])
def test_same_seed_same_completions_and_rows_differ(fakes, actors, engine):
    actor, _, tok = actors["full"]
    eng = ENGINES[engine].build(actor, tok, max_prompt_length=P, max_new_tokens=G)
    group = [_prompts(tok)[0]] * 6
    a, b = (eng.generate(group, G, temperature=1.0, seed=5) for _ in range(2))
    assert [t.tolist() for t in a.tokens] == [t.tolist() for t in b.tokens]
    assert len({tuple(t.tolist()) for t in a.tokens}) > 1  # a group of one prompt is not six copies


# ---------------------------------------------------------------- sabotage: each broken sync must be caught

def _base_params(actor):
    """Our parameters without the LoRA adapters: what a sync that drops the LoRA mapping would send."""
    return {".".join(map(str, p)): v.get_value() for p, v in
            nnx.to_flat_state(nnx.state(actor, nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam))))}


def _swap(mapping, a, b):
    ra, rb = (next(r for r in mapping.rules if r.ours == t) for t in (a, b))
    return mapping.replace_rule(a, engine=rb.engine).replace_rule(b, engine=ra.engine)


def _sabotage(eng, kind):
    noop = lambda *a, **k: None
    if kind == "skip_prefix_reset":
        setattr(eng, "_reset_prefix_cache" if eng.name == "vllm" else "_flush_cache", noop)
    elif kind == "stale_leaves":
        eng._refresh_leaves = noop
    elif kind == "drop_lora":
        eng._source_params = _base_params
    elif kind == "wrong_dtype":  # the engine was compiled for one dtype, receives another
        write = eng._write
        eng._write = lambda t: write({k: v.astype(np.float16) for k, v in t.items()})
    elif kind == "bf16_round_trip":  # right storage dtype, precision lost on the way
        write = eng._write
        eng._write = lambda t: write({k: v.astype(ml_dtypes.bfloat16).astype(v.dtype) for k, v in t.items()})
    elif kind == "wrong_name":
        eng.mapping = _swap(eng.mapping, "layers.{i}.mlp.gate_proj.kernel", "layers.{i}.mlp.up_proj.kernel")
    elif kind == "skip_kv_reinit":
        rpc = eng.handle.collective_rpc
        eng.handle.collective_rpc = lambda m, *a, **k: None if m == "reinitialize_kv_cache" else rpc(m, *a, **k)
    else:
        raise ValueError(kind)


SABOTAGE = [(e, k) for e in ENGINES for k in ("skip_prefix_reset", "stale_leaves", "drop_lora", "wrong_dtype",
                                              "bf16_round_trip", "wrong_name")] + [("vllm", "skip_kv_reinit")]


@pytest.mark.parametrize("engine,kind", SABOTAGE)
def test_broken_sync_is_caught(fakes, actors, engine, kind):
    """Negative control: the same round trip as the parity test, with one step of the sync broken on purpose."""
    actor0, actor1, tok = actors["lora" if kind == "drop_lora" else "full"]
    kw = {"disable_radix_cache": False} if engine == "sglang_jax" else {}
    eng = ENGINES[engine].build(actor0, tok, max_prompt_length=P, max_new_tokens=G, **kw)
    _sabotage(eng, kind)
    try:
        prompts, out = _round_trip(eng, actor0, actor1, tok)
    except (TypeError, RuntimeError, ValueError) as e:  # the engine refused: caught
        assert kind in ("wrong_dtype", "skip_kv_reinit"), f"{kind} raised unexpectedly: {e}"
        return
    assert gap(actor1, prompts, out) > TOL["float32"], f"sabotage {kind!r} went unnoticed"


def test_prefix_cache_is_used_when_weights_do_not_change(fakes, actors):
    """The prefix cache is real: with unchanged weights a cached prompt gives the same log-probs as a fresh one."""
    actor, _, tok = actors["full"]
    eng = ext.VllmEngine.build(actor, tok, max_prompt_length=P, max_new_tokens=G)
    prompts = _prompts(tok)
    first = eng.generate(prompts, G, temperature=TEMP, seed=3)
    assert len(eng.handle.llm_engine.prefix_cache) == len(prompts)
    again = eng.generate(prompts, G, temperature=TEMP, seed=3)
    for a, b in zip(first.logprobs, again.logprobs):
        np.testing.assert_allclose(a, b, atol=1e-6)


# ---------------------------------------------------------------- bad mappings fail at the first sync

@pytest.mark.parametrize("engine", ["vllm", "sglang_jax"])
def test_unmapped_parameter_fails_first_sync_naming_it(fakes, actors, engine):
    actor, _, tok = actors["full"]
    mapping = ext.vllm_mapping if engine == "vllm" else ext.sglang_jax_mapping
    broken = mapping(actor.config).replace_rule("layers.{i}.mlp.down_proj.kernel", drop=True)
    with pytest.raises(ValueError, match=r"layers\.0\.mlp\.down_proj\.kernel"):
        ENGINES[engine].build(actor, tok, max_prompt_length=P, max_new_tokens=G, mapping=broken)


def test_shape_mismatch_names_both_shapes(fakes, actors):
    actor, _, tok = actors["full"]
    broken = ext.vllm_mapping(actor.config).replace_rule("layers.{i}.attn.q_proj.kernel", transform="copy")
    with pytest.raises(ValueError, match=r"\(128, 4, 32\).*\(128, 4, 128\)"):
        ext.VllmEngine.build(actor, tok, max_prompt_length=P, max_new_tokens=G, mapping=broken)


def test_engine_tensor_left_empty_is_an_error(fakes, actors):
    """A rule sent to a name the engine does not hold is refused, naming it."""
    actor, _, tok = actors["full"]
    broken = ext.sglang_jax_mapping(actor.config).replace_rule("final_norm.scale", engine="model.final_norm.scale")
    with pytest.raises(ValueError, match="model.final_norm.scale"):
        ext.SglangJaxEngine.build(actor, tok, max_prompt_length=P, max_new_tokens=G, mapping=broken)


def test_engines_follow_the_protocol(fakes, actors):
    actor, _, tok = actors["full"]
    for cls in ENGINES.values():
        eng = cls.build(actor, tok, max_prompt_length=P, max_new_tokens=G)
        assert isinstance(eng, engines.RolloutEngine)
        assert eng.returns_logprobs and eng.pad_id == tok.pad_id and tok.eos_id in eng.eos_ids
        assert eng.name in eng.describe()


def test_sync_places_tensors_on_the_engine_mesh(fakes, actors):
    """When the engine's runner holds a JAX mesh, each tensor lands on it split as its mapping rule says."""
    actor0, actor1, tok = actors["full"]
    eng = ext.VllmEngine.build(actor0, tok, max_prompt_length=P, max_new_tokens=G, tensor_parallel_size=4)
    assert eng.runner.mesh.shape == {"data": 1, "model": 4}  # the fake runner's mesh, as tpu-inference's
    prompts, out = _round_trip(eng, actor0, actor1, tok)
    q = flat(eng.runner.state)["model.layers.0.self_attn.q_proj.weight"]
    assert q.sharding.spec == jax.sharding.PartitionSpec(None, "model", None)
    assert len(q.sharding.device_set) == 4 and q.addressable_shards[0].data.shape == (q.shape[0], 1, q.shape[2])
    assert flat(eng.runner.state)["model.norm.weight"].sharding.is_fully_replicated
    assert gap(actor1, prompts, out) <= TOL["float32"]


@pytest.mark.parametrize("engine", ["vllm", "sglang_jax"])
def test_prompt_longer_than_the_buffer_is_refused(fakes, actors, engine):
    actor, _, tok = actors["full"]
    eng = ENGINES[engine].build(actor, tok, max_prompt_length=4, max_new_tokens=G)
    with pytest.raises(ValueError, match="max_prompt_length=4"):
        eng.generate([np.arange(1, 7, dtype=np.int32)], G, temperature=0.0)


def test_vllm_without_a_jax_weight_state_says_which_vllm_it_needs(fakes, actors):
    """A PyTorch (GPU) vLLM runner has no `state`: the sync names the JAX backend package instead of failing deep."""
    actor, _, tok = actors["full"]
    eng = ext.VllmEngine.build(actor, tok, max_prompt_length=P, max_new_tokens=G)
    del eng.runner.state
    with pytest.raises(RuntimeError, match="vllm-tpu"):
        eng.sync_weights(actor)
