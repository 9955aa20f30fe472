"""Tests for tunix_lit.agentic.trajectory: one episode, each of its six endings, the loss mask, the budgets, seeds."""
import dataclasses
import string
import time

import numpy as np
import pytest

from tunix_lit.agentic import tools as T
from tunix_lit.agentic.trajectory import EpisodeConfig, ScriptedEngine, TrajectoryCollector, turn_seed
from tunix_lit.models import tiny
from tunix_lit.models.tokenizer import CharAdapter, CharTokenizer, load_tokenizer

TASK = {"prompt": "1234+5678=", "answer": "6912"}



def ideal(context: str) -> str:
    """Call the calculator on the prompt's sum, then answer with the observation."""
    lines = context.split("\n")
    return context.rstrip("=") + "\n" if len(lines) == 1 else lines[-2]


class Broken:
    """Wraps an environment: its reset or step sleeps `hang_s` seconds, or raises."""

    def __init__(self, env, where="step", hang_s=0.0, error=False):
        self.env, self.where, self.hang_s, self.error = env, where, hang_s, error
        self.task, self.max_turns = env.task, env.max_turns

    def _trouble(self, where):
        if where == self.where:
            time.sleep(self.hang_s)
            if self.error:
                raise RuntimeError(f"{where} broke")

    def reset(self):
        self._trouble("reset")
        return self.env.reset()

    def step(self, text):
        self._trouble("step")
        return self.env.step(text)


def run(tok, cfg, script, env=None, delay_s=0.0, **overrides):
    engine = ScriptedEngine(tok, script, delay_s=delay_s)
    return TrajectoryCollector(engine, tok, dataclasses.replace(cfg, **overrides)).collect(env or T.calculator_env(TASK))


# --- the six endings -------------------------------------------------------------------------------

def test_succeeded_when_the_environment_says_done(tok, cfg):
    traj = run(tok, cfg, ideal)
    assert (traj.status, traj.reward, len(traj.model_turns)) == (T.Status.SUCCEEDED, 1.0, 2)


def test_max_steps_reached_when_the_model_never_answers(tok, cfg):
    traj = run(tok, cfg, lambda c: "12+34\n")
    assert traj.status == T.Status.MAX_STEPS_REACHED and len(traj.model_turns) == 3  # calculator_env's max_turns
    assert traj.counts["calls"] == 3


def test_max_context_limit_reached_when_the_budget_cuts_a_turn(tok, cfg):
    traj = run(tok, cfg, lambda c: "1" * 40, max_response_tokens=12)
    assert traj.status == T.Status.MAX_CONTEXT_LIMIT_REACHED and traj.conversation()[0].size == 12


def test_max_context_limit_reached_when_the_context_is_full(tok, cfg):
    """The 64-position buffer: prompt 11 + 5 rounds of 10-token calls and 5-token results cannot fit."""
    env = T.calculator_env(TASK, max_turns=10)
    traj = run(tok, cfg, lambda c: "1234+5678\n", env=env, max_response_tokens=1000)
    assert traj.status == T.Status.MAX_CONTEXT_LIMIT_REACHED
    assert traj.prompt_tokens.size + traj.conversation()[0].size <= 64


def test_max_context_limit_reached_when_the_engine_takes_no_longer_prompt(tok, cfg):
    """max_prompt_tokens=30: no turn may continue a context of more than 30 tokens (11 + 15 per round)."""
    env = T.calculator_env(TASK, max_turns=10)
    traj = run(tok, cfg, lambda c: "1234+5678\n", env=env, max_response_tokens=1000, max_prompt_tokens=30)
    assert traj.status == T.Status.MAX_CONTEXT_LIMIT_REACHED
    before, n = [], traj.prompt_tokens.size
    for t in traj.turns:
        if t.role == "model":
            before.append(n)
        n += t.tokens.size
    assert before == [11, 26] and n > 30


def test_timeout_when_the_episode_clock_runs_out(tok, cfg):
    traj = run(tok, cfg, ideal, delay_s=0.3, timeout_s=0.2)
    assert traj.status == T.Status.TIMEOUT and len(traj.model_turns) == 1


