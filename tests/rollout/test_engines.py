"""The rollout-engine interface (chapter 20b) and the vanilla engine (40): the registry's errors, the vanilla engine against references, user engines."""
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tunix_lit.models import tiny
from tunix_lit.rl.cluster import RLCluster, RolloutConfig
from tunix_lit.rollout import engines

PROMPTS = ["12+7=", "40+41=", "3+5=", "99+9="]


@pytest.fixture(scope="module")
def tiny_model():
    return tiny.load()


def ids(tok, prompts=PROMPTS):
    return [np.asarray(tok.encode(p), np.int32) for p in prompts]


@nnx.jit
def _full_logits(model, seq):
    return model(seq)[0][0]


def numpy_logprobs(model, prompt, completion, temperature):
    """log softmax(logits / T) at each completion token from one full forward pass, in NumPy float64."""
    ids = list(prompt) + list(completion)
    # right-padded to one length, so the forward compiles once per model: a causal model's logits at the real
    # slots never see the padding after them
    seq = jnp.asarray([ids + [0] * (32 - len(ids))], jnp.int32)
    z = np.asarray(_full_logits(model, seq), np.float64)[:len(ids)] / temperature
    z = z - z.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    rows = np.arange(len(prompt) - 1, len(prompt) + len(completion) - 1)
    return logp[rows, np.asarray(completion)]


def test_unknown_engine_name_lists_the_valid_names():
    for call in (lambda: engines.check_engine("vlm"), lambda: RolloutConfig(engine="vlm")):
        with pytest.raises(ValueError, match="unknown rollout engine 'vlm'; choose one of: vanilla, hf, vllm, sglang_jax"):
            call()


def test_a_known_engine_nobody_registered_names_the_module_that_registers_it(monkeypatch):
    from tunix_lit.rollout import base

    monkeypatch.delitem(base.ENGINES, "hf")
    with pytest.raises(ValueError, match=r"'hf' is not registered: tunix_lit.rollout.sync \(chapter 41\) registers it"):
        engines.check_engine("hf")
    assert base.engine_names()[:4] == ["vanilla", "hf", "vllm", "sglang_jax"]  # still listed: the book knows it


def test_a_registered_user_engine_is_found_by_name_and_listed(monkeypatch):
    from tunix_lit.rollout import base

    class Mine:
        @staticmethod
        def check_available():
            pass

    monkeypatch.setitem(base.ENGINES, "mine", Mine)
    assert engines.check_engine("mine") is Mine and base.engine_names()[-1] == "mine"
    with pytest.raises(ValueError, match="choose one of: vanilla, hf, vllm, sglang_jax, mine"):
        engines.check_engine("yours")
    with pytest.raises(TypeError, match="takes an engine class, got Mine"):
        base.register_engine("mine2", Mine())
    with pytest.raises(ValueError, match="non-empty string"):
        base.register_engine("", Mine)


def test_importing_the_cluster_alone_registers_every_engine_of_the_book():
    """The cluster (chapter 21) imports only the interface (20b); the package's init loads the engines (40-42)."""
    code = ("import tunix_lit.rl.cluster as c, tunix_lit.rollout.base as b; "
            "print(' '.join(f'{k}={v.__module__}.{v.__name__}' for k, v in b.ENGINES.items()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == ["vanilla=tunix_lit.rollout.engines.VanillaEngine", "hf=tunix_lit.rollout.sync.HfEngine",
                                  "vllm=tunix_lit.rollout.external.VllmEngine",
                                  "sglang_jax=tunix_lit.rollout.external.SglangJaxEngine"], out.stderr[-2000:]


def test_the_vanilla_engines_lora_merge_is_chapter_41s():
    from tunix_lit.rollout import sync

    assert engines.VanillaEngine.lora_merger() is sync.merged_decoder


def test_an_object_that_is_not_an_engine_says_what_it_lacks():
    with pytest.raises(TypeError, match=r"lacks \['name', 'pad_id'"):
        RolloutConfig(engine=object())


