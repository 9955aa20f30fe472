"""The reward model (chapter 65): Bradley-Terry loss against NumPy, the score read at the last real token, a
training step that separates a pair, and the learned reward read through the RL cluster's reward role."""
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tunix_lit.models import tiny
from tunix_lit.sft import dpo, reward
from tunix_lit.sft import trainer as peft


def bt_reference(w, l, m, c):
    w, l, m = (np.asarray(x, np.float64) for x in (w, l, m))
    return np.logaddexp(0.0, -(w - l - m)) + c * (w + l) ** 2


@pytest.mark.parametrize("margin,center", [(None, 0.0), (0.7, 0.0), ("rows", 0.05)])
def test_bradley_terry_loss_matches_numpy(margin, center):
    rng = np.random.default_rng(0)
    w, l = rng.normal(size=10) * 2, rng.normal(size=10) * 2
    m = rng.random(10) if margin == "rows" else margin
    got = reward.bradley_terry_loss(jnp.asarray(w), jnp.asarray(l), m, center_coef=center)
    assert got.dtype == jnp.float32 and got.shape == (10,)
    np.testing.assert_allclose(np.asarray(got), bt_reference(w, l, 0.0 if m is None else m, center), rtol=1e-5, atol=1e-6)


def test_pairwise_accuracy_counts_a_tie_as_half():
    assert float(reward.pairwise_accuracy(jnp.asarray([1.0, 0.0, 2.0, 5.0]), jnp.asarray([0.0, 1.0, 2.0, 4.0]))) == 0.625


@pytest.fixture(scope="module")
def lm_and_tok():
    return tiny.load()


@pytest.mark.slow  # compiles the tiny model (and a train step): 15-30 s on 2 CPU cores
def test_score_is_read_at_the_last_real_token_whatever_the_padding(lm_and_tok):
    lm, tok = lm_and_tok
    rm = reward.reward_model_from(lm, head_init_std=0.05, seed=3)
    ids = tok.encode("12+34=") + tok.encode("46", add_special_tokens=False) + [tok.eos_id]
    alone = float(rm(jnp.asarray([ids]))[0])
    p = tok.pad_id
    padded = rm(jnp.asarray([[p] + ids + [p, p], ids + [p, p, p]]), attention_mask=jnp.asarray(
        [[0] + [1] * len(ids) + [0, 0], [1] * len(ids) + [0, 0, 0]]))
    np.testing.assert_allclose(np.asarray(padded), [alone, alone], rtol=1e-4, atol=1e-5)
    assert abs(alone) > 1e-4  # a non-zero head: the check compares real numbers
    assert float(reward.reward_model_from(lm)(jnp.asarray([ids]))[0]) == 0.0  # the default head starts at zero


@pytest.mark.slow  # compiles the tiny model (and a train step): 15-30 s on 2 CPU cores
def test_training_separates_the_pair_and_the_cluster_role_scores_with_it(lm_and_tok):
    from tunix_lit.rl.cluster import RLCluster, RolloutConfig

    lm, tok = lm_and_tok
    batch = dpo.encode_preference_pairs(tok, ["12+34=", "50+7="], ["46", "57"], ["45", "67"])
    t = reward.RewardTrainer(reward.reward_model_from(lm), optax.adam(1e-3),
                             peft.TrainingConfig(max_steps=8, log_every_n_steps=8, progress_bar=False))
    before = t.evaluate([batch])
    t.train(iter([batch] * 8))
    after = t.evaluate([batch])
    assert abs(before["accuracy"] - 0.5) < 1e-6 and after["accuracy"] == 1.0 and after["loss"] < before["loss"]
    cluster = RLCluster(lm, tok, reward_model=t.model, rollout_config=RolloutConfig(max_new_tokens=4, max_prompt_length=8))
    fn = reward.learned_reward(cluster, batch_size=4)
    scores = fn(["12+34=", "12+34=", "50+7="], ["46", "45", "57"])
    assert len(scores) == 3 and scores[0] > scores[1]
    with pytest.raises(ValueError, match="no reward model"):
        reward.learned_reward(RLCluster(tiny.load()[0], tok))


def _separated_pairs_reference(prompts, completions, scores, group):
    """Every ordered (better, worse) pair inside each group, enumerated with itertools (no sampling)."""
    import itertools
    out = []
    for g in range(0, len(prompts), group):
        for i, j in itertools.permutations(range(g, g + group), 2):
            if scores[i] > scores[j]:
                out.append((prompts[i], completions[i], completions[j]))
    return out


