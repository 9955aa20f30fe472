"""DPO, IPO and ORPO: losses against the papers' formulas in NumPy loops, log-probs against an unpadded
recompute, gradients against finite differences, the reference paths, a short run, and bad input."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from tunix_lit.models import tiny
from tunix_lit.models.transformer import ModelConfig, create_model, make_mesh
from tunix_lit.sft import dpo
from tunix_lit.sft import trainer as tr

CFG = ModelConfig.from_name("tiny-qwen3", vocab_size=19)
# A TPU's float32 exp / log agree with float64 to about 1e-4 relative (a CPU's to about 1e-7): the formula tests
# keep their CPU tolerance and widen to that on a TPU (seen there: up to 1.0e-4, the log-sigmoids below).
REL = 2e-4 if jax.default_backend() == "tpu" else 1e-5


def quiet(**kw):
    return tr.TrainingConfig(progress_bar=False, **kw)


def fixed_logps(seed=0, n=8):
    """Summed response log-probs (policy and reference) for n pairs, all negative, some pairs mis-ordered."""
    r = np.random.default_rng(seed)
    return [-np.abs(r.normal(0, 5, n)) for _ in range(4)]


def log_sigmoid(x):
    return -math.log1p(math.exp(-x)) if x >= 0 else x - math.log1p(math.exp(x))


def random_pairs(seed=0, B=4, P=5, C=4, vocab=19):
    """A preference batch of random ids with ragged prompts (left-padded) and responses (right-padded)."""
    r = np.random.default_rng(seed)
    batch = {}
    p_len = r.integers(1, P + 1, B)
    batch["prompt_tokens"] = np.where(np.arange(P) >= P - p_len[:, None], r.integers(3, vocab, (B, P)), 0)
    batch["prompt_mask"] = (np.arange(P) >= P - p_len[:, None]).astype(np.int32)
    for side in ("chosen", "rejected"):
        n = r.integers(1, C + 1, B)
        mask = (np.arange(C) < n[:, None]).astype(np.int32)
        batch[f"{side}_tokens"] = np.where(mask, r.integers(3, vocab, (B, C)), 0)
        batch[f"{side}_mask"] = mask
    return {k: np.asarray(v, np.int32) for k, v in batch.items()}


@pytest.mark.parametrize("label_smoothing", [0.0, 0.3])
def test_dpo_sigmoid_loss_matches_paper_formula(label_smoothing):
    """loss_i = -(1-ε) log σ(β[(w - w_ref) - (l - l_ref)]) - ε log σ(-β[...]) (Rafailov et al.; cDPO smoothing)."""
    w, l, w_ref, l_ref = fixed_logps()
    beta = 0.1
    got = np.asarray(dpo.dpo_sigmoid_loss(jnp.asarray(w), jnp.asarray(l), jnp.asarray(w_ref), jnp.asarray(l_ref),
                                          beta, label_smoothing))
    for i in range(len(w)):
        h = math.log(math.exp(w[i]) / math.exp(w_ref[i])) - math.log(math.exp(l[i]) / math.exp(l_ref[i]))
        expected = -(1 - label_smoothing) * log_sigmoid(beta * h) - label_smoothing * log_sigmoid(-beta * h)
        assert got[i] == pytest.approx(expected, rel=REL, abs=1e-6)


def test_label_smoothing_penalises_confident_margins():
    """With ε > 0 the loss has its minimum at a finite margin βΔ = log((1-ε)/ε), not at +∞."""
    eps, beta = 0.2, 1.0
    deltas = np.linspace(-5, 10, 3001)
    loss = np.asarray(dpo.dpo_sigmoid_loss(jnp.asarray(deltas), jnp.zeros_like(deltas), 0.0, 0.0, beta, eps))
    assert deltas[loss.argmin()] == pytest.approx(math.log((1 - eps) / eps), abs=0.01)


def test_ipo_loss_matches_paper_formula():
    """loss_i = (h_i - 1/(2τ))² with h the log-ratio margin (Azar et al., eq. 17 per sample), τ = β."""
    w, l, w_ref, l_ref = fixed_logps(1)
    beta = 0.5
    got = np.asarray(dpo.ipo_loss(jnp.asarray(w), jnp.asarray(l), jnp.asarray(w_ref), jnp.asarray(l_ref), beta))
    for i in range(len(w)):
        h = (w[i] - w_ref[i]) - (l[i] - l_ref[i])
        assert got[i] == pytest.approx((h - 1 / (2 * beta)) ** 2, rel=1e-5)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_orpo_loss_matches_paper_formula(label_smoothing):
    """loss_i = -s̄_w + λ·(-log σ(log(odds_w / odds_l))), odds = p/(1-p), p = exp(mean token log-prob) (Hong et al.)."""
    r = np.random.default_rng(2)
    w, l = -np.abs(r.normal(0, 1.5, 8)) - 0.01, -np.abs(r.normal(0, 1.5, 8)) - 0.01
    lam = 0.25
    got, log_odds = (np.asarray(x) for x in dpo.orpo_loss(jnp.asarray(w), jnp.asarray(l), lam, label_smoothing))
    for i in range(len(w)):
        p_w, p_l = math.exp(w[i]), math.exp(l[i])
        ratio = math.log((p_w / (1 - p_w)) / (p_l / (1 - p_l)))
        l_or = -(1 - label_smoothing) * log_sigmoid(ratio) - label_smoothing * log_sigmoid(-ratio)
        assert log_odds[i] == pytest.approx(ratio, rel=max(REL, 1e-4), abs=1e-5)
        assert got[i] == pytest.approx(-w[i] + lam * l_or, rel=REL)


def test_pair_logps_match_unpadded_recompute_in_numpy():
    """Each response's Σ log p, from the padded [2B, P + C] layout, equals a NumPy loop over the sequence without padding.

    The reference puts each prompt + response at slot 0 (natural positions, no mask); right padding after
    it cannot change a causal model's logits at the real slots.
    """
    model = create_model(CFG, seed=0)
    batch = random_pairs(seed=3)
    got = dpo.pair_logps(model, {k: jnp.asarray(v) for k, v in batch.items()})
    B, width = len(batch["prompt_tokens"]), batch["prompt_tokens"].shape[1] + batch["chosen_tokens"].shape[1]
    rows, spans = [], []
    for side in ("chosen", "rejected"):
        for i in range(B):
            prompt = batch["prompt_tokens"][i][batch["prompt_mask"][i] == 1].tolist()
            response = batch[f"{side}_tokens"][i][batch[f"{side}_mask"][i] == 1].tolist()
            rows.append(prompt + response + [0] * (width - len(prompt) - len(response)))
            spans.append((side, i, len(prompt), len(prompt) + len(response)))
    logits = np.asarray(model(jnp.asarray(rows, jnp.int32))[0], np.float64)
    for r, (side, i, start, end) in enumerate(spans):
        total = 0.0
        for t in range(start, end):
            z = logits[r, t - 1]
            total += z[rows[r][t]] - (z.max() + math.log(np.exp(z - z.max()).sum()))
        assert float(got[side][i]) == pytest.approx(total, rel=1e-4, abs=1e-4)
        assert float(got[f"{side}_len"][i]) == end - start


def test_gradient_of_dpo_loss_matches_finite_differences():
    """d loss / d logps from jax.grad equals central differences of the NumPy formula (float64)."""
    w, l, w_ref, l_ref = fixed_logps(4, n=3)
    beta, eps = 0.7, 0.2

    def numpy_loss(w, l):
        return sum(-(1 - eps) * log_sigmoid(beta * ((w[i] - w_ref[i]) - (l[i] - l_ref[i])))
                   - eps * log_sigmoid(-beta * ((w[i] - w_ref[i]) - (l[i] - l_ref[i]))) for i in range(len(w)))

    grad_w, grad_l = jax.grad(lambda a, b: dpo.dpo_sigmoid_loss(a, b, w_ref, l_ref, beta, eps).sum(), (0, 1))(
        jnp.asarray(w, jnp.float32), jnp.asarray(l, jnp.float32))
    h = 1e-6
    for i in range(len(w)):
        e = np.eye(len(w))[i] * h
        assert float(grad_w[i]) == pytest.approx((numpy_loss(w + e, l) - numpy_loss(w - e, l)) / (2 * h), rel=1e-4)
        assert float(grad_l[i]) == pytest.approx((numpy_loss(w, l + e) - numpy_loss(w, l - e)) / (2 * h), rel=1e-4)


def test_gradient_through_the_model_matches_finite_differences():
    """The directional derivative of the batch DPO loss along a random parameter direction matches (L(θ+hv) − L(θ−hv)) / 2h."""
    model, ref = create_model(CFG, seed=0), create_model(CFG, seed=1)
    batch = {k: jnp.asarray(v) for k, v in random_pairs(seed=5).items()}
    batch.update(dpo.reference_logps(ref, batch))
    loss_fn = dpo.make_preference_loss(dpo.DPOConfig(beta=0.5))
    graphdef, params = nnx.split(model, nnx.Param)
    loss_of = jax.jit(lambda p: loss_fn(nnx.merge(graphdef, p), batch).total)
    grads = jax.jit(jax.grad(loss_of))(params)
    keys = jax.random.split(jax.random.key(0), len(jax.tree.leaves(params)))
    direction = jax.tree.unflatten(jax.tree.structure(params),
                                   [jax.random.normal(k, x.shape) for k, x in zip(keys, jax.tree.leaves(params))])
    analytic = sum(float(jnp.vdot(g, v)) for g, v in zip(jax.tree.leaves(grads), jax.tree.leaves(direction)))
    h = 1e-3
    shifted = lambda s: jax.tree.map(lambda p, v: p + s * h * v, params, direction)
    numeric = (float(loss_of(shifted(1.0))) - float(loss_of(shifted(-1.0)))) / (2 * h)
    assert numeric == pytest.approx(analytic, rel=2e-2)


def test_loss_fn_is_the_sum_of_the_rule_over_pairs_with_reference_free_default():
    """Without reference log-probs Δ is the policy's own margin; total = Σ_i loss_i, weight = B."""
    model = create_model(CFG, seed=0)
    batch = {k: jnp.asarray(v) for k, v in random_pairs(seed=6).items()}
    lp = dpo.pair_logps(model, batch)
    out = dpo.make_preference_loss(dpo.DPOConfig(beta=0.3))(model, batch)
    expected = sum(-log_sigmoid(0.3 * (float(lp["chosen"][i]) - float(lp["rejected"][i]))) for i in range(4))
    assert float(out.total) == pytest.approx(expected, rel=1e-5)
    assert float(out.weight) == 4
    assert float(out.metrics["logps/margin"]) == pytest.approx(float((lp["chosen"] - lp["rejected"]).mean()), rel=1e-5)


