"""Agentic GRPO (chapter 53): the loss mask on real trajectories, learning steps, exact resume, the off-policy bound, the main job."""
import collections
import dataclasses
import itertools
import json
import shutil
import threading
import time
import warnings
from pathlib import Path

import jax
import numpy as np
import optax
import pytest
import yaml
from flax import nnx

from tunix_lit.agentic import tools as T
from tunix_lit.agentic.learner import (AgenticConfig, AgenticGRPOLearner, calculator_config, calculator_setup,
                                       calculator_tasks, load_calculator, run_calculator_job, trajectory_batch)
from tunix_lit.agentic.trajectory import EpisodeConfig, ScriptedEngine, TrajectoryCollector
from tunix_lit.models import tiny
from tunix_lit.models.tokenizer import load_tokenizer
from tunix_lit.rl.cluster import RLCluster, RolloutConfig
from tunix_lit.rl.grpo import GRPOConfig
from tunix_lit.rl.learner import RLTrainingConfig
from tunix_lit.rollout.engines import VanillaEngine

ROOT = Path(__file__).resolve().parents[2]
TASKS = T.sum_tasks(200, digits=4, seed=7)


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(tiny.asset_dir())


def enc(tok, s):
    return tok.encode(s, add_special_tokens=False)


def scripted(tok, script, **cfg):
    stops = (tok.eos_id, enc(tok, "\n")[0])
    return TrajectoryCollector(ScriptedEngine(tok, script), tok, EpisodeConfig(stop_tokens=stops, **cfg))


def test_the_loss_mask_is_exactly_the_model_tokens_of_real_episodes(tok):
    """Episodes run by the collector on the calculator; masks against a hand count of each turn's characters."""
    def script(context):  # call with a miscopied operand, then answer the observation
        return context.split("=")[0] + "1\n" if "\n" not in context else context.split("\n")[-2]
    trajs = [scripted(tok, script).collect(T.calculator_env(t)) for t in ({"prompt": "12+34=", "answer": "46"},
                                                                           {"prompt": "1234+5678=", "answer": "6912"})]
    assert [t.status for t in trajs] == [T.Status.SUCCEEDED] * 2
    b = trajectory_batch(trajs, [0.5, -0.5], prompt_length=12, response_length=32, pad_id=tok.pad_id)
    # "12+341\n" (7 tokens, model), "353\n" (4, env), "353<eos>" (4, model)
    assert [(t.role, t.text) for t in trajs[0].turns] == [("model", "12+341\n"), ("env", "353\n"), ("model", "353")]
    assert b["completion_mask"][0].tolist() == [1] * 7 + [0] * 4 + [1] * 4 + [0] * (32 - 15)
    assert b["completion_attention"][0].tolist() == [1] * 15 + [0] * (32 - 15)
    # "1234+56781\n" (11, model), "58015\n" (6, env), "58015<eos>" (6, model)
    assert b["completion_mask"][1].tolist() == [1] * 11 + [0] * 6 + [1] * 6 + [0] * (32 - 23)
    assert b["completion_ids"][1, :23].tolist() == enc(tok, "1234+56781\n58015\n58015") + [tok.eos_id]
    assert b["prompt_ids"][1].tolist() == [tok.pad_id] + tok.encode("1234+5678=")  # left-padded, <bos> kept
    assert b["prompt_mask"][1].tolist() == [0] + [1] * 11
    assert b["advantages"].tolist() == [0.5, -0.5]
    np.testing.assert_array_equal(b["old_logps"][0], np.where(b["completion_mask"][0] == 1, -0.5, 0.0))


def test_an_episode_cut_by_the_budget_is_filtered_only_when_asked(tok):
    traj = scripted(tok, lambda c: "1234+5678\n", max_response_tokens=6).collect(
        T.calculator_env({"prompt": "1234+5678=", "answer": "6912"}))
    assert traj.status is T.Status.MAX_CONTEXT_LIMIT_REACHED
    on = trajectory_batch([traj], [1.0], prompt_length=12, response_length=8, pad_id=tok.pad_id)
    off = trajectory_batch([traj], [1.0], prompt_length=12, response_length=8, pad_id=tok.pad_id,
                           filter_overlong=False)
    assert on["completion_mask"].sum() == 0 and off["completion_mask"].sum() == 6
    with pytest.raises(ValueError, match="more than response_length=4"):
        trajectory_batch([traj], [1.0], prompt_length=12, response_length=4, pad_id=tok.pad_id)