def test_ranked_pairs_keeps_only_pairs_the_scores_separate():
    rng = np.random.default_rng(1)
    G, n = 5, 7
    prompts = [f"{k}+{k}=" for k in range(n) for _ in range(G)]
    completions = [f"c{i}" for i in range(n * G)]
    scores = rng.choice([0.0, 0.1, 1.0], size=n * G).tolist()
    everything = reward.ranked_pairs(prompts, completions, scores, G, per_group=G * G)
    assert sorted(everything) == sorted(_separated_pairs_reference(prompts, completions, scores, G))
    capped = reward.ranked_pairs(prompts, completions, scores, G, per_group=2, seed=3)
    full = _separated_pairs_reference(prompts, completions, scores, G)
    assert set(capped) <= set(full)
    for k in range(n):  # at most two per prompt, and two wherever the group has two to give
        mine = [r for r in capped if r[0] == f"{k}+{k}="]
        assert len(mine) == min(2, sum(r[0] == f"{k}+{k}=" for r in full))
    with pytest.raises(ValueError, match="whole groups"):
        reward.ranked_pairs(prompts[:-1], completions[:-1], scores[:-1], G)


def test_reward_model_head_is_checked(lm_and_tok):
    with pytest.raises(ValueError, match="head must be one of"):
        reward.reward_model_from(lm_and_tok[0], head="mean")


def test_encode_pair_batches_keeps_whole_batches(lm_and_tok):
    _, tok = lm_and_tok
    rows = [(f"{k}+1=", str(k + 1), str(k)) for k in range(10)]
    out = reward.encode_pair_batches(tok, rows, 4, max_prompt_length=8, max_response_length=5)
    assert len(out) == 2 and all(b["chosen_tokens"].shape == (4, 5) for b in out)
    again = dpo.encode_preference_pairs(tok, *zip(*rows[4:8]), max_prompt_length=8, max_response_length=5)
    assert all(np.array_equal(out[1][k], again[k]) for k in again)


@pytest.mark.slow  # compiles the tiny model: 15-30 s on 2 CPU cores
def test_likelihood_head_is_the_sequence_log_likelihood(lm_and_tok):
    lm, tok = lm_and_tok
    rm = reward.reward_model_from(lm, head="likelihood")
    ids = [tok.encode("12+34=") + tok.encode("46", add_special_tokens=False) + [tok.eos_id],
           tok.encode("7+8=") + tok.encode("105", add_special_tokens=False) + [tok.eos_id]]
    T, p = max(map(len, ids)) + 1, tok.pad_id
    tokens = np.array([[p] * (T - len(r)) + r for r in ids], np.int32)  # left padded
    mask = (np.arange(T)[None] >= T - np.array([len(r) for r in ids])[:, None]).astype(np.int32)
    got = np.asarray(rm(jnp.asarray(tokens), attention_mask=jnp.asarray(mask)))
    for row, r in enumerate(ids):  # NumPy: log-softmax of the unpadded row's logits, summed over tokens 1..n-1
        logits = np.asarray(lm(jnp.asarray([r]), jnp.arange(len(r))[None], None, jnp.ones((1, len(r)), bool))[0][0],
                            np.float64)
        logp = logits - logits.max(-1, keepdims=True)
        logp = logp - np.log(np.exp(logp).sum(-1, keepdims=True))
        want = sum(logp[t - 1, r[t]] for t in range(1, len(r)))
        np.testing.assert_allclose(got[row], want, rtol=1e-4, atol=1e-3)


@pytest.mark.slow  # compiles the tiny model (and a train step): 15-30 s on 2 CPU cores
def test_learned_reward_reads_the_reward_model_as_it_is_now(lm_and_tok):
    from tunix_lit.rl.cluster import RLCluster, RolloutConfig

    lm, tok = lm_and_tok
    batch = dpo.encode_preference_pairs(tok, ["12+34=", "50+7="], ["46", "57"], ["45", "67"])
    t = reward.RewardTrainer(reward.reward_model_from(lm, head="likelihood"), optax.adam(1e-3),
                             peft.TrainingConfig(max_steps=4, log_every_n_steps=4, progress_bar=False))
    cluster = RLCluster(lm, tok, reward_model=t.model, rollout_config=RolloutConfig(max_new_tokens=4, max_prompt_length=8))
    fn = reward.learned_reward(cluster, batch_size=4)  # built before training: it must still see the trained weights
    before = fn(["12+34=", "12+34="], ["46", "45"])
    t.train(iter([batch] * 4))
    after = fn(["12+34=", "12+34="], ["46", "45"])
    assert after[0] - after[1] > before[0] - before[1] + 0.1, (before, after)
