"""RLCluster: placement, sharing, rollouts as arrays, log-probs vs an independent full forward, weight sync."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from tunix_lit.data import arith
from tunix_lit.models import tiny
from tunix_lit.rl.cluster import RLCluster, Role, Rollout, RolloutConfig
from tunix_lit.rl.grpo import GRPOConfig, GRPOLearner
from tunix_lit.rl.learner import RLTrainingConfig
from tunix_lit.rollout.base import SyncReport
from tunix_lit.sft import lora

ROLL = RolloutConfig(max_new_tokens=6, max_prompt_length=8, temperature=1.0)


def meshes():
    if jax.device_count() < 8:
        pytest.skip("needs 8 devices: two 2 × 2 meshes")
    devs = np.asarray(jax.devices())
    a = jax.sharding.Mesh(devs[:4].reshape(2, 2), ("fsdp", "tp"))
    b = jax.sharding.Mesh(devs[4:].reshape(2, 2), ("fsdp", "tp"))
    return a, b


def leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


def one_grpo_step(cluster, steps=1):
    learner = GRPOLearner(cluster, optax.adam(1e-2), RLTrainingConfig(batch_size=4, max_steps=steps, progress_bar=False),
                          GRPOConfig(num_generations=2, beta=0.04 if cluster.reference is not None else 0.0),
                          reward_fns=[arith.reward])
    learner.train(arith.sample(arith.ArithConfig(), 16, "train", seed=1))
    return learner


# the apart-with-LoRA case runs by default (chapter 21's cells update and sync a colocated cluster); the others with -m slow
@pytest.mark.parametrize("apart,use_lora", [pytest.param(False, False, marks=pytest.mark.slow), (True, True),
                                            pytest.param(False, True, marks=pytest.mark.slow),
                                            pytest.param(True, False, marks=pytest.mark.slow)])
def test_after_a_step_rollout_equals_actor_and_reference_is_unchanged(apart, use_lora):
    mesh_a, mesh_b = meshes()
    model, tok = tiny.load(mesh_a)
    if use_lora:
        model = lora.apply_lora(model, rank=4, alpha=8.0)
    cluster = RLCluster(model, tok, reference="actor", rollout_config=ROLL,
                        meshes={"actor": mesh_a, "rollout": mesh_b} if apart else mesh_a)
    assert cluster.colocated is not apart
    ref_before = leaves(nnx.state(cluster.reference))
    actor_before = leaves(nnx.state(cluster.actor, cluster.trainable))
    learner = one_grpo_step(cluster)
    actor = nnx.state(learner.trainer.model)
    rollout = cluster.rollout.state
    assert any(not np.array_equal(a, b) for a, b in zip(actor_before, leaves(nnx.state(cluster.actor, cluster.trainable))))
    for a, b in zip(jax.tree.leaves(actor), jax.tree.leaves(rollout)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        if apart:  # the rollout copy lives on the other mesh
            assert {d.id for d in b.sharding.device_set} <= {4, 5, 6, 7}
    for a, b in zip(ref_before, leaves(nnx.state(cluster.reference))):
        np.testing.assert_array_equal(a, b)
    if apart:
        expect = sum(x.nbytes for x in jax.tree.leaves(nnx.state(cluster.actor, cluster.trainable)))
        assert cluster.synced_bytes == expect  # one sync moved exactly the trainable bytes
    else:
        assert cluster.synced_bytes == 0


def test_lora_reference_shares_the_actor_base_and_explain_says_so():
    mesh_a, _ = meshes()
    base, tok = tiny.load(mesh_a)
    actor = lora.apply_lora(base, rank=4, alpha=8.0)
    # a separate reference equal to the base: its copy is dropped for the actor's arrays
    reference, _ = tiny.load(mesh_a)
    cluster = RLCluster(actor, tok, reference=reference, rollout_config=ROLL, meshes=mesh_a)
    actor_base = {p: v.get_value() for p, v in nnx.to_flat_state(nnx.state(actor, lora.BASE_WEIGHTS))}
    for p, v in nnx.to_flat_state(nnx.state(cluster.reference, nnx.Param)):
        assert v.get_value() is actor_base[p]
    text = cluster.explain()
    assert "reference+actor" in text and "0 bytes move" in text
    assert cluster.donate_actor is False  # the colocated rollout reads the adapters


def test_allow_donation_gives_a_lora_snapshot_its_own_adapters_and_drops_the_policy_copies():
    """Colocated LoRA actor, reference='actor': before the promise the reference and the policy mark share the
    actor's adapters; after it they do not overlap with what a donating update consumes, and explain() says why."""
    mesh_a, _ = meshes()
    base, tok = tiny.load(mesh_a)
    cluster = RLCluster(lora.apply_lora(base, rank=4, alpha=8.0), tok, reference="actor", rollout_config=ROLL,
                        meshes=mesh_a)
    adapters = jax.tree.leaves(nnx.state(cluster.actor, cluster.trainable))
    shared_before = cluster.shared["reference+actor"]
    assert not cluster.donate_actor and "no (another role reads them)" in cluster.explain()
    ids = {id(x) for x in adapters}
    assert all(id(x) in ids for x in jax.tree.leaves(nnx.state(cluster.reference, cluster.trainable)))
    cluster.allow_donation()
    cluster.allow_donation()  # a second promise changes nothing
    ref_adapters = jax.tree.leaves(nnx.state(cluster.reference, cluster.trainable))
    assert not any(id(x) in ids for x in ref_adapters)  # the reference's own copies ...
    for a, b in zip(adapters, ref_adapters):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # ... of the same values
    adapter_bytes = sum(x.nbytes for x in adapters)
    assert cluster.shared["reference+actor"] == shared_before - adapter_bytes  # the frozen base is still shared
    # the policy mark reads the actor's own arrays (no copies): every read of it ends before an update
    actor_arrays = {id(x) for x in jax.tree.leaves(nnx.state(cluster.actor))}
    assert all(id(x) in actor_arrays for x in cluster._policy.arrays)
    assert cluster.donate_actor and cluster.explain().splitlines()[-2].endswith(
        "yes (every read of a step's weights ends before its first update)")