def make(tmp=None, steps=2, k=0, lr=1e-3, concurrency=4):
    model, tok = load_calculator()
    stops = (tok.eos_id, enc(tok, "\n")[0])
    cluster = RLCluster(model, tok, rollout_config=RolloutConfig(max_new_tokens=16, max_prompt_length=48,
                                                                 temperature=1.0, stop_tokens=stops,
                                                                 measure_logp_gap=False))
    cfg = RLTrainingConfig(batch_size=2, max_steps=steps, progress_bar=False, save_every_n_steps=1,
                           checkpoint_dir=None if tmp is None else str(tmp))
    agentic = AgenticConfig(episode=EpisodeConfig(max_new_tokens=16, max_response_tokens=32, max_context=64,
                                                  stop_tokens=stops), max_concurrency=concurrency,
                            max_off_policy_steps=k)
    return AgenticGRPOLearner(cluster, optax.adam(lr), cfg, GRPOConfig(num_generations=4, beta=0.0), agentic)


def params(learner):
    return [np.asarray(x) for x in jax.tree.leaves(nnx.state(learner.trainer.model, nnx.Param))]


def test_a_few_steps_learn_with_a_finite_loss_on_the_episodes_model_tokens():
    learner = make(steps=3)
    start = params(learner)
    with warnings.catch_warnings():  # measure_logp_gap=False: a null gap, as asked, and no warning about it
        warnings.filterwarnings("error", message=".*log-prob gap")
        result = learner.train(TASKS)
    assert result.step == 3 and result.stop_reason == "max_steps"
    _, losses = learner.metrics.history("actor/loss")
    assert len(losses) == 3 and all(np.isfinite(losses))
    assert any(not np.array_equal(a, b) for a, b in zip(start, params(learner)))
    _, tokens = learner.metrics.history("episodes/model_tokens")
    assert all(t > 0 for t in tokens)  # the batch trained on model tokens
    _, offp = learner.metrics.history("episodes/off_policy_steps")
    assert offp == [0.0, 0.0, 0.0]


@pytest.mark.slow  # by default tests/rl/test_learner.py's resume test checks the learner's resume machinery
def test_resume_continues_exactly_like_an_uninterrupted_run(tmp_path):
    whole = make(tmp_path / "a", steps=3)
    whole.train(TASKS)
    first = make(tmp_path / "b", steps=1)
    first.train(TASKS)
    first.close()
    second = make(tmp_path / "b", steps=3)  # what a new process would build
    result = second.train(TASKS)
    assert result.start_step == 1 and result.step == 3 and second.data_position == whole.data_position == 6
    for a, b in zip(params(whole), params(second)):
        np.testing.assert_array_equal(a, b)
    _, r_whole = whole.metrics.history("rewards/mean")
    _, r_second = second.metrics.history("rewards/mean")
    assert r_second == r_whole[1:]  # the same episodes after the resume
    # negative control: without the checkpoint, steps 2-3 start from other weights and give other parameters
    fresh = make(tmp_path / "c", steps=2)
    fresh.train(TASKS[2:])
    assert any(not np.array_equal(a, b) for a, b in zip(params(fresh), params(whole)))


def settle(got, want, timeout=10.0):
    """Wait until `got` has `want` items, then a moment more, so one too many would show."""
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)
    return len(got)


def test_the_feeder_holds_tasks_back_to_the_off_policy_bound():
    """batch_size 2: with k syncs of lead allowed, 2(k+1) tasks start before the first sync, then 2 more per sync."""
    for k in (0, 1):
        learner = make(k=k)
        got = []
        feeder = learner._feed(iter(TASKS), 0)
        t = threading.Thread(target=lambda: [got.append(x) for x in feeder], daemon=True)
        t.start()
        assert settle(got, 2 * (k + 1)) == 2 * (k + 1)
        learner.sync_rollout()
        assert settle(got, 2 * (k + 2)) == 2 * (k + 2) and learner.version == 1
        learner._stop_feed.set()
        t.join(timeout=2)
        assert not t.is_alive()