def test_env_timeout_when_a_step_hangs(tok, cfg):
    start = time.monotonic()
    traj = run(tok, cfg, ideal, env=Broken(T.calculator_env(TASK), hang_s=3.0), env_timeout_s=0.2)
    assert traj.status == T.Status.ENV_TIMEOUT and time.monotonic() - start < 2.0


def test_env_timeout_when_reset_hangs(tok, cfg):
    traj = run(tok, cfg, ideal, env=Broken(T.calculator_env(TASK), "reset", hang_s=3.0), env_timeout_s=0.2)
    assert traj.status == T.Status.ENV_TIMEOUT and traj.turns == []


def test_failed_when_the_environment_raises(tok, cfg):
    traj = run(tok, cfg, ideal, env=Broken(T.calculator_env(TASK), error=True))
    assert traj.status == T.Status.FAILED and "RuntimeError: step broke" in traj.error
    traj = run(tok, cfg, ideal, env=Broken(T.calculator_env(TASK), "reset", error=True))
    assert traj.status == T.Status.FAILED and "reset" in traj.error


def test_failed_when_the_environment_writes_what_the_vocabulary_cannot_spell(tok, cfg):
    """An observation template with letters the tiny alphabet lacks ends the episode FAILED, not the run."""
    env = T.ToolEnv(TASK, T.ToolManager([T.Calculator()]), "tiny", T.exact_match, observation_template="Result: {results}")
    traj = run(tok, cfg, lambda c: "1234+5678\n", env=env)
    assert traj.status == T.Status.FAILED and "cannot be tokenised" in traj.error


def test_a_step_cut_short_by_the_episode_clock_is_timeout_not_env_timeout(tok, cfg):
    traj = run(tok, cfg, ideal, env=Broken(T.calculator_env(TASK), hang_s=3.0), timeout_s=0.3, env_timeout_s=10)
    assert traj.status == T.Status.TIMEOUT


def test_a_finished_turn_that_fills_the_budget_is_still_scored(tok, cfg):
    """Unlike upstream: the answer 6912<eos> (5 tokens) exactly uses a 5-token budget, and is read."""
    traj = run(tok, cfg, lambda c: "6912", max_response_tokens=5)
    assert (traj.status, traj.reward) == (T.Status.SUCCEEDED, 1.0)


def test_a_turn_cut_by_the_per_turn_limit_goes_to_the_environment(tok, cfg):
    traj = run(tok, cfg, lambda c: "6912", max_new_tokens=4)  # '6912' without <eos>: read as the answer
    assert (traj.status, traj.reward) == (T.Status.SUCCEEDED, 1.0)


# --- the record ------------------------------------------------------------------------------------

def test_loss_mask_matches_a_hand_built_trajectory(tok, cfg):
    traj = run(tok, cfg, ideal)
    ids, mask, lps = traj.conversation()
    enc = lambda s: tok.encode(s, add_special_tokens=False)
    expected = [(enc("1234+5678\n"), 1), (enc("6912\n"), 0), (enc("6912") + [tok.eos_id], 1)]
    assert ids.tolist() == [i for part, _ in expected for i in part]
    assert mask.tolist() == [m for part, m in expected for _ in part]
    assert traj.prompt_tokens.tolist() == [tok.bos_id] + enc("1234+5678=")
    np.testing.assert_array_equal(lps[mask == 0], 0.0)
    np.testing.assert_array_equal(lps[mask == 1], -0.5)  # ScriptedEngine's log-prob


def test_every_model_turn_records_its_policy_version(tok, cfg):
    versions = iter([3, 4])
    traj = TrajectoryCollector(ScriptedEngine(tok, ideal), tok, cfg, policy_version=lambda: next(versions)).collect(
        T.calculator_env(TASK))
    assert [t.policy_version for t in traj.model_turns] == [3, 4] and traj.policy_versions == {3, 4}


def test_budgets_hold_in_every_ending(tok, cfg):
    for script, kw in [(ideal, {}), (lambda c: "12+34\n", {}), (lambda c: "1" * 40, dict(max_response_tokens=12)),
                       (lambda c: "1234+5678\n", dict(max_response_tokens=30))]:
        traj = run(tok, cfg, script, **kw)
        c = dataclasses.replace(cfg, **kw)
        assert traj.conversation()[0].size <= c.max_response_tokens
        assert traj.prompt_tokens.size + traj.conversation()[0].size <= c.max_context
        assert all(t.tokens.size <= c.max_new_tokens for t in traj.model_turns)


