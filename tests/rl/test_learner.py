"""The RL learner and GRPO: batch-size errors, step accounting, exact resume, bad rewards, dynamic sampling, the CLI."""
import dataclasses
import json
import math
import re
import os
import subprocess
import sys
import types
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from tunix_lit import cli
from tunix_lit.data import arith
from tunix_lit.models import tiny
from tunix_lit.rl import common
from tunix_lit.rl import learner as rl
from tunix_lit.rl.cluster import RLCluster, RolloutConfig
from tunix_lit.rl.grpo import GRPOConfig, GRPOLearner, dapo_config

ROOT = Path(__file__).resolve().parents[2]
ROLL = RolloutConfig(max_new_tokens=6, max_prompt_length=8, temperature=1.0)
DATA = arith.sample(arith.ArithConfig(), 96, "train", seed=4)


def make(cfg=None, algo=None, reward_fns=(arith.reward,), reference=None):
    model, tok = tiny.load()
    cluster = RLCluster(model, tok, reference=reference, rollout_config=ROLL)
    return GRPOLearner(cluster, optax.adam(1e-3), cfg or rl.RLTrainingConfig(batch_size=4, max_steps=2,
                                                                            progress_bar=False),
                       algo or GRPOConfig(num_generations=2, beta=0.0), reward_fns=list(reward_fns))


def test_grpo_without_rewards_or_with_beta_but_no_reference_fails_naming_it():
    with pytest.raises(ValueError, match="GRPO needs at least one reward function"):
        make(reward_fns=())
    with pytest.raises(ValueError, match=r"beta=0.04 needs a reference model"):
        make(algo=GRPOConfig(num_generations=2, beta=0.04))
    assert make(algo=GRPOConfig(num_generations=2, beta=0.04), reference="actor").algo.beta == 0.04


@pytest.mark.parametrize("sizes, bad", [
    (dict(batch_size=32, mini_batch_size=8, train_micro_batch_size=4, rollout_micro_batch_size=3), "rollout_micro_batch_size=3"),
    (dict(batch_size=32, mini_batch_size=8, train_micro_batch_size=4, logps_micro_batch_size=3), "logps_micro_batch_size=3"),
    (dict(batch_size=32, mini_batch_size=12), "mini_batch_size=12"),
    (dict(batch_size=8, mini_batch_size=8, train_micro_batch_size=3), "train_micro_batch_size=3"),
    (dict(batch_size=4, train_micro_batch_size=4, rollout_micro_batch_size=2, logps_micro_batch_size=2), "lcm"),
])
def test_batch_sizes_that_do_not_divide_fail_naming_both(sizes, bad):
    with pytest.raises(ValueError, match=bad):
        rl.resolve_batch_sizes(rl.RLTrainingConfig(**sizes))


@pytest.mark.parametrize("sizes, want", [
    (dict(batch_size=32), (32, 32, 32, 32)),
    (dict(batch_size=32, mini_batch_size=8), (8, 8, 8, 8)),
    (dict(batch_size=32, mini_batch_size=8, train_micro_batch_size=2), (8, 2, 2, 2)),
    (dict(batch_size=32, mini_batch_size=8, train_micro_batch_size=4, rollout_micro_batch_size=4,
          logps_micro_batch_size=4), (8, 4, 4, 4)),
])
def test_batch_size_defaults_cascade(sizes, want):
    s = rl.resolve_batch_sizes(rl.RLTrainingConfig(**sizes))
    assert (s.mini, s.train_micro, s.rollout_micro, s.logps_micro) == want