def test_a_batch_older_than_the_bound_is_refused(tok):
    learner = make(k=1)
    engine = ScriptedEngine(tok, lambda c: "12+34\n" if "\n" not in c else "46")
    def group(version):
        coll = TrajectoryCollector(engine, tok, EpisodeConfig(stop_tokens=(tok.eos_id, enc(tok, "\n")[0])),
                                   policy_version=lambda: version)
        return [coll.collect(T.calculator_env({"prompt": "12+34=", "answer": "46"})) for _ in range(4)]
    micro, metrics = learner.make_experience([group(4), group(5)], 5, 0)  # one sync behind: allowed
    assert metrics["episodes/off_policy_steps"] == 1.0 and "old_logps" in micro[0]
    with pytest.raises(RuntimeError, match="more than max_off_policy_steps=1"):
        learner.make_experience([group(3), group(5)], 5, 0)


def test_off_policy_runs_train_with_episodes_at_most_k_syncs_old():
    learner = make(steps=2, k=1, concurrency=8)
    learner.train(TASKS)
    _, offp = learner.metrics.history("episodes/off_policy_steps")
    assert len(offp) == 2 and max(offp) <= 1


def test_the_job_config_names_bad_keys():
    cfg = calculator_config(yaml.safe_load((ROOT / "recipes" / "agentic_calc_tiny.yaml").read_text()))
    assert cfg["algorithm"] == "agentic_grpo" and cfg["grpo"]["num_generations"] == 8
    with pytest.raises(ValueError, match="unknown key.*'batchsize'.*valid: batch_size"):
        calculator_config({"training": {"batchsize": 4}})
    with pytest.raises(ValueError, match="unknown key 'tasks'"):
        calculator_config({"tasks": {}})


def greedy_exact_match(model, tok, tasks) -> float:
    """The share of greedy episodes whose last model turn is the true sum, scored here (not by agent_report)."""
    engine = VanillaEngine.build(model, tok, max_prompt_length=48, max_new_tokens=16)
    coll = TrajectoryCollector(engine, tok, EpisodeConfig(max_new_tokens=16, max_response_tokens=32, max_context=64,
                                                          stop_tokens=(tok.eos_id, enc(tok, "\n")[0]), temperature=0.0))
    hits = 0
    for task in tasks:
        a, b = map(int, task["prompt"].rstrip("=").split("+"))
        hits += coll.collect(T.calculator_env(task)).model_turns[-1].text.strip() == str(a + b)
    return hits / len(tasks)


def test_the_training_stream_mixes_easy_sums_in_and_leaves_the_held_out_ones_out():
    held = T.sum_tasks(100, digits=2, seed=99)
    first = list(itertools.islice(calculator_tasks(4, 2, 0.25, seed=1000, exclude=held), 4000))
    again = list(itertools.islice(calculator_tasks(4, 2, 0.25, seed=1000, exclude=held), 4000))
    assert first == again  # a fixed sequence: a resumed run skips into the same one
    easy = np.array([len(t["prompt"]) == len("12+34=") for t in first])
    assert abs(easy.mean() - 0.25) < 0.03  # binomial(4000, 0.25): sd 0.007
    assert all(len(t["prompt"]) == len("1234+5678=") for t, e in zip(first, easy) if not e)
    assert not {t["prompt"] for t in first} & {t["prompt"] for t in held}
    assert all(int(t["answer"]) == sum(map(int, t["prompt"].rstrip("=").split("+"))) for t in first)
    # no easy share: the plain four-digit blocks of before
    plain = list(itertools.islice(calculator_tasks(4, 2, 0.0, seed=1000), 2000))
    assert plain == T.sum_tasks(1000, 4, seed=1000) + T.sum_tasks(1000, 4, seed=1001)
    for bad in (-0.1, 1.5, True):
        with pytest.raises(ValueError, match="easy_fraction"):
            next(calculator_tasks(easy_fraction=bad))