def test_a_different_reference_is_not_shared():
    mesh_a, _ = meshes()
    base, tok = tiny.load(mesh_a)
    actor = lora.apply_lora(base, rank=4, alpha=8.0)
    other = nnx.clone(tiny.load(mesh_a)[0])
    nnx.update(other, jax.tree.map(lambda x: x * 1.01, nnx.state(other, nnx.Param)))
    cluster = RLCluster(actor, tok, reference=other, rollout_config=ROLL, meshes=mesh_a)
    assert "reference+actor" not in cluster.shared


@nnx.jit
def _logits(model, ids):
    return model(ids, None, None, None)[0][0]


def full_logits(model, seq):
    """float64 [len(seq), V] logits of one forward over seq alone (no cache, no left padding). It is right-padded to
    a multiple of 16 slots, which causality hides from every real slot, so a model compiles once for all rows."""
    ids = np.zeros((1, -(-len(seq) // 16) * 16), np.int32)
    ids[0, :len(seq)] = seq
    return np.asarray(_logits(model, jnp.asarray(ids)), np.float64)[:len(seq)]


def test_rollout_arrays_and_logps_match_a_full_forward_in_numpy():
    model, tok = tiny.load()
    cluster = RLCluster(model, tok, reference="actor", rollout_config=ROLL)
    ro = cluster.generate(["12+34=", "7+8=", "99+1="], seed=3)
    P, T = ROLL.max_prompt_length, ROLL.max_new_tokens
    assert ro.prompt_ids.shape == (3, P) and ro.completion_ids.shape == (3, T)
    for i in range(3):
        n = int(ro.completion_mask[i].sum())
        assert (ro.completion_mask[i, :n] == 1).all() and (ro.completion_mask[i, n:] == 0).all()
        if ro.finished[i]:  # the stop token is a trained token, the last one
            assert ro.completion_ids[i, n - 1] == tok.eos_id
    ref = np.asarray(cluster.reference_logps(ro))
    # independent: run the sequence alone (no left padding, no cache) through the model, log-softmax in NumPy, pick each token
    for i in range(3):
        prompt = ro.prompt_ids[i][ro.prompt_mask[i] == 1]
        n = int(ro.completion_mask[i].sum())
        seq = np.concatenate([prompt, ro.completion_ids[i, :n]])
        logits = full_logits(model, seq)
        logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) - logits.max(-1, keepdims=True)
        want = [logp[len(prompt) - 1 + t, seq[len(prompt) + t]] for t in range(n)]
        np.testing.assert_allclose(ref[i, :n], want, atol=1e-4)
        assert (ref[i, n:] == 0).all()
    np.testing.assert_allclose(ref, ro.logprobs, atol=2e-4)  # the sampler's own record agrees


def test_generation_is_reproducible_by_seed_and_varies_by_call():
    model, tok = tiny.load()
    cluster = RLCluster(model, tok, rollout_config=ROLL)
    a = cluster.generate(["12+34="] * 8, seed=5)
    b = cluster.generate(["12+34="] * 8, seed=5)
    np.testing.assert_array_equal(a.completion_ids, b.completion_ids)
    c, d = cluster.generate(["12+34="] * 8), cluster.generate(["12+34="] * 8)
    assert not np.array_equal(c.completion_ids, d.completion_ids)


def test_bad_configuration_errors():
    mesh_a, _ = meshes()
    model, tok = tiny.load()
    with pytest.raises(ValueError, match="unknown role 'actr'"):
        RLCluster(model, tok, meshes={"actr": mesh_a})
    with pytest.raises(ValueError, match="no critic model"):
        RLCluster(model, tok, meshes={"critic": mesh_a})
    with pytest.raises(ValueError, match="reference must be"):
        RLCluster(model, tok, reference="base")
    with pytest.raises(TypeError, match="nnx.Module"):
        RLCluster("model", tok)
    cluster = RLCluster(model, tok, rollout_config=ROLL)
    with pytest.raises(ValueError, match="max_prompt_length=8"):
        cluster.generate(["1" * 12])
    with pytest.raises(ValueError, match="no reference model"):
        cluster.reference_logps(cluster.generate(["1+1="]))
    with pytest.raises(ValueError, match="no critic role"):
        cluster.mesh(Role.CRITIC)
    with pytest.raises(ValueError, match="temperature"):
        RolloutConfig(temperature=0)


def numpy_logps(model, ro, temperature):
    """log softmax(logits / T) of each completion token from one forward per row (full_logits), in NumPy: [N, T]."""
    out = np.zeros(ro.completion_ids.shape)
    for i in range(len(ro)):
        prompt = ro.prompt_ids[i][ro.prompt_mask[i] == 1]
        n = int(ro.completion_mask[i].sum())
        seq = np.concatenate([prompt, ro.completion_ids[i, :n]])
        z = full_logits(model, seq) / temperature
        z = z - z.max(-1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
        out[i, :n] = [logp[len(prompt) - 1 + t, seq[len(prompt) + t]] for t in range(n)]
    return out


def test_at_temperature_the_rollout_log_probs_are_the_actors_and_the_gap_says_so():
    """T = 0.9: the engine's log-probs equal a NumPy log softmax(logits / 0.9); the cluster's gap is as small."""
    model, tok = tiny.load()
    cluster = RLCluster(model, tok, rollout_config=RolloutConfig(max_new_tokens=6, max_prompt_length=8,
                                                                 temperature=0.9))
    ro = cluster.generate(["12+34=", "7+8=", "99+1=", "50+5="] * 2, seed=2)
    want = numpy_logps(model, ro, 0.9)
    np.testing.assert_allclose(ro.logprobs, want, atol=1e-4)
    gap, err = cluster.pop_logp_gap(), float(np.abs(ro.logprobs - want).max())
    assert gap <= 1e-4
    if jax.default_backend() == "tpu":  # engine and actor share the TPU's float32 exp/log error; NumPy has none
        assert gap <= err + 2e-5
    else:
        assert gap == pytest.approx(err, abs=2e-5)
    assert cluster.pop_logp_gap() is None  # popped: the next step starts afresh


def test_a_vanilla_sync_that_delivers_nothing_shows_in_the_gap():
    model, tok = tiny.load()
    cluster = RLCluster(model, tok, rollout_config=RolloutConfig(max_new_tokens=6, max_prompt_length=8))
    nnx.update(model, jax.tree.map(lambda x: x * 1.1, nnx.state(model, nnx.Param)))
    cluster.rollout.sync_weights = lambda actor: SyncReport(0, 0.0, 0)  # re-points nothing
    cluster.sync_weights()
    cluster.generate(["12+34=", "7+8="] * 4, seed=1)
    assert cluster.pop_logp_gap() > 1e-2


def test_apart_sync_moves_the_bytes_explain_states():
    mesh_a, mesh_b = meshes()
    model, tok = tiny.load(mesh_a)
    cluster = RLCluster(model, tok, meshes={"actor": mesh_a, "rollout": mesh_b}, rollout_config=ROLL)
    want = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    assert f"weight sync (once per global step): {want:,} bytes of all parameters" in cluster.explain()
    assert cluster.sync_weights() == want == cluster.last_sync.bytes_moved
    assert "a plain host-memory copy of the same bytes" in cluster.explain()


def test_an_unknown_engine_fails_before_the_cluster_exists():
    with pytest.raises(ValueError, match="choose one of: vanilla, hf, vllm, sglang_jax"):
        RolloutConfig(engine="vlm")


def test_logps_on_a_sharded_mesh_match_numpy_whether_rows_split_or_not():
    """Rows split over fsdp (4 rows, micro-batches of 2) or replicated (3 rows): the same NumPy log-probs."""
    mesh_a, _ = meshes()
    model, tok = tiny.load(mesh_a)
    cluster = RLCluster(model, tok, reference="actor", rollout_config=ROLL, meshes=mesh_a)
    plain, _ = tiny.load()  # the same weights on one device: the reference forward runs unsharded
    ro = cluster.generate(["12+34=", "7+8=", "99+1=", "50+5="], seed=4)
    np.testing.assert_allclose(np.asarray(cluster.reference_logps(ro, micro_batch_size=2)),
                               numpy_logps(plain, ro, ROLL.temperature), atol=1e-4)
    three = Rollout(*(getattr(ro, f.name)[:3] for f in dataclasses.fields(Rollout)))  # fsdp=2 does not divide 3 rows
    np.testing.assert_allclose(np.asarray(cluster.actor_logps(three)), numpy_logps(plain, three, ROLL.temperature),
                               atol=1e-4)
    with pytest.raises(ValueError, match="does not divide"):
        cluster.actor_logps(three, micro_batch_size=2)
    # runs of 2 equal prompts, each run once: the same NumPy log-probs; micro-batches must hold whole runs
    pairs = Rollout(*(np.repeat(getattr(ro, f.name)[:2], 2, axis=0) if f.name != "text" else [t for t in ro.text[:2] for _ in "ab"]
                      for f in dataclasses.fields(Rollout)))
    np.testing.assert_allclose(np.asarray(cluster.reference_logps(pairs, group_size=2)),
                               numpy_logps(plain, pairs, ROLL.temperature), atol=1e-4)
    with pytest.raises(ValueError, match="not a multiple of group_size=4"):
        cluster.reference_logps(pairs, micro_batch_size=2, group_size=4)