def test_each_malformed_call_is_an_error_observation_and_the_episode_goes_on():
    """Qwen format on a printable-ASCII tokenizer: six bad calls, one good call, then the answer."""
    char = CharAdapter(CharTokenizer(string.printable))

    class Raises:
        name, description, parameters = "boom", "raises", {}

        def __call__(self):
            raise ValueError("broken tool")

    class Hangs:
        name, description, parameters = "hang", "hangs", {}

        def __call__(self):
            time.sleep(3)

    def call(body):
        return f"<tool_call>{body}</tool_call>"

    turns = iter([call("{not json}"), call('{"name": "search", "arguments": {}}'),
                  call('{"name": "calculator", "arguments": {"a": 1}}'),
                  call('{"name": "calculator", "arguments": {"a": "1", "op": "+", "b": 2}}'),
                  call('{"name": "boom", "arguments": {}}'), call('{"name": "hang", "arguments": {}}'),
                  call('{"name": "calculator", "arguments": {"a": 2, "op": "+", "b": 3}}'), "5"])
    env = T.ToolEnv({"prompt": "2+3?", "answer": "5"}, T.ToolManager([T.Calculator(), Raises(), Hangs()], timeout_s=0.2),
                    "qwen", T.exact_match, max_turns=10)
    cfg = EpisodeConfig(max_new_tokens=200, max_response_tokens=2000)
    traj = TrajectoryCollector(ScriptedEngine(char, lambda c: next(turns)), char, cfg).collect(env)
    assert (traj.status, traj.reward) == (T.Status.SUCCEEDED, 1.0)
    assert {k: traj.counts[k] for k in T.ERROR_KINDS} == {"parse_error": 1, "unknown_tool": 1, "bad_arguments": 2,
                                                          "tool_error": 1, "tool_timeout": 1}
    observations = [t.text for t in traj.turns if t.role == "env"]
    assert all("Error:" in o for o in observations[:6]) and "<tool_response>\n5\n</tool_response>" in observations[6]


def test_turn_seeds_are_distinct_and_fixed():
    seeds = {turn_seed(s, i) for s in range(20) for i in range(5)}
    assert len(seeds) == 100 and turn_seed(3, 1) == turn_seed(3, 1) and all(0 <= s < 2 ** 31 for s in seeds)


@pytest.mark.parametrize("field,value", [("max_new_tokens", 0), ("max_response_tokens", 0), ("timeout_s", 0),
                                         ("env_timeout_s", -1), ("max_context", 1), ("temperature", -0.5)])
def test_episode_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=field):
        EpisodeConfig(**{field: value})


# --- the real tiny model ---------------------------------------------------------------------------

def test_a_fixed_seed_reproduces_trajectories_exactly(tok, cfg):
    from tunix_lit.rollout.engines import VanillaEngine
    model, _ = tiny.load()
    engine = VanillaEngine.build(model, tok, max_prompt_length=48, max_new_tokens=16)
    collector = TrajectoryCollector(engine, tok, cfg)
    tasks = T.sum_tasks(3, digits=2, seed=0) + T.sum_tasks(3, digits=4, seed=0)
    first = [collector.collect(T.calculator_env(t), seed=i) for i, t in enumerate(tasks)]
    again = [collector.collect(T.calculator_env(t), seed=i) for i, t in enumerate(tasks)]
    other = [collector.collect(T.calculator_env(t), seed=50 + i) for i, t in enumerate(tasks)]
    for a, b in zip(first, again):
        assert a.status == b.status and a.reward == b.reward
        for x, y in zip(a.conversation(), b.conversation()):
            np.testing.assert_array_equal(x, y)
        assert a.model_turns and np.isfinite(a.conversation()[2][a.conversation()[1] == 1]).all()
    assert any(a.conversation()[0].tolist() != o.conversation()[0].tolist() for a, o in zip(first, other))