@pytest.mark.slow  # 15 s of a full agentic job
def test_the_job_writes_the_grpo_run_directory_and_resumes(tmp_path):
    pytest.importorskip("matplotlib", reason="the run directory's curve.png is drawn with matplotlib")
    run = tmp_path / "run"
    small = {"run_dir": str(run), "task": {"heldout_size": 8}, "training": {"batch_size": 2, "max_steps": 2,
             "eval_every_n_steps": 2, "save_every_n_steps": 2}, "grpo": {"num_generations": 2}}
    s = run_calculator_job(small, progress_bar=False)
    for name in ("config.yaml", "metrics.jsonl", "curve.png", "before.json", "summary.json", "checkpoints"):
        assert (run / name).exists(), name
    assert list(run.glob("events.out.tfevents*"))
    assert s["steps"] == 2 and s["heldout_size"] == 8
    # the summary's figures against greedy episodes scored here: the shipped warm start, then the saved step-2 weights
    hard, easy = T.sum_tasks(8, digits=4, seed=99), T.sum_tasks(8, digits=2, seed=99)
    model, tok = load_calculator()
    assert s["heldout_accuracy_before"] == greedy_exact_match(model, tok, hard)
    assert s["heldout_easy_accuracy_before"] == greedy_exact_match(model, tok, easy)
    assert s["heldout_accuracy_gain"] == s["heldout_accuracy_after"] - s["heldout_accuracy_before"]
    evals = [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["mode"] == "eval"]
    assert [r["step"] for r in evals] == [0, 2]  # the final evaluation is written once
    shutil.copytree(run / "checkpoints", tmp_path / "reader" / "checkpoints")  # the saved weights, read elsewhere
    trained, _, _ = calculator_setup(calculator_config({**small, "run_dir": str(tmp_path / "reader")}), False)
    assert trained.restore_checkpoint() == 2
    assert s["heldout_accuracy_after"] == greedy_exact_match(trained.cluster.actor, tok, hard)
    assert s["heldout_easy_accuracy_after"] == greedy_exact_match(trained.cluster.actor, tok, easy)
    trained.close()
    assert set(s["agent"]["after"]) >= {"call_rate_hard", "call_rate_easy", "well_formed_calls", "operand_copy",
                                        "answer_copies_result", "endings"}
    small["training"]["max_steps"] = 3
    again = run_calculator_job(small, progress_bar=False)
    assert again["steps"] == 3 and again["heldout_accuracy_before"] == s["heldout_accuracy_before"]


@pytest.mark.slow
def test_the_calculator_main_job_gains_35_points_on_4_digit_sums_and_keeps_2_digit_ones(tmp_path):
    cfg = yaml.safe_load((ROOT / "recipes" / "agentic_calc_tiny.yaml").read_text())
    s = run_calculator_job({**cfg, "run_dir": str(tmp_path / "run")}, progress_bar=False)
    assert s["heldout_accuracy_gain"] >= 0.35, s
    assert s["heldout_easy_accuracy_after"] >= s["heldout_easy_accuracy_before"], s


def test_the_sync_is_the_learner_override_under_the_write_lock():
    """sync_rollout waits for a running episode (a read share) to finish; the cluster itself is left unpatched."""
    learner = make()
    assert "sync_weights" not in vars(learner.cluster)  # no instance-level wrapping of the cluster
    done = threading.Event()
    with learner.lock.reading():  # an episode in flight
        t = threading.Thread(target=lambda: (learner.sync_rollout(), done.set()), daemon=True)
        t.start()
        assert not done.wait(0.3) and learner.version == 0  # the sync waits for the episode
    assert done.wait(10) and learner.version == 1
    t.join(timeout=2)


def test_on_policy_episodes_keep_their_log_probs_when_a_step_has_two_mini_batches(tok):
    """k = 0, μ = 1, but two mini-batches a step: the second update is off-policy, so old_logps stay in the batch."""
    engine = ScriptedEngine(tok, lambda c: "12+34\n" if "\n" not in c else "46")
    coll = TrajectoryCollector(engine, tok, EpisodeConfig(stop_tokens=(tok.eos_id, enc(tok, "\n")[0])),
                               policy_version=lambda: 0)
    groups = [[coll.collect(T.calculator_env({"prompt": "12+34=", "answer": "46"})) for _ in range(4)]
              for _ in range(2)]
    whole = make()
    micro, _ = whole.make_experience(groups, 0, 0)
    assert not whole.needs_old_logps and "old_logps" not in micro[0]
    split = make()
    split.sizes = dataclasses.replace(split.sizes, mini=1, train_micro=1)
    assert split.needs_old_logps
    micro, _ = split.make_experience(groups, 0, 0)
    assert all("old_logps" in mb for mb in micro)