@pytest.mark.slow  # by default test_mu_one_with_two_mini_batches_trains_the_second_on_the_true_ratio counts a step's updates
def test_updates_per_step_follow_mini_batches_and_mu():
    cfg = rl.RLTrainingConfig(batch_size=4, mini_batch_size=2, train_micro_batch_size=1, max_steps=2,
                              progress_bar=False)
    learner = make(cfg, GRPOConfig(num_generations=2, num_iterations=2, beta=0.0))
    result = learner.train(DATA)
    assert result.step == 2 and learner.data_position == 8
    assert learner.trainer.step == 2 * (4 // 2) * 2  # steps × mini-batches × μ
    assert learner.trainer._train_step._cache_size() == 1  # fixed shapes: one compile


def test_a_step_whose_prompts_run_out_is_not_trained_at_all():
    cfg = rl.RLTrainingConfig(batch_size=8, mini_batch_size=4, max_steps=5, progress_bar=False)
    learner = make(cfg)
    result = learner.train(DATA[:14])  # one full step of 8, then 6 left: not a step
    assert result.stop_reason == "data_exhausted" and result.step == 1 and learner.trainer.step == 2


def test_mu_greater_than_one_uses_old_logps_from_the_rollout_weights():
    learner = make(algo=GRPOConfig(num_generations=2, num_iterations=2, beta=0.0))
    micro, _ = learner.make_experience(DATA[:4], step=0, chunk=0)
    batch = micro[0]
    assert "old_logps" in batch and "ref_logps" not in batch
    # before any update the old log-probs are the actor's own (ratio 1)
    ro_like = type("R", (), {k: batch[k] for k in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")})
    # two compiled programs (batched differently) agree to float32 rounding, a few ulps of a log-prob near -2.4
    np.testing.assert_allclose(batch["old_logps"], np.asarray(learner.cluster.actor_logps(ro_like)), rtol=2e-6,
                               atol=1e-6)


def test_resume_gives_the_same_parameters_as_an_uninterrupted_run(tmp_path):
    cfg = lambda d, n: rl.RLTrainingConfig(batch_size=4, max_steps=n, checkpoint_dir=str(d), save_every_n_steps=1,
                                           progress_bar=False)
    whole = make(cfg(tmp_path / "a", 4))
    whole.train(DATA)
    first = make(cfg(tmp_path / "b", 2))
    first.train(DATA)
    first.close()
    second = make(cfg(tmp_path / "b", 4))  # a fresh process would build exactly this
    result = second.train(DATA)
    assert result.start_step == 2 and result.step == 4 and second.trainer.step == whole.trainer.step
    for a, b in zip(jax.tree.leaves(nnx.state(whole.trainer.model)), jax.tree.leaves(nnx.state(second.trainer.model))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # negative control: without the checkpoint the same two steps give other parameters
    fresh = make(cfg(tmp_path / "c", 2))
    fresh.train(DATA[8:])
    assert any(not np.array_equal(np.asarray(a), np.asarray(b)) for a, b in
               zip(jax.tree.leaves(nnx.state(fresh.trainer.model)), jax.tree.leaves(nnx.state(whole.trainer.model))))


def test_a_reward_function_that_raises_names_itself_and_the_prompt():
    def picky(prompts, completions, **kw):
        return [1.0 if p != DATA[1]["prompt"] else {}["boom"] for p in prompts]

    learner = make(reward_fns=[picky])
    with pytest.raises(RuntimeError) as info:
        learner.train(DATA)
    err = info.value.__cause__
    assert isinstance(err, rl.RewardError) and "'picky'" in str(err) and "prompt 2" in str(err)
    assert isinstance(err.__cause__, KeyError)  # the original exception is chained


@pytest.mark.parametrize("fn, message", [
    (lambda prompts, completions, **kw: None, "returned None"),
    (lambda prompts, completions, **kw: [1.0], "expected (4,)"),
    (lambda prompts, completions, **kw: ["a"] * len(prompts), "not a list of numbers"),
])
def test_unusable_reward_values_are_errors(fn, message):
    with pytest.raises(rl.RewardError, match=re.escape(message)):
        rl.compute_rewards([fn], ["a"] * 4, ["b"] * 4, {})


def test_nan_rewards_are_excluded_and_counted_never_nan_loss():
    def sometimes_nan(prompts, completions, answer, **kw):
        return [float("nan") if i % 3 == 0 else float(arith.is_correct(c, a))
                for i, (c, a) in enumerate(zip(completions, answer))]

    learner = make(reward_fns=[sometimes_nan], algo=GRPOConfig(num_generations=4, beta=0.0))
    micro, metrics = learner.make_experience(DATA[:4], step=0, chunk=0)
    adv = np.concatenate([m["advantages"] for m in micro])
    assert np.isfinite(adv).all() and (adv[::3] == 0).all()
    assert metrics["rewards/nonfinite"] == len(range(0, 16, 3))
    result = learner.train(DATA)
    assert math.isfinite(result.metrics["actor/loss"])


def test_groups_with_equal_rewards_have_zero_advantage_and_dynamic_sampling_drops_them():
    const = lambda prompts, completions, **kw: [0.5] * len(prompts)
    learner = make(reward_fns=[const], algo=GRPOConfig(num_generations=2, beta=0.0))
    micro, metrics = learner.make_experience(DATA[:4], step=0, chunk=0)
    assert all((m["advantages"] == 0).all() for m in micro) and metrics["groups/zero_variance"] == 4
    # DAPO: every group is uninformative, so nothing is trained and the drops are counted
    cfg = rl.RLTrainingConfig(batch_size=4, max_steps=1, progress_bar=False)
    dapo = make(cfg, dapo_config(num_generations=2, max_dynamic_sampling_rounds=1), reward_fns=[const])
    result = dapo.train(DATA)
    assert dapo.trainer.step == 0 and result.metrics["micro_batches/missing"] == 1
    assert dapo.data_position == 8  # it drew one extra chunk trying to fill the step


def test_beta_needs_a_reference():
    with pytest.raises(ValueError, match="reference"):
        make(algo=GRPOConfig(num_generations=2, beta=0.1))


def test_recipe_keys_are_checked_with_the_nearest_name(tmp_path):
    (tmp_path / "r.yaml").write_text("training:\n  max_step: 3\n")
    with pytest.raises(ValueError, match="did you mean 'max_steps'"):
        cli.load_recipe(tmp_path / "r.yaml")
    with pytest.raises(ValueError, match="did you mean 'optimizer'"):
        cli.load_recipe(ROOT / "recipes" / "grpo_tiny.yaml", ["optimiser.learning_rate=1e-3"])
    recipe = cli.load_recipe(ROOT / "recipes" / "grpo_tiny.yaml", ["training.max_steps=7"])
    assert recipe["training"]["max_steps"] == 7 and recipe["run_dir"] == str(Path("runs") / "grpo_tiny")


@pytest.mark.slow  # 27 s; resume is checked in the default run by test_resume_gives_the_same_parameters_as_an_uninterrupted_run
def test_train_command_writes_the_run_directory_and_resumes(tmp_path):
    pytest.importorskip("matplotlib", reason="the run directory's curve.png is drawn with matplotlib")
    run = tmp_path / "run"
    args = ["train", str(ROOT / "recipes" / "grpo_tiny.yaml"), "training.max_steps=6", "training.batch_size=4",
            "training.eval_every_n_steps=3", "training.save_every_n_steps=3", "--run-dir", str(run), "--no-progress"]
    assert cli.main(args) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 6 and 0 <= summary["heldout_accuracy_after"] <= 1
    for name in ("config.yaml", "metrics.jsonl", "curve.png", "before.json", "checkpoints"):
        assert (run / name).exists(), name
    assert list(run.glob("events.out.tfevents*"))
    args[3] = "training.max_steps=8"
    assert cli.main(args) == 0
    again = json.loads((run / "summary.json").read_text())
    assert again["steps"] == 8 and again["heldout_accuracy_before"] == summary["heldout_accuracy_before"]


@pytest.mark.slow
def test_grpo_tiny_raises_heldout_accuracy(tmp_path):
    """The main job as the README runs it: held-out accuracy must rise by at least 30 points."""
    out = subprocess.run([sys.executable, "-c", "from tunix_lit.cli import main; raise SystemExit(main())", "train", str(ROOT / "recipes" / "grpo_tiny.yaml"),
                          "--run-dir", str(tmp_path / "run"), "--no-progress"],
                         capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["heldout_accuracy_gain"] >= 0.30, summary


@pytest.mark.slow  # by default test_state_view's GRPO steps measure the gap, and the on-policy test below checks it
def test_every_step_logs_the_rollout_log_prob_gap(tmp_path):
    """metrics.jsonl has rollout_logp_gap at every train step, and it stays at float rounding (T = 0.9)."""
    model, tok = tiny.load()
    cluster = RLCluster(model, tok, rollout_config=RolloutConfig(max_new_tokens=6, max_prompt_length=8,
                                                                 temperature=0.9))
    learner = GRPOLearner(cluster, optax.adam(1e-3), rl.RLTrainingConfig(batch_size=4, max_steps=3, log_dir=str(tmp_path),
                                                                         progress_bar=False),
                          GRPOConfig(num_generations=2, beta=0.0), reward_fns=[arith.reward])
    learner.train(DATA)
    learner.close()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    gaps = [r["rollout_logp_gap"] for r in rows if r["mode"] == "train"]
    assert len(gaps) == 3 and max(gaps) <= 1e-4
    assert all(r["sync/seconds"] >= 0 for r in rows if r["mode"] == "train")


def test_an_on_policy_step_measures_the_gap_in_its_loss_without_an_actor_pass(tmp_path, monkeypatch):
    """μ = 1, one mini-batch: no actor forward after generation; the logged gap is the max over the step's
    micro-batches of |sampler − actor| from a from-scratch recompute, and a sync that delivers nothing shows."""
    from tunix_lit.rl.cluster import Role
    from tunix_lit.rollout.engines import SyncReport

    # a skipped sync is silent only while the old buffers live: keep the trainer from donating them (the next
    # test covers the donating case, where the same mistake fails loudly instead)
    monkeypatch.setattr(GRPOLearner, "samples_while_training", True)
    cfg = rl.RLTrainingConfig(batch_size=4, train_micro_batch_size=2, max_steps=2, progress_bar=False,
                              log_dir=str(tmp_path))
    learner = make(cfg, GRPOConfig(num_generations=2, beta=0.0))
    assert learner.gap_in_loss and learner.sizes.accumulation == 2
    actor_passes, logps = [], learner.cluster._logps
    learner.cluster._logps = lambda role, *a: (actor_passes.append(role), logps(role, *a))[1]
    learner.cluster.rollout.sync_weights = lambda actor: SyncReport(0, 0.0, 0)  # step 2 samples with step 1's weights
    seen, params = _record_updates(learner)
    learner.train(DATA)
    learner.close()
    assert Role.ACTOR not in actor_passes
    gaps = [r["rollout_logp_gap"] for r in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines())
            if r["mode"] == "train"]
    want = [max(float(np.abs(mb["sampler_logps"] - _logps_reference(learner, p, mb))[mb["completion_mask"] == 1].max())
                for mb in mini) for mini, p in zip(seen, params)]
    assert len(gaps) == 2 and gaps[0] <= 1e-4  # step 1: the engine shares the actor's arrays
    assert gaps[1] > 1e-3 and gaps[1] == pytest.approx(want[1], rel=1e-3)  # the stale sync, the worst micro-batch
    per_micro = [float(np.abs(mb["sampler_logps"] - _logps_reference(learner, params[1], mb))[mb["completion_mask"] == 1].max())
                 for mb in seen[1]]
    assert abs(np.mean(per_micro) - max(per_micro)) > 1e-3 * max(per_micro)  # a mean would have been another number


def test_a_skipped_sync_after_a_donating_update_fails_naming_the_sync():
    """One mini-batch a step, colocated: the trainer donates the actor's buffers, so an engine never re-pointed
    fails at the next step with an error that names the missing sync (not XLA's deleted-buffer message alone)."""
    from tunix_lit.rollout.engines import SyncReport

    learner = make(rl.RLTrainingConfig(batch_size=4, max_steps=2, progress_bar=False))
    assert learner.reads_come_first and learner.cluster.colocated and learner.cluster.donate_actor
    learner.cluster.rollout.sync_weights = lambda actor: SyncReport(0, 0.0, 0)
    with pytest.raises(RuntimeError, match="global step 2") as info:
        learner.train(DATA)
    learner.close()
    assert "sync_weights(actor) after every update" in str(info.value.__cause__)


def test_a_cluster_promised_to_a_donating_learner_refuses_one_that_samples_during_updates():
    one = make(rl.RLTrainingConfig(batch_size=4, max_steps=1, progress_bar=False))
    assert one.cluster.donate_actor
    with pytest.raises(ValueError, match="needs a cluster of its own"):
        GRPOLearner(one.cluster, optax.adam(1e-3), rl.RLTrainingConfig(batch_size=4, mini_batch_size=2, max_steps=1,
                                                                      progress_bar=False),
                    GRPOConfig(num_generations=2, beta=0.0), reward_fns=[arith.reward])
    one.close()


@pytest.mark.slow  # 21 s; the default run checks donation by test_a_skipped_sync_after_a_donating_update_fails_naming_the_sync
def test_a_donating_full_fine_tune_trains_exactly_like_one_that_does_not(monkeypatch):
    """Full parameters, colocated, reference='actor', β > 0, one mini-batch a step: the donating learner consumes
    the actor's old buffers, keeps the reference intact and ends with the same parameters and metrics as a
    learner that never donates."""
    cfg = rl.RLTrainingConfig(batch_size=4, max_steps=2, progress_bar=False)
    algo = GRPOConfig(num_generations=2, beta=0.04)
    donating = make(cfg, algo, reference="actor")
    c = donating.cluster
    assert not c.is_lora and c.colocated and c.donate_actor and "reference+actor (until the first update)" not in c.shared
    first = jax.tree.leaves(nnx.state(c.actor, c.trainable))
    ref0 = [np.array(x) for x in jax.tree.leaves(nnx.state(c.reference))]
    donating.train(DATA)
    donating.close()
    assert all(x.is_deleted() for x in first)  # the first update wrote into them
    for a, b in zip(ref0, jax.tree.leaves(nnx.state(c.reference))):
        np.testing.assert_array_equal(a, np.asarray(b))  # the reference kept its own copies

    monkeypatch.setattr(GRPOLearner, "samples_while_training", True)
    keeping = make(cfg, algo, reference="actor")
    assert not keeping.cluster.donate_actor and "reference+actor (until the first update)" in keeping.cluster.shared
    keeping.train(DATA)
    keeping.close()
    for a, b in zip(jax.tree.leaves(nnx.state(donating.trainer.model)), jax.tree.leaves(nnx.state(keeping.trainer.model))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for name in ("rewards/mean", "actor/loss", "actor/kl"):
        assert donating.metrics.history(name) == keeping.metrics.history(name) and donating.metrics.history(name)[1]


@pytest.mark.slow  # tests/rl/test_common.py checks the shared-prompt pass's log-probs and gradients by default
def test_the_grpo_loss_with_shared_prompts_equals_the_full_pass():
    """One micro-batch of experience: GRPO's loss (each prompt run once) and its gradient equal those of the full pass."""
    learner = make(algo=GRPOConfig(num_generations=2, beta=0.0))
    (mb,), _ = learner.make_experience(DATA[:4], 0, 0)
    mb = {k: jnp.asarray(v) for k, v in mb.items()}
    assert np.array_equal(mb["prompt_ids"][0::2], mb["prompt_ids"][1::2])  # runs of G equal prompts
    rng = jax.random.key(0)

    @nnx.jit
    def loss_and_grad(model, batch):
        return nnx.value_and_grad(lambda m: learner.loss_fn(m, batch, rng).total)(model)

    full_batch = {**mb, "completion_attention": mb["completion_mask"]}  # a multi-turn batch: the full pass
    v_shared, g_shared = loss_and_grad(learner.trainer.model, mb)
    v_full, g_full = loss_and_grad(learner.trainer.model, full_batch)
    assert float(v_shared) == pytest.approx(float(v_full), rel=1e-5, abs=1e-6)
    for a, b in zip(jax.tree.leaves(g_shared), jax.tree.leaves(g_full)):  # the G copies are summed in another order
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * float(np.abs(b).max()))
    assert max(float(np.abs(b).max()) for b in jax.tree.leaves(g_full)) > 0  # a loss that moves the weights


@pytest.mark.slow  # 19 s; the default run keeps test_the_grpo_loss_with_shared_prompts_equals_the_full_pass
def test_prompt_once_off_gives_the_same_loss_from_a_program_with_half_the_layers():
    """prompt_once=False runs every row whole: the same loss and gradient as the shared pass, from a train-step
    program with fewer matrix products (the shared pass holds each layer twice)."""
    shared = make(algo=GRPOConfig(num_generations=2, beta=0.0, prompt_once=True))
    whole = make(algo=GRPOConfig(num_generations=2, beta=0.0, prompt_once=False))
    auto = make(algo=GRPOConfig(num_generations=2, beta=0.0))  # None: the padded shapes decide
    (mb,), _ = shared.make_experience(DATA[:4], 0, 0)
    mb = {k: jnp.asarray(v) for k, v in mb.items()}
    rng = jax.random.key(0)
    graphdef, state = nnx.split(shared.trainer.model)

    def grad_of(learner):
        return jax.jit(jax.value_and_grad(lambda st, b: learner.loss_fn(nnx.merge(graphdef, st), b, rng).total))

    (v1, g1), (v2, g2) = grad_of(shared)(state, mb), grad_of(whole)(state, mb)
    assert float(v2) == pytest.approx(float(v1), rel=1e-5, abs=1e-6)
    for a, b in zip(jax.tree.leaves(g2), jax.tree.leaves(g1)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * float(np.abs(b).max()))
    dots = lambda learner: grad_of(learner).lower(state, mb).as_text().count("stablehlo.dot_general")
    assert dots(whole) < 0.75 * dots(shared), (dots(whole), dots(shared))
    # None: on a CPU each prompt runs once (its passes are compute: the saved tokens show in the step) ...
    assert jax.default_backend() == "cpu" and dots(auto) == dots(shared)
    # ... on an accelerator only where that halves the tokens of this batch's padded shapes
    (P, T), G = (mb["prompt_ids"].shape[1], mb["completion_ids"].shape[1]), 2
    halves = P + G * T <= G * (P + T) / 2
    chip = types.SimpleNamespace(devices=np.array([types.SimpleNamespace(platform="tpu")]))
    auto.cluster.mesh = lambda role: chip
    assert auto._prompt_group(mb) == (G if halves else 1)
    assert auto._prompt_group({**mb, "completion_attention": mb["completion_mask"]}) == 1  # multi-turn: whole
    with pytest.raises(ValueError, match="prompt_once must be True, False or None"):
        GRPOConfig(prompt_once="no")


@pytest.mark.parametrize("P,T,G", [(64, 128, 4), (512, 128, 8), (8, 8, 4), (16, 16, 3), (30, 10, 2), (1, 1, 64)])
def test_prompt_once_pays_when_the_shared_prompt_halves_the_tokens(P, T, G):
    """prompt_once_pays against a count of the tokens each way builds: G whole rows, or one prompt and G completions."""
    from tunix_lit.rl.grpo import prompt_once_pays

    whole_rows = [list(range(P)) + list(range(T)) for _ in range(G)]
    shared_rows = [list(range(P))] + [list(range(T)) for _ in range(G)]
    tokens = lambda rows: sum(len(r) for r in rows)
    assert prompt_once_pays(P, T, G) == (2 * tokens(shared_rows) <= tokens(whole_rows))
    assert prompt_once_pays(P, T, G, "cpu")  # a CPU takes any saving: its log-prob passes are compute


class _SilentEngine:
    """An engine with no log-probs: every completion is the stop token."""

    name, dtype, returns_logprobs = "silent", np.float32, False

    def __init__(self, tok):
        self.pad_id, self.eos_ids = tok.pad_id, (tok.eos_id,)

    def generate(self, prompt_ids, max_new_tokens, *, temperature, top_k=None, top_p=None, seed=0, stop_tokens=None):
        from tunix_lit.rollout.engines import EngineOutput

        n = len(prompt_ids)
        return EngineOutput([np.array([self.eos_ids[0]], np.int32)] * n, None, [""] * n, np.ones(n, bool))

    def sync_weights(self, actor):
        from tunix_lit.rollout.engines import SyncReport

        return SyncReport(0, 0.0, 0)

    def sync_bytes(self, actor):
        return 0

    def describe(self):
        return "silent: a test engine"


def test_an_engine_without_log_probs_logs_a_null_gap_and_says_so_once(tmp_path):
    model, tok = tiny.load()
    cluster = RLCluster(model, tok, rollout_config=RolloutConfig(max_new_tokens=6, max_prompt_length=8,
                                                                 engine=_SilentEngine(tok)))
    learner = GRPOLearner(cluster, optax.adam(1e-3), rl.RLTrainingConfig(batch_size=4, max_steps=2, progress_bar=False,
                                                                         log_dir=str(tmp_path)),
                          GRPOConfig(num_generations=2, beta=0.0), reward_fns=[arith.reward])
    with pytest.warns(UserWarning, match="'silent'.* returns no log-probs") as record:
        result = learner.train(DATA)
    assert len([w for w in record if "log-probs" in str(w.message)]) == 1
    learner.close()
    assert result.metrics["rollout_logp_gap"] is None
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["mode"] == "train"]
    assert len(train) == 2 and all(r["rollout_logp_gap"] is None for r in train)  # JSON null, every step


def _record_updates(learner):
    """Wrap the actor trainer's update: keep each update's micro-batches and the parameters it started from."""
    seen, params, update = [], [], learner.trainer.update

    def recording(micro_batches):
        params.append(jax.tree.map(np.array, nnx.state(learner.trainer.model)))  # copies: buffers may be donated
        seen.append(list(micro_batches))
        update(micro_batches)

    learner.trainer.update = recording
    return seen, params


@nnx.jit
def _completion_logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask):
    return common.compute_completion_logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                                           temperature=ROLL.temperature)


def _logps_reference(learner, state, batch):
    """log π of a batch's completion tokens recomputed from scratch under the parameters `state` (0 on pads)."""
    model = nnx.merge(nnx.graphdef(learner.trainer.model), jax.tree.map(jnp.asarray, state))
    lp = _completion_logps(model, batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"],
                           batch["completion_mask"])  # compiled once per shape, not op by op
    return np.asarray(lp) * batch["completion_mask"]


def test_mu_one_with_two_mini_batches_trains_the_second_on_the_true_ratio():
    """μ = 1 but two mini-batches a step: the second update's policy has moved, so its ratio must not be forced to 1."""
    def alternate(prompts, completions, **kw):  # 0, 1 within every group of 2: nonzero advantages, the policy moves
        return [float(i % 2) for i in range(len(completions))]

    cfg = rl.RLTrainingConfig(batch_size=4, mini_batch_size=2, max_steps=1, progress_bar=False)
    learner = make(cfg, GRPOConfig(num_generations=2, num_iterations=1, beta=0.0), reward_fns=[alternate])
    assert learner.needs_old_logps
    seen, params = _record_updates(learner)
    learner.train(DATA)
    assert len(seen) == 2 and all("old_logps" in mb for mini in seen for mb in mini)  # one signature: one compile
    assert np.abs(seen[0][0]["advantages"]).min() > 0
    second = seen[1][0]
    # the old log-probs are those of the weights that sampled: the step's starting parameters
    np.testing.assert_allclose(second["old_logps"], _logps_reference(learner, params[0], second), atol=1e-5)
    # and the policy the second update starts from has moved away from them
    ratio = np.exp(_logps_reference(learner, params[1], second) - second["old_logps"])[second["completion_mask"] == 1]
    assert np.abs(ratio - 1).max() > 1e-4
    # the first mini-batch was sampled and trained on the same weights: its ratio is 1
    first = seen[0][0]
    np.testing.assert_allclose(_logps_reference(learner, params[0], first), first["old_logps"], atol=1e-5)


def test_a_fully_on_policy_step_computes_no_old_logps():
    learner = make(algo=GRPOConfig(num_generations=2, num_iterations=1, beta=0.0))
    assert not learner.needs_old_logps
    seen, _ = _record_updates(learner)
    learner.train(DATA)
    assert seen and not any("old_logps" in mb for mini in seen for mb in mini)


def test_sync_rollout_is_the_one_place_the_loop_syncs(tmp_path):
    """An override of sync_rollout sees every sync: one per global step, and one after a restore."""
    calls = []

    class Counting(GRPOLearner):
        def sync_rollout(self):
            calls.append(self.step)
            return super().sync_rollout()

    model, tok = tiny.load()
    cfg = rl.RLTrainingConfig(batch_size=4, max_steps=2, progress_bar=False, checkpoint_dir=str(tmp_path))
    learner = Counting(RLCluster(model, tok, rollout_config=ROLL), optax.adam(1e-3), cfg,
                       GRPOConfig(num_generations=2, beta=0.0), reward_fns=[arith.reward])
    learner.train(DATA)
    learner.close()
    assert calls == [0, 1]  # called before self.step counts the finished step
    again = Counting(RLCluster(*tiny.load(), rollout_config=ROLL), optax.adam(1e-3),
                     dataclasses.replace(cfg, max_steps=3), GRPOConfig(num_generations=2, beta=0.0),
                     reward_fns=[arith.reward])
    again.train(DATA)
    again.close()
    assert calls == [0, 1, 2, 2]  # the restore's sync (at step 2), then step 3's


def test_skip_rows_resumes_the_data_and_names_a_short_dataset():
    assert next(rl.skip_rows(lambda: iter(range(10)), 4)) == 4
    with pytest.raises(ValueError, match="ended after 3 rows, but the checkpoint had consumed 5"):
        rl.skip_rows(range(3), 5)