def test_missing_torch_fails_at_config_time_naming_the_extra(monkeypatch):
    """With torch unimportable, choosing hf fails in RolloutConfig, before any model is built."""
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(engines.EngineUnavailable, match=r'pip install "tunix-lit\[hf\]"'):
        RolloutConfig(engine="hf")
    assert issubclass(engines.EngineUnavailable, ImportError)


def test_importing_the_rollout_layer_imports_no_torch():
    code = ("import sys, tunix_lit.rollout.engines, tunix_lit.rollout.sync, tunix_lit.rl.cluster; "
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.split() == ["False", "False"], out.stderr[-2000:]


def test_vanilla_engine_log_probs_are_the_sampled_distributions(tiny_model):
    """At T=0.7 the engine's log-probs are log softmax(logits / 0.7) of a full forward pass (NumPy)."""
    model, tok = tiny_model
    engine = engines.make_engine("vanilla", model, tok, max_prompt_length=8, max_new_tokens=6)
    assert isinstance(engine, engines.RolloutEngine)
    out = engine.generate(ids(tok), 6, temperature=0.7, seed=2)
    for prompt, toks, lps in zip(ids(tok), out.tokens, out.logprobs):
        np.testing.assert_allclose(lps, numpy_logprobs(model, prompt, toks, 0.7), atol=1e-4)
    again = engine.generate(ids(tok), 6, temperature=0.7, seed=2)
    assert all(np.array_equal(a, b) for a, b in zip(out.tokens, again.tokens))


def test_vanilla_apart_sync_moves_the_trainable_bytes_and_then_matches(tiny_model):
    """A rollout on other devices: sync_bytes predicts the report (sum of sizes × itemsize), then greedy agrees."""
    if jax.device_count() < 8:
        pytest.skip("needs 8 devices: the actor on the first 4, the rollout's 2 × 2 mesh on the other 4")
    _, tok = tiny_model
    model = tiny.load()[0]
    mesh = jax.sharding.Mesh(np.array(jax.devices()[4:]).reshape(2, 2), ("fsdp", "tp"))
    apart = engines.make_engine("vanilla", model, tok, max_prompt_length=8, max_new_tokens=6, mesh=mesh)
    nnx.update(model, jax.tree.map(lambda x: x * 1.05, nnx.state(model, nnx.Param)))
    expected = sum(int(np.prod(x.shape)) * x.dtype.itemsize for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    assert apart.sync_bytes(model) == expected
    report = apart.sync_weights(model)
    assert report.bytes_moved == expected and report.tensors == len(jax.tree.leaves(nnx.state(model, nnx.Param)))
    local = engines.make_engine("vanilla", model, tok, max_prompt_length=8, max_new_tokens=6)
    a, b = apart.generate(ids(tok), 6, temperature=0.0), local.generate(ids(tok), 6, temperature=0.0)
    assert all(np.array_equal(x, y) for x, y in zip(a.tokens, b.tokens))


def test_vanilla_decode_copies_option_reaches_the_sampler_and_changes_no_sample(tiny_model):
    """decode_copies=False (no per-call weight copies, chapter 15) samples what the default does; other options fail."""
    model, tok = tiny_model
    kw = dict(max_prompt_length=8, max_new_tokens=6)
    on, off = (engines.make_engine("vanilla", model, tok, decode_copies=c, **kw) for c in (True, False))
    assert on.sampler.decode_copies and not off.sampler.decode_copies
    a, b = (e.generate(ids(tok), 6, temperature=0.8, seed=3) for e in (on, off))
    assert all(np.array_equal(x, y) for x, y in zip(a.tokens, b.tokens))
    np.testing.assert_allclose(np.concatenate(a.logprobs), np.concatenate(b.logprobs), atol=1e-6)
    with pytest.raises(TypeError, match="decode_copies"):
        engines.make_engine("vanilla", model, tok, fast=True, **kw)


def test_vanilla_lora_actor_decodes_from_merged_kernels(tiny_model, monkeypatch):
    """A LoRA actor's CPU decode loop runs chapter 41's merged model (traced once a compile), and its log-probs are
    still log softmax(logits / T) of the adapted model's full forward pass (NumPy); QLoRA and bf16 actors keep their adapters."""
    from tunix_lit.rollout import sync
    from tunix_lit.sft import lora

    base, tok = tiny_model
    actor = lora.apply_lora(base, rank=4, alpha=8.0)
    for _, var in nnx.to_flat_state(nnx.state(actor, nnx.LoRAParam)):  # B starts at 0: nudge every adapter
        var.set_value(0.1 * jax.random.normal(jax.random.key(var.get_value().size), var.get_value().shape))
    calls = []
    real = sync.merged_decoder
    monkeypatch.setattr(sync, "merged_decoder", lambda m: calls.append(type(m).__name__) or real(m))
    kw = dict(max_prompt_length=8, max_new_tokens=6)
    engine = engines.make_engine("vanilla", actor, tok, **kw)
    assert engine.sampler.decode_merge is not None
    a = engine.generate(ids(tok), 6, temperature=0.7, seed=5)
    assert calls == (["Transformer"] if jax.default_backend() == "cpu" else [])  # traced once, on a CPU only
    for prompt, toks, lps in zip(ids(tok), a.tokens, a.logprobs):
        np.testing.assert_allclose(lps, numpy_logprobs(actor, prompt, toks, 0.7), atol=1e-4)
    moved = [np.abs(lps - numpy_logprobs(base, p, t, 0.7)).max() for p, t, lps in zip(ids(tok), a.tokens, a.logprobs)]
    assert max(moved) > 1e-2  # the adapters change the distributions, so the check above can tell
    qlora = lora.apply_lora(base, rank=4, alpha=8.0, quantize="int8", tile_size=16)
    assert engines.make_engine("vanilla", qlora, tok, **kw).sampler.decode_merge is None
    by_hand = nnx.merge(*nnx.split(actor))  # the same adapters without apply_lora's lora_config: scale unknown
    del by_hand.lora_config
    assert engines.make_engine("vanilla", by_hand, tok, **kw).sampler.decode_merge is None
    graphdef, state = nnx.split(base)  # a bf16 base: W + ΔW in bf16 would round small updates away
    half = lora.apply_lora(nnx.merge(graphdef, jax.tree.map(lambda x: x.astype(jnp.bfloat16), state)), rank=4, alpha=8.0)
    assert engines._decode_merge(half) is None and engines._decode_merge(actor) is not None


def test_vanilla_refuses_a_dtype_other_than_the_actors(tiny_model):
    model, tok = tiny_model
    with pytest.raises(ValueError, match="runs in the actor's dtype"):
        engines.make_engine("vanilla", model, tok, max_prompt_length=8, max_new_tokens=6, dtype="bfloat16")


class NoLogprobEngine:
    """A user's engine: always answers with the stop token, cannot report log-probs."""

    name, dtype, returns_logprobs = "mine", np.float32, False

    def __init__(self, tok):
        self.pad_id, self.eos_ids, self.syncs = tok.pad_id, (tok.eos_id,), 0

    def generate(self, prompt_ids, max_new_tokens, *, temperature, top_k=None, top_p=None, seed=0, stop_tokens=None):
        n = len(prompt_ids)
        return engines.EngineOutput([np.array([self.eos_ids[0]], np.int32)] * n, None, [""] * n, np.ones(n, bool))

    def sync_weights(self, actor):
        self.syncs += 1
        return engines.SyncReport(0, 0.0, 0)

    def sync_bytes(self, actor):
        return 0

    def describe(self):
        return "mine: a test engine"


def test_a_user_engine_object_generates_for_the_cluster(tiny_model):
    model, tok = tiny_model
    mine = NoLogprobEngine(tok)
    cluster = RLCluster(model, tok, rollout_config=RolloutConfig(max_new_tokens=4, max_prompt_length=8, engine=mine))
    assert cluster.rollout is mine and mine.syncs == 1  # the first sync gave it the actor's weights
    ro = cluster.generate(PROMPTS)
    assert ro.completion_ids.shape == (4, 4) and ro.completion_mask.sum() == 4 and np.isnan(ro.logprobs).all()
    assert cluster.pop_logp_gap() is None
    cluster.sync_weights()
    assert mine.syncs == 2 and "unavailable (the engine returns no log-probs)" in cluster.explain()
