"""Tests for tunix_lit.agentic.learner: ideal trajectories, SFT batches masked to model tokens, the agent report, the warm start."""
import numpy as np
import optax
import pytest
from flax import nnx

from tunix_lit.agentic import tools as T
from tunix_lit.agentic.learner import agent_report, calculator_trajectory, sft_batch
from tunix_lit.agentic.trajectory import EpisodeConfig, TrajectoryCollector
from tunix_lit.models import tiny
from tunix_lit.models.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(tiny.asset_dir())


@pytest.fixture(scope="module")
def model():
    """The shipped model, loaded once (the warm-start test trains it in place; the loss-count test does not care)."""
    return tiny.load()[0]


def enc(tok, s):
    return tok.encode(s, add_special_tokens=False)


def test_calculator_trajectory_is_call_result_answer(tok):
    traj = calculator_trajectory({"prompt": "1234+5678=", "answer": "6912"}, tok)
    assert [(t.role, t.text) for t in traj.turns] == [("model", "1234+5678\n"), ("env", "6912\n"), ("model", "6912")]
    assert traj.turns[-1].tokens[-1] == tok.eos_id and traj.reward == 1.0 and traj.status == T.Status.SUCCEEDED


def test_sft_batch_masks_exactly_the_model_tokens(tok):
    """Hand-built: <bos>12+34= (0 x7), 12+34\\n (1 x6), 46\\n (0 x3), 46<eos> (1 x3), padding (0)."""
    tasks = [{"prompt": "12+34=", "answer": "46"}, {"prompt": "1234+5678=", "answer": "6912"}]
    batch = sft_batch([calculator_trajectory(t, tok) for t in tasks], 40, tok.pad_id)
    assert batch["tokens"].shape == batch["loss_mask"].shape == (2, 40)
    row0 = [tok.bos_id] + enc(tok, "12+34=12+34\n46\n46") + [tok.eos_id]
    assert batch["tokens"][0, :len(row0)].tolist() == row0 and (batch["tokens"][0, len(row0):] == tok.pad_id).all()
    assert batch["loss_mask"][0].tolist() == [0] * 7 + [1] * 6 + [0] * 3 + [1] * 3 + [0] * (40 - 19)
    assert batch["loss_mask"][1].tolist() == [0] * 11 + [1] * 10 + [0] * 5 + [1] * 5 + [0] * (40 - 31)


def test_sft_batch_rejects_a_trajectory_longer_than_the_batch(tok):
    with pytest.raises(ValueError, match="more than length=20"):
        sft_batch([calculator_trajectory({"prompt": "1234+5678=", "answer": "6912"}, tok)], 20, tok.pad_id)


def test_the_trainer_loss_counts_only_model_tokens(tok, model):
    """The chapter-60 loss is a sum over target tokens weighted by the mask: its weight is the model-token count."""
    from tunix_lit.sft import trainer as peft
    batch = sft_batch([calculator_trajectory(t, tok) for t in T.sum_tasks(4, digits=3, seed=0)], 40, tok.pad_id)
    out = nnx.jit(peft.next_token_loss)(model, batch)  # one compile instead of op-by-op dispatch
    model_tokens = sum(len(t["prompt"]) + len(t["answer"]) + 1 for t in T.sum_tasks(4, digits=3, seed=0))  # call, answer+eos
    assert float(out.weight) == model_tokens


def turn(role, text, tok):
    return T.Turn(role, text, enc(tok, text))


def test_agent_report_matches_a_hand_count(tok):
    """Four episodes: ideal; miscopied call then copied result; direct answer; malformed call then answer."""
    task = {"prompt": "1234+5678=", "answer": "6912"}
    mk = lambda turns, reward, counts: T.Trajectory(task=task, prompt_tokens=np.array(enc(tok, "1234+5678=")),
                                                     turns=turns, status=T.Status.SUCCEEDED, reward=reward,
                                                     counts=__import__("collections").Counter(counts))
    trajs = [
        mk([turn("model", "1234+5678\n", tok), turn("env", "6912\n", tok), turn("model", "6912", tok)], 1.0, {"calls": 1}),
        mk([turn("model", "1234+5679\n", tok), turn("env", "6913\n", tok), turn("model", "6913", tok)], 0.0, {"calls": 1}),
        mk([turn("model", "6900", tok)], 0.0, {}),
        mk([turn("model", "1234+\n", tok), turn("env", "=\n", tok), turn("model", "7000", tok)], 0.0,
           {"calls": 1, "parse_error": 1}),
    ]
    r = agent_report(trajs)
    assert r["exact_match"] == 0.25 and r["call_rate"] == 0.75
    assert r["well_formed_calls"] == 2 / 3 and r["operand_copy"] == 1 / 3
    assert r["answer_copies_result"] == 2 / 3 and r["endings"] == {"SUCCEEDED": 4}
    with pytest.raises(ValueError, match="at least one"):
        agent_report([])


def test_a_short_warm_start_teaches_the_model_to_call(tok, model):
    from tunix_lit.rollout.engines import VanillaEngine
    from tunix_lit.sft import trainer as peft
    traces = [calculator_trajectory(t, tok) for d in (2, 3, 4) for t in T.sum_tasks(100, digits=d, seed=20 + d)]
    rng = np.random.default_rng(0)
    batches = (sft_batch([traces[j] for j in rng.choice(len(traces), 16, replace=False)], 40, tok.pad_id)
               for _ in range(40))
    trainer = peft.PeftTrainer(model, optax.adam(3e-3), peft.TrainingConfig(max_steps=40, progress_bar=False),
                               donate=False)
    trainer.train(batches)
    engine = VanillaEngine.build(trainer.model, tok, max_prompt_length=48, max_new_tokens=16)
    cfg = EpisodeConfig(max_context=64, stop_tokens=(tok.eos_id, enc(tok, "\n")[0]), temperature=0.0)
    collector = TrajectoryCollector(engine, tok, cfg)
    report = agent_report([collector.collect(T.calculator_env(t)) for t in T.sum_tasks(20, digits=4, seed=99)])
    assert report["call_rate"] >= 0.7  # the shipped model's is 0; well-formed, copied operands come with more updates
