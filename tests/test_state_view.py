"""Chapter 14's StateView and its users: arrays read and written without walking the module graph, a trainer whose
carry is flat lists, a sampler that takes flat weights, and a GRPO loop whose steady steps walk no module graph."""

import collections
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from flax.nnx import graphlib

from tunix_lit.models.transformer import ModelConfig, create_model
from tunix_lit.runtime import StateView


def tiny(seed=0):
    cfg = ModelConfig.from_name("tiny-qwen3", vocab_size=128, embed_dim=32, hidden_dim=64, num_layers=2, num_heads=2,
                                num_kv_heads=1, head_dim=16)
    return create_model(cfg, seed=seed)


def test_the_view_reads_the_modules_own_arrays_and_writes_into_it():
    model = tiny()
    view = StateView(model)
    leaves = jax.tree.leaves(nnx.state(model))
    assert len(view) == len(leaves) and all(a is b for a, b in zip(view.arrays(), leaves))
    before = [np.asarray(x) for x in leaves]
    view.write([x * 2 for x in view.arrays()])
    after = [np.asarray(x) for x in jax.tree.leaves(nnx.state(model))]  # read back through NNX, not the view
    for b, a in zip(before, after):
        np.testing.assert_array_equal(a, b * 2)


def test_a_filtered_view_sees_only_its_variables():
    model = tiny()
    view = StateView(model, nnx.Param)
    assert len(view) == len(jax.tree.leaves(nnx.state(model, nnx.Param)))
    assert all(isinstance(v, nnx.Param) for v in view.variables)


def test_the_views_state_is_what_nnx_state_gives():
    model = tiny()
    view = StateView(model)
    rebuilt = view.state(view.arrays())
    assert jax.tree.structure(rebuilt) == jax.tree.structure(nnx.state(model))
    ids = jnp.ones((1, 5), jnp.int32)
    graphdef = nnx.graphdef(model)
    np.testing.assert_array_equal(nnx.merge(graphdef, rebuilt)(ids)[0], model(ids)[0])


def test_a_write_of_the_wrong_count_is_refused():
    view = StateView(tiny())
    with pytest.raises(ValueError, match="arrays for a view of"):
        view.write(view.arrays()[:-1])


def test_a_variable_holding_several_arrays_cannot_be_viewed():
    class Pair(nnx.Module):
        def __init__(self):
            self.both = nnx.Variable((jnp.zeros(2), jnp.ones(3)))

    with pytest.raises(ValueError, match="exactly one array per variable"):
        StateView(Pair())


def test_the_trainer_carries_flat_lists_and_sync_writes_them_into_the_module():
    from tunix_lit.sft.core import TrainerCore, next_token_loss

    model = tiny()
    core = TrainerCore(model, optax.sgd(0.1), loss_fn=next_token_loss)
    arrays, _, _ = core._carry
    assert isinstance(arrays, list) and isinstance(core._frozen, list)
    before = [np.asarray(x) for x in jax.tree.leaves(nnx.state(model, nnx.Param))]
    batch = dict(tokens=np.arange(16, dtype=np.int32).reshape(2, 8) % 128, loss_mask=np.ones((2, 8), np.int32))
    core.apply_update(core.prepare([batch]))
    core.sync_model()
    now = jax.tree.leaves(nnx.state(model, nnx.Param))
    assert any(not np.array_equal(a, np.asarray(b)) for a, b in zip(before, now))
    # what sync wrote is exactly the carry (same buffers), read back through NNX
    params = {id(v) for v in StateView(model, nnx.Param).variables}
    carried = [x for v, x in zip(core._view.variables, core._carry[0]) if id(v) in params]
    assert len(carried) == len(now) and all(a is b for a, b in zip(carried, now))


def test_the_sampler_takes_flat_weights_and_refuses_a_wrong_shape():
    from tunix_lit.generate.sampler import Sampler

    class Ids:
        pad_id, eos_id = 0, 1

        def encode(self, text):
            return [int(t) for t in text.split()]

        def decode(self, ids):
            return " ".join(str(int(i)) for i in ids)

    a, b = tiny(0), tiny(1)
    sampler = Sampler(a, Ids(), max_len=32)
    sampler.set_arrays(StateView(b).arrays())
    got = sampler.generate([[2, 3, 4]], 6, temperature=0.0, stop_tokens=[-1]).tokens[0]
    want = Sampler(b, Ids(), max_len=32).generate([[2, 3, 4]], 6, temperature=0.0, stop_tokens=[-1]).tokens[0]
    np.testing.assert_array_equal(got, want)  # a sampler built on b itself is the reference
    wrong = [x.astype(jnp.bfloat16) for x in StateView(b).arrays()]
    with pytest.raises(ValueError, match="expected"):
        sampler.set_arrays(wrong)


@pytest.mark.parametrize("measure_gap", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_steady_grpo_steps_walk_no_module_graph(monkeypatch, measure_gap):
    from tunix_lit.rl.cluster import RLCluster, RolloutConfig
    from tunix_lit.rl.grpo import GRPOConfig, GRPOLearner
    from tunix_lit.rl.learner import RLTrainingConfig
    from tunix_lit.sft.lora import apply_lora

    class Ids:
        pad_id, eos_id, bos_id = 0, 2, 1

        def encode(self, text):
            return [int(t) for t in text.split()]

        def decode(self, ids):
            return " ".join(str(int(i)) for i in ids)

    actor = apply_lora(tiny(), rank=4, alpha=8.0, targets=".*q_proj|.*v_proj")
    cluster = RLCluster(actor, Ids(), reference="actor",
                        rollout_config=RolloutConfig(max_new_tokens=8, max_prompt_length=8, temperature=0.9,
                                                     stop_tokens=(-1,), seed=0, measure_logp_gap=measure_gap))
    even = lambda prompts, completions, **kw: [float(len(c) % 2) for c in completions]
    learner = GRPOLearner(cluster, optax.adamw(1e-4), RLTrainingConfig(batch_size=2, max_steps=2, progress_bar=False),
                          GRPOConfig(num_generations=2, beta=0.04), reward_fns=[even])
    data = [{"prompt": "1 5 6 7"} for _ in range(12)]
    learner.train(data[:4])  # warm-up: compiles, and the views are built
    walks = collections.Counter()

    def counting(name):
        original = getattr(graphlib, name)

        def counted(*args, **kwargs):
            walks[name] += 1
            return original(*args, **kwargs)

        return counted

    for name in ("flatten", "unflatten"):  # every split/state/update walks with the one, every merge with the other
        monkeypatch.setattr(graphlib, name, counting(name))
    nnx.merge(*nnx.split(actor))
    assert walks["flatten"] >= 1 and walks["unflatten"] >= 1  # the counters see walks
    walks.clear()
    learner.config = dataclasses.replace(learner.config, max_steps=5)
    learner.train(data)  # the learner skips the rows it has consumed
    assert learner.step == 5
    assert not walks, f"module-graph walks in 3 steady GRPO steps: {dict(walks)}"
