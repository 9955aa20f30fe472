"""The arithmetic task: answers, the held-out split, the difficulty knob, seeds, the reward and bad input."""
import re

import pytest

from tunix_lit.data import arith

PROBLEM = re.compile(r"^(\d+)([-+*])(\d+)=$")


def operands(prompt: str) -> tuple[int, str, int]:
    """(a, op, b) read back from a prompt such as '12+7='."""
    a, op, b = PROBLEM.match(prompt).groups()
    return int(a), op, int(b)


def test_answers_are_the_arithmetic_of_the_prompt():
    """Every answer equals Python's own evaluation of the prompt text, for each operation."""
    cfg = arith.ArithConfig(ops="+-*", digits=2)
    for ex in arith.sample(cfg, 300, seed=5):
        assert int(ex["answer"]) == eval(ex["prompt"][:-1])  # noqa: S307 - digits and one operator only
        assert str(int(ex["answer"])) == ex["answer"]  # canonical: no leading zeros, '-' only when negative


@pytest.mark.parametrize("completion, expected", [
    ("19", 1.0),                 # exact
    ("19<eos><pad><pad>", 1.0),  # special tokens spelled out after the answer
    ("19\n4+4=8", 1.0),          # trailing junk: a second problem
    ("  19", 1.0),               # leading spaces are skipped
    ("019", 1.0),                # compared as integers
    ("29", 0.1),                 # a carry invented: wrong but well-formed
    ("-19", 0.1),                # wrong sign
    ("1 9", 0.1),                # the answer is the leading integer, 1
    ("nineteen", 0.0),           # no integer
    ("=19", 0.0),                # does not start with an integer
    ("", 0.0),                   # empty completion
])
def test_reward_on_hand_written_completions(completion, expected):
    assert arith.reward(["12+7="], [completion], answer=["19"]) == [expected]


def test_reward_handles_negative_answers_and_batches():
    prompts = ["3-8=", "3-8=", "20*3="]
    assert arith.reward(prompts, ["-5", "5", "60<eos>"], answer=["-5", "-5", "60"]) == [1.0, 0.1, 1.0]


def test_extract_answer_reads_only_the_leading_integer():
    assert arith.extract_answer("7 no wait 19") == "7"
    assert arith.extract_answer("-12abc") == "-12"
    assert arith.extract_answer("- 12") is None
    assert arith.is_correct("7 no wait 19", "7") and not arith.is_correct("7 no wait 19", "19")


def test_reward_ignores_other_columns_and_rejects_ragged_rows():
    assert arith.reward(["1+1="], ["2"], answer=["2"], mode="train", trajectory_ids=["0_0"]) == [1.0]
    with pytest.raises(ValueError, match="one entry per row"):
        arith.reward(["1+1=", "2+2="], ["2"], answer=["2", "4"])
    with pytest.raises(TypeError, match="lists of str"):
        arith.reward(["1+1="], "2", answer=["2"])


def test_heldout_split_is_disjoint_from_training_draws():
    cfg = arith.ArithConfig()
    held = {e["prompt"] for e in arith.all_problems(cfg, "heldout")}
    train_draws = {e["prompt"] for s in range(30) for e in arith.sample(cfg, 200, "train", seed=s)}
    assert held and train_draws and not held & train_draws
    assert {e["prompt"] for e in arith.sample(cfg, 500, "heldout", seed=3)} <= held


def test_splits_partition_the_problem_space():
    cfg = arith.ArithConfig(ops="+-", digits=1, heldout_fraction=0.25, seed=7)
    train = {e["prompt"] for e in arith.all_problems(cfg, "train")}
    held = {e["prompt"] for e in arith.all_problems(cfg, "heldout")}
    assert not train & held
    assert len(train | held) == cfg.num_problems == 2 * 10 * 10
    assert 0.15 < len(held) / cfg.num_problems < 0.35


def test_split_depends_on_the_config_seed_not_on_the_sampling_seed():
    a, b = arith.ArithConfig(seed=0), arith.ArithConfig(seed=1)
    held_a = {e["prompt"] for e in arith.all_problems(a, "heldout")}
    held_b = {e["prompt"] for e in arith.all_problems(b, "heldout")}
    assert held_a != held_b
    for seed in (0, 1, 2):
        assert {e["prompt"] for e in arith.sample(a, 100, "heldout", seed=seed)} <= held_a


@pytest.mark.parametrize("digits", [1, 2, 3])
def test_difficulty_knob_sets_the_operand_range(digits):
    cfg = arith.ArithConfig(ops="+-*", digits=digits)
    seen = [operands(e["prompt"]) for e in arith.sample(cfg, 200, seed=1)]  # digits=1 has 270 train problems
    values = [x for a, _, b in seen for x in (a, b)]
    assert cfg.operand_range == (0, 10**digits - 1)
    assert min(values) >= 0 and max(values) <= 10**digits - 1
    assert max(values) >= 10 ** (digits - 1) * 5  # the range is used, not just its low end
    assert {op for _, op, _ in seen} == {"+", "-", "*"}


def test_longest_prompt_and_answer_match_the_enumeration():
    for ops in ("+", "-", "*", "+-*"):
        cfg = arith.ArithConfig(ops=ops, digits=2)
        problems = arith.all_problems(cfg)
        assert cfg.max_prompt_chars == max(len(e["prompt"]) for e in problems)
        assert cfg.max_answer_chars == max(len(e["answer"]) for e in problems)


def test_every_character_is_in_the_alphabet():
    cfg = arith.ArithConfig(ops="+-*", digits=3)
    text = "".join(e["prompt"] + e["answer"] for e in arith.sample(cfg, 300, seed=2))
    assert set(text) <= set(arith.ALPHABET)


def test_same_seeds_replay_and_other_seeds_differ():
    cfg = arith.ArithConfig(ops="+-", digits=2)
    assert arith.sample(cfg, 32, seed=4) == arith.sample(cfg, 32, seed=4)
    assert arith.sample(cfg, 32, seed=4) != arith.sample(cfg, 32, seed=5)
    assert arith.sample(cfg, 32, "heldout") != arith.sample(cfg, 32, "train")
    assert len({e["prompt"] for e in arith.sample(cfg, 500, seed=4)}) == 500  # distinct within a draw


def test_unknown_operation_names_the_valid_ones():
    with pytest.raises(ValueError, match=r"choose from: \+, -, \*"):
        arith.ArithConfig(ops="+/")
    with pytest.raises(ValueError, match=r"choose one of: \+, -, \*"):
        arith.make_example(6, "/", 3)


@pytest.mark.parametrize("kwargs, message", [
    (dict(ops=""), "non-empty"),
    (dict(ops="++"), "twice"),
    (dict(digits=0), "digits must be"),
    (dict(digits=2.0), "digits must be"),
    (dict(heldout_fraction=0.0), "heldout_fraction"),
    (dict(heldout_fraction=1.5), "heldout_fraction"),
])
def test_bad_configs_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        arith.ArithConfig(**kwargs)


def test_bad_sample_requests_are_errors_not_hangs():
    cfg = arith.ArithConfig()
    with pytest.raises(ValueError, match="choose one of: train, heldout"):
        arith.sample(cfg, 4, "test")
    with pytest.raises(ValueError, match="distinct heldout problems"):
        arith.sample(cfg, 1200, "heldout")  # the split holds about 1000
    with pytest.raises(ValueError, match="MAX_ENUMERATED"):
        arith.all_problems(arith.ArithConfig(digits=4))