@pytest.mark.slow  # 16 s; the default run checks the reference path against NumPy and finite differences
def test_reference_model_and_precomputed_reference_give_the_same_update():
    """A trainer with a ref model (2 micro-batches, stacked [A, B] reference) equals one fed precomputed log-probs."""
    batch = random_pairs(seed=7, B=4)
    halves = [{k: v[:2] for k, v in batch.items()}, {k: v[2:] for k, v in batch.items()}]
    ref = create_model(CFG, seed=1)
    with_ref = dpo.DPOTrainer(create_model(CFG, seed=0), ref, optax.sgd(0.5),
                              quiet(max_steps=1, gradient_accumulation_steps=2), beta=0.5)
    with_ref.train(halves)
    given = dict(batch, **{k: np.asarray(v) for k, v in dpo.reference_logps(ref, batch).items()})
    precomputed = dpo.DPOTrainer(create_model(CFG, seed=0), None, optax.sgd(0.5), quiet(max_steps=1), beta=0.5)
    precomputed.train([given])
    a, b = nnx.state(with_ref.model, nnx.Param), nnx.state(precomputed.model, nnx.Param)
    gap = max(float(jnp.abs(x - y).max()) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
    assert gap < 1e-5


def arithmetic_pairs(tok):
    """Eight sums: the right answer chosen, the answer plus ten (a dropped carry) rejected."""
    problems = [(12, 7), (38, 45), (27, 56), (64, 29), (15, 85), (49, 33), (71, 19), (58, 26)]
    return dpo.encode_preference_pairs(tok, [f"{a}+{b}=" for a, b in problems], [str(a + b) for a, b in problems],
                                       [str(a + b + 10) for a, b in problems])


def test_short_dpo_run_raises_the_margin_on_the_tiny_model():
    """Twelve DPO steps on arithmetic pairs (right sum vs off by ten) raise the chosen-minus-rejected log-prob margin."""
    model, tok = tiny.load()
    ref, _ = tiny.load()
    batch = arithmetic_pairs(tok)
    trainer = dpo.DPOTrainer(model, ref, optax.adam(1e-3), quiet(max_steps=12, log_every_n_steps=1), beta=0.5)
    before = trainer.evaluate([batch])
    trainer.train([batch] * 12)
    after = trainer.evaluate([batch])
    assert before["rewards/margin"] == pytest.approx(0.0, abs=1e-6) and before["loss"] == pytest.approx(math.log(2), rel=1e-5)
    assert after["logps/margin"] > before["logps/margin"] + 1.0
    assert after["rewards/accuracy"] == 1.0 and after["loss"] < before["loss"]
    _, margins = trainer.metrics.history("logps/margin")
    assert margins[-1] > margins[0]


@pytest.mark.parametrize("loss_type", ["ipo", "orpo"])
def test_ipo_and_orpo_trainers_run_and_lower_their_loss(loss_type):
    """IPO (with a reference) and ORPO (without) train through the same trainer and lower their loss."""
    model, tok = tiny.load()
    ref = tiny.load()[0] if loss_type == "ipo" else None
    trainer = dpo.DPOTrainer(model, ref, optax.adam(1e-3), quiet(max_steps=8, log_every_n_steps=1),
                             loss_type=loss_type, beta=0.5, lambda_orpo=0.5)
    batch = arithmetic_pairs(tok)
    trainer.train([batch] * 8)
    _, losses = trainer.metrics.history("loss")
    assert losses[-1] < losses[0]
    if loss_type == "orpo":
        assert "log_odds_ratio" in trainer.evaluate([batch])


def test_trainer_shards_preference_batches_over_a_mesh():
    """A batch without a 'tokens' key is split over the (data, fsdp) axes and one step runs on a (2, 4) mesh."""
    mesh = make_mesh(2, 4)
    placed = tr.shard_batch(random_pairs(B=8), mesh)
    assert not placed["chosen_tokens"].sharding.is_fully_replicated
    trainer = dpo.DPOTrainer(create_model(CFG, seed=0, mesh=mesh), None, optax.adam(1e-3), quiet(max_steps=1),
                             mesh=mesh)
    assert trainer.train([random_pairs(B=8)]).step == 1


def test_encode_preference_pairs_layout():
    """Prompt (with <bos>) left-padded, responses + <eos> right-padded to one width; masks mark real ids."""
    _, tok = tiny.load()
    batch = dpo.encode_preference_pairs(tok, ["1+2=", "10+20="], ["3", "30"], ["4", "300"])
    assert batch["prompt_tokens"].shape == (2, 7) and batch["chosen_tokens"].shape == (2, 4)
    assert tok.decode(batch["prompt_tokens"][0], skip_special_tokens=False) == "<pad><pad><bos>1+2="
    assert tok.decode(batch["rejected_tokens"][1], skip_special_tokens=False) == "300<eos>"
    np.testing.assert_array_equal(batch["chosen_mask"], [[1, 1, 0, 0], [1, 1, 1, 0]])
    np.testing.assert_array_equal(batch["prompt_mask"][0], [0, 0, 1, 1, 1, 1, 1])
    dpo.validate_preference_batch(batch)


@pytest.mark.parametrize("kwargs, match", [
    (dict(beta=0.0), "beta must be > 0"),
    (dict(beta=-1.0), "beta must be > 0"),
    (dict(loss_type="hinge"), "unknown preference loss 'hinge'; choose one of: sigmoid, ipo, orpo"),
    (dict(label_smoothing=0.5), r"label_smoothing must be in \[0, 0.5\)"),
    (dict(loss_type="ipo", label_smoothing=0.1), "IPO has no label-noise term"),
    (dict(lambda_orpo=-0.1), "lambda_orpo must be >= 0"),
    (dict(beta=float("nan")), "beta must be finite"),
])
def test_bad_config_values_name_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        dpo.DPOConfig(**kwargs)


def test_bad_trainer_arguments():
    model = create_model(CFG, seed=0)
    with pytest.raises(ValueError, match="uses no reference model"):
        dpo.DPOTrainer(model, create_model(CFG, seed=1), optax.sgd(0.1), quiet(), loss_type="orpo")
    with pytest.raises(ValueError, match="ref_model is the policy itself"):
        dpo.DPOTrainer(model, model, optax.sgd(0.1), quiet())
    other = create_model(ModelConfig.from_name("tiny-qwen3", vocab_size=23), seed=0)
    with pytest.raises(ValueError, match="vocab_size 23 but the policy has 19"):
        dpo.DPOTrainer(model, other, optax.sgd(0.1), quiet())
    with pytest.raises(ValueError, match="beta must be > 0"):
        dpo.DPOTrainer(model, None, optax.sgd(0.1), quiet(), beta=0)


def test_bad_batches_are_rejected_before_compiling():
    good = random_pairs()
    check = dpo.validate_preference_batch
    with pytest.raises(TypeError, match="must be a dict"):
        check([good])
    with pytest.raises(ValueError, match=r"missing \['rejected_mask'\]"):
        check({k: v for k, v in good.items() if k != "rejected_mask"})
    with pytest.raises(ValueError, match=r"unknown \['tokens'\]"):
        check(dict(good, tokens=good["prompt_tokens"]))
    with pytest.raises(ValueError, match="'rejected_tokens'.* has shape \\(4, 3\\), expected \\(4, 4\\)"):
        check(dict(good, rejected_tokens=good["rejected_tokens"][:, :3]))
    with pytest.raises(ValueError, match="'ref_chosen_logps' but not the other"):
        check(dict(good, ref_chosen_logps=np.zeros(4, np.float32)))
    with pytest.raises(ValueError, match="'ref_chosen_logps'.* has shape \\(3,\\), expected \\(4,\\)"):
        check(dict(good, ref_chosen_logps=np.zeros(3, np.float32), ref_rejected_logps=np.zeros(4, np.float32)))
    with pytest.raises(TypeError, match="integer ids"):
        check(dict(good, chosen_tokens=good["chosen_tokens"].astype(np.float32)))
    with pytest.raises(ValueError, match="row 1 is all zeros"):
        mask = good["chosen_mask"].copy()
        mask[1] = 0
        check(dict(good, chosen_mask=mask))
    with pytest.raises(ValueError, match="longer than max_seq_len=6"):
        check(good, max_seq_len=6)
    trainer = dpo.DPOTrainer(create_model(CFG, seed=0), None, optax.sgd(0.1), quiet(max_steps=2))
    with pytest.raises(ValueError, match="batch 0 has keys"):
        trainer.train([{"tokens": good["prompt_tokens"], "loss_mask": good["prompt_mask"]}])


def test_bad_text_inputs():
    _, tok = tiny.load()
    with pytest.raises(TypeError, match="prompts must be a list of str"):
        dpo.encode_preference_pairs(tok, "1+2=", ["3"], ["4"])
    with pytest.raises(ValueError, match="lengths 2, 1, 1"):
        dpo.encode_preference_pairs(tok, ["1+2=", "2+2="], ["3"], ["4"])
    with pytest.raises(ValueError, match="prompt 1 has 7 tokens, more than max_prompt_length=6"):
        dpo.encode_preference_pairs(tok, ["1+2=", "10+20="], ["3", "30"], ["4", "40"], max_prompt_length=6)
    with pytest.raises(ValueError, match="response 2 has 4 tokens, more than max_response_length=3"):
        dpo.encode_preference_pairs(tok, ["1+2=", "10+20="], ["3", "30"], ["300", "40"], max_response_length=3)
