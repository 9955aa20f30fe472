"""The PEFT trainer: loss against NumPy, token-weighted accumulation, trainable set by type, NaN stop, bad input."""
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import qwix
from flax import nnx

from tunix_lit.models.transformer import ModelConfig, create_model, make_mesh
from tunix_lit.sft import trainer as tr

CFG = ModelConfig.from_name("tiny-qwen3")
B, T = 4, 16


def make_batches(n, batch=B, seq=T, seed=0, ragged=False):
    """Random token batches; with `ragged`, each row keeps a different number of target positions."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        mask = np.ones((batch, seq), np.int32)
        if ragged:
            for r in range(batch):
                mask[r, rng.integers(2, seq):] = 0
        out.append(dict(tokens=rng.integers(0, CFG.vocab_size, (batch, seq)).astype(np.int32), loss_mask=mask))
    return out


def quiet(**kw):
    return tr.TrainingConfig(progress_bar=False, **kw)


def params_of(model, kind=nnx.Param):
    return {"/".join(map(str, k)): np.asarray(v.get_value()) for k, v in nnx.to_flat_state(nnx.state(model, kind))}


def test_next_token_loss_matches_numpy_formula():
    """loss = -Σ_t m[t+1] log softmax(logits[t])[tok[t+1]] / Σ_t m[t+1], in float64 NumPy."""
    model = create_model(CFG, seed=0)
    batch = make_batches(1, ragged=True)[0]
    out = tr.next_token_loss(model, {k: jnp.asarray(v) for k, v in batch.items()})
    logits = np.asarray(model(jnp.asarray(batch["tokens"]))[0], np.float64)
    logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) - logits.max(-1, keepdims=True)
    tok, m = batch["tokens"], batch["loss_mask"]
    nll = -np.take_along_axis(logp[:, :-1], tok[:, 1:, None], -1)[..., 0]
    expected_total, expected_weight = (nll * m[:, 1:]).sum(), m[:, 1:].sum()
    assert float(out.weight) == expected_weight
    np.testing.assert_allclose(float(out.total), expected_total, rtol=1e-5)


def test_gradient_accumulation_equals_one_large_batch():
    """4 micro-batches of 2 rows (different token counts) give the same SGD update as one batch of 8 rows."""
    big = make_batches(1, batch=8, ragged=True, seed=3)[0]
    micro = [{k: v[2 * i:2 * i + 2] for k, v in big.items()} for i in range(4)]
    counts = [int(m["loss_mask"][:, 1:].sum()) for m in micro]
    assert len(set(counts)) > 1  # unequal counts: a mean of means would differ
    one = tr.PeftTrainer(create_model(CFG, seed=0), optax.sgd(1.0), quiet(max_steps=1))
    one.train([big])
    acc = tr.PeftTrainer(create_model(CFG, seed=0), optax.sgd(1.0), quiet(max_steps=1, gradient_accumulation_steps=4))
    acc.train(micro)
    p0, p_one, p_acc = params_of(create_model(CFG, seed=0)), params_of(one.model), params_of(acc.model)
    worst = max(np.abs(p_one[k] - p_acc[k]).max() for k in p0)
    moved = max(np.abs(p_one[k] - p0[k]).max() for k in p0)
    assert worst < 1e-5 * moved, (worst, moved)
    _, (loss_one,) = one.metrics.history("loss")
    _, (loss_acc,) = acc.metrics.history("loss")
    assert loss_one == pytest.approx(loss_acc, rel=1e-5)
    # negative control: the mean of the micro-batch means is a different number
    mean_of_means = np.mean([float(tr.next_token_loss(create_model(CFG, seed=0), m).total) / c for m, c in zip(micro, counts)])
    assert abs(mean_of_means - loss_one) > 1e-4


def test_train_step_compiles_once_on_both_paths():
    for accumulation in (1, 2):
        t = tr.PeftTrainer(create_model(CFG), optax.adamw(1e-3), quiet(max_steps=3, gradient_accumulation_steps=accumulation))
        t.train(make_batches(6))
        assert t.step == 3 and t._train_step._cache_size() == 1


def test_lora_trains_only_lora_params():
    model = create_model(CFG, seed=0)
    provider = qwix.LoraProvider(module_path=".*q_proj|.*up_proj", rank=4, alpha=8.0)
    model = qwix.apply_lora_to_model(model, provider, jnp.zeros((1, 4), jnp.int32), rngs=nnx.Rngs(1))
    base0, lora0 = params_of(model, nnx.Not(nnx.LoRAParam)), params_of(model, nnx.LoRAParam)
    t = tr.PeftTrainer(model, optax.adamw(1e-2), quiet(max_steps=2))
    assert t.trainable == "lora"
    t.train(make_batches(2))
    base1, lora1 = params_of(t.model, nnx.Not(nnx.LoRAParam)), params_of(t.model, nnx.LoRAParam)
    assert all(np.array_equal(base0[k], base1[k]) for k in base0)
    assert any(not np.array_equal(lora0[k], lora1[k]) for k in lora0)
    with pytest.raises(ValueError, match="no nnx.LoRAParam"):
        tr.PeftTrainer(create_model(CFG), optax.sgd(0.1), quiet(), trainable="lora")


def poison_loss(model, batch, rng):
    """The default loss, but NaN for any batch whose first token is 7 (a marked batch)."""
    out = tr.next_token_loss(model, batch, rng)
    return out._replace(total=jnp.where(batch["tokens"][0, 0] == 7, jnp.nan, out.total))


def test_nan_loss_stops_naming_the_step_and_keeps_last_good_checkpoint(tmp_path):
    batches = make_batches(10)
    batches[4]["tokens"][0, 0] = 7  # step 5
    for b in batches[:4] + batches[5:]:
        b["tokens"][0, 0] = 8
    cfg = quiet(max_steps=10, save_every_n_steps=2, log_every_n_steps=10, checkpoint_dir=str(tmp_path / "ck"))
    t = tr.PeftTrainer(create_model(CFG), optax.adamw(1e-3), cfg, loss_fn=poison_loss)
    with pytest.raises(tr.NonFiniteLossError, match=r"loss is nan .* at step 5;.*last good checkpoint: step 4"):
        t.train(batches)
    assert t._checkpointer.steps() == [2, 4]  # the save at step 6 never happened
    assert all(np.isfinite(v).all() for v in params_of(t.model).values())
    # the model holds the step-4 state: identical to a clean run of 4 steps
    clean = tr.PeftTrainer(create_model(CFG), optax.adamw(1e-3), quiet(max_steps=4), loss_fn=poison_loss)
    clean.train(batches[:4])
    a, b = params_of(t.model), params_of(clean.model)
    assert all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("batch, error, match", [
    ([1, 2, 3], TypeError, "must be a dict"),
    (dict(tokens=np.zeros((2, 8), np.int32)), ValueError, r"missing \['loss_mask'\]"),
    (dict(tokens=np.zeros((2, 8), np.int32), loss_mask=np.ones((2, 8)), labels=1), ValueError, r"unknown \['labels'\]"),
    (dict(tokens=np.zeros((8,), np.int32), loss_mask=np.ones((8,))), ValueError, r"\[batch, seq\], got shape \(8,\)"),
    (dict(tokens=np.zeros((2, 8), np.int32), loss_mask=np.ones((2, 7))), ValueError, r"shape \(2, 7\), expected .* \(2, 8\)"),
    (dict(tokens=np.zeros((2, 8), np.float32), loss_mask=np.ones((2, 8))), TypeError, "integer ids"),
    (dict(tokens=np.zeros((2, 40), np.int32), loss_mask=np.ones((2, 40))), ValueError, "length 40, longer than max_seq_len=32"),
    (dict(tokens=np.zeros((2, 8), np.int32), loss_mask=np.ones((2, 8)), attention_mask=np.ones((2, 8, 7))), ValueError, "attention_mask"),
])
def test_bad_batches_give_clear_errors(batch, error, match):
    t = tr.PeftTrainer(create_model(CFG), optax.sgd(0.1), quiet(max_steps=1, max_seq_len=32))
    with pytest.raises(error, match=match):
        t.train([batch])


def test_batch_of_another_shape_is_refused():
    t = tr.PeftTrainer(create_model(CFG), optax.sgd(0.1), quiet(max_steps=2))
    with pytest.raises(ValueError, match="batch 1 has shapes .* first batch had"):
        t.train(make_batches(1) + make_batches(1, seq=8))


@pytest.mark.parametrize("field, value", [("max_steps", 0), ("gradient_accumulation_steps", -1),
                                          ("eval_every_n_steps", 0), ("max_seq_len", 1.5), ("save_every_n_steps", True)])
def test_config_validation_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"TrainingConfig.{field} must be a positive integer, got {value!r}"):
        tr.TrainingConfig(**{field: value})


def test_metrics_jsonl_tensorboard_eval_and_hooks(tmp_path):
    calls = []

    class Record(tr.TrainingHooks):
        def on_train_start(self, trainer): calls.append("start")
        def on_step_end(self, trainer, step): calls.append(("step", step))
        def on_log(self, trainer, step, metrics): calls.append(("log", step))
        def on_eval_end(self, trainer, step, metrics): calls.append(("eval", step))
        def on_train_end(self, trainer, result): calls.append("end")

    cfg = quiet(max_steps=4, eval_every_n_steps=2, log_every_n_steps=2, log_dir=str(tmp_path))
    t = tr.PeftTrainer(create_model(CFG), optax.adamw(1e-3), cfg, hooks=[Record()])
    result = t.train(make_batches(4), eval_data=make_batches(2, seed=9))
    t.close()
    assert calls == ["start", ("step", 1), ("step", 2), ("log", 2), ("eval", 2), ("step", 3), ("step", 4), ("log", 4),
                     ("eval", 4), "end"]
    rows = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    assert [(r["mode"], r["step"]) for r in rows] == [("train", 1), ("train", 2), ("eval", 2), ("train", 3), ("train", 4), ("eval", 4)]
    assert math.isclose(rows[0]["perplexity"], math.exp(rows[0]["loss"]), rel_tol=1e-6)
    assert list(tmp_path.glob("events.out.tfevents.*"))
    assert result.eval_metrics["tokens"] == 2 * B * (T - 1)
    steps, losses = t.metrics.history("loss")
    assert steps == [1, 2, 3, 4] and losses[-1] < losses[0]


def test_sharded_training_matches_single_device():
    """Batch split over fsdp on a (2, 4) mesh: same losses as on one device."""
    mesh = make_mesh(2, 4)
    batches = make_batches(2)
    single = tr.PeftTrainer(create_model(CFG, seed=0), optax.adamw(1e-3), quiet(max_steps=2))
    single.train(batches)
    sharded = tr.PeftTrainer(create_model(CFG, seed=0, mesh=mesh), optax.adamw(1e-3), quiet(max_steps=2), mesh=mesh)
    batch = sharded._prepare([batches[0]])
    assert batch["tokens"].sharding.spec == jax.sharding.PartitionSpec(("fsdp",))
    with jax.set_mesh(mesh):
        sharded.train(batches)
    np.testing.assert_allclose(sharded.metrics.history("loss")[1], single.metrics.history("loss")[1], rtol=1e-5)
    assert sharded._train_step._cache_size() == 1
    with pytest.raises(ValueError, match="batch size 3 does not split over mesh axes \\('fsdp',\\)"):
        tr.shard_batch(make_batches(1, batch=3)[0], mesh)


# -- the extension surface: prepare / apply_update / pop_metrics / sync_model / rng / load_state ----------

def test_extra_metrics_average_over_micro_batches_except_max_ones():
    """With accumulation, an extra metric is the mean of the micro-batches' values; one named *_max is their max."""
    def loss(model, batch, rng):
        out = tr.next_token_loss(model, batch, rng)
        first = batch["tokens"][0, 0].astype(jnp.float32)  # a different number in every micro-batch
        return tr.LossOutput(out.total, out.weight, {"first": first, "first_max": -first})

    micro = make_batches(3, batch=2, seed=7)
    firsts = [float(m["tokens"][0, 0]) for m in micro]
    assert len(set(firsts)) == 3
    t = tr.PeftTrainer(create_model(CFG, seed=0), optax.sgd(0.1), quiet(max_steps=1, gradient_accumulation_steps=3),
                       loss_fn=loss)
    t.apply_update(t.prepare(micro))
    (row,) = t.pop_metrics()
    assert row["first"] == pytest.approx(np.mean(firsts), rel=1e-6)
    assert row["first_max"] == pytest.approx(max(-f for f in firsts), rel=1e-6)  # negative values: -inf start, not 0


@pytest.mark.slow  # 15 s; the default run drives the step through train() in every other trainer test
def test_apply_update_twice_equals_two_train_steps():
    """Driving the step by hand gives the same parameters and losses as `train` on the same batches."""
    batches = make_batches(4, ragged=True, seed=5)
    looped = tr.PeftTrainer(create_model(CFG, seed=0), optax.adamw(1e-2), quiet(max_steps=2, gradient_accumulation_steps=2))
    looped.train(batches)
    manual = tr.PeftTrainer(create_model(CFG, seed=0), optax.adamw(1e-2), quiet(max_steps=2, gradient_accumulation_steps=2))
    for pair in (batches[:2], batches[2:]):
        manual.apply_update(manual.prepare(pair))
    assert manual.step == 2 and len(manual._pending) == 2  # nothing read back yet
    rows = manual.pop_metrics()
    assert manual.pop_metrics() == []  # the queue was emptied by one read
    p0, a, b = params_of(create_model(CFG, seed=0)), params_of(manual.model), params_of(looped.model)
    assert max(np.abs(a[k] - p0[k]).max() for k in a) > 1e-3  # both really moved
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=0, atol=1e-6)
    np.testing.assert_allclose([r["loss"] for r in rows], looped.metrics.history("loss")[1], rtol=1e-6)
    assert manual._train_step._cache_size() == 1


def test_prepare_stacks_places_and_checks_shapes():
    if jax.device_count() < 8:
        pytest.skip("needs 8 devices for its 2 × 4 mesh")
    mesh = make_mesh(2, 4)
    t = tr.PeftTrainer(create_model(CFG, seed=0, mesh=mesh), optax.sgd(0.1), quiet(gradient_accumulation_steps=2), mesh=mesh)
    micro = make_batches(2, batch=8)
    batch = t.prepare(micro)
    assert batch["tokens"].shape == (2, 8, T)
    assert batch["tokens"].sharding.spec == jax.sharding.PartitionSpec(None, ("fsdp",))
    np.testing.assert_array_equal(np.asarray(batch["tokens"][1]), micro[1]["tokens"])
    with pytest.raises(ValueError, match="got 1 micro-batches; .* gradient_accumulation_steps=2"):
        t.prepare(micro[:1])
    with pytest.raises(ValueError, match=r"batch 1 has shapes .*\(4, 16\).*expected .*\(8, 16\)"):
        t.prepare([micro[0], make_batches(1, batch=4)[0]])
    with pytest.raises(ValueError, match=r"batch 0 has shapes .*\(8, 12\).* but the first batch had .*\(8, 16\)"):
        t.prepare(make_batches(2, batch=8, seq=12))
    # any batch format passes (RL's has per-row scalars); the SFT split check is not prepare's
    u = tr.PeftTrainer(create_model(CFG, seed=0, mesh=mesh), optax.sgd(0.1), quiet(), mesh=mesh)
    odd = u.prepare([dict(tokens=np.zeros((3, T), np.int32), advantages=np.ones((3,), np.float32))])
    assert odd["advantages"].shape == (3,) and odd["tokens"].sharding.spec == jax.sharding.PartitionSpec(None)
    with pytest.raises(ValueError, match="batch size 3 does not split"):
        u._prepare([make_batches(1, batch=3)[0]])


def test_pop_metrics_stops_at_a_nan_and_keeps_the_last_good_state():
    batches = make_batches(3)
    batches[1]["tokens"][0, 0] = 7  # the second update is poisoned
    for b in (batches[0], batches[2]):
        b["tokens"][0, 0] = 8
    t = tr.PeftTrainer(create_model(CFG, seed=0), optax.adamw(1e-3), quiet(), loss_fn=poison_loss)
    for b in batches:
        t.apply_update(t.prepare([b]))
    with pytest.raises(tr.NonFiniteLossError, match="loss is nan .* at step 2"):
        t.pop_metrics()
    assert t.step == 1
    one = tr.PeftTrainer(create_model(CFG, seed=0), optax.adamw(1e-3), quiet(), loss_fn=poison_loss)
    one.apply_update(one.prepare(batches[:1]))
    a, b = params_of(t.model), params_of(one.model)
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_load_state_puts_params_optimizer_rng_and_step_in_place():
    """Restoring the state after update 1 into a fresh trainer, then update 2, equals updates 1 and 2 in one trainer."""
    batches = make_batches(2, seed=11)
    first = tr.PeftTrainer(create_model(CFG, seed=0), optax.adamw(1e-2), quiet())
    first.apply_update(first.prepare(batches[:1]))
    copy = lambda tree: jax.tree.map(jnp.copy, tree)  # the next update donates (deletes) the live buffers
    saved = (copy(nnx.state(first.model, first.wrt)), copy(nnx.state(first.optimizer)), copy(first.rng), first.step)
    first.apply_update(first.prepare(batches[1:]))
    second = tr.PeftTrainer(create_model(CFG, seed=3), optax.adamw(1e-2), quiet(seed=99))
    second.load_state(*saved)
    assert second.step == 1
    np.testing.assert_array_equal(jax.random.key_data(second.rng), jax.random.key_data(saved[2]))
    second.apply_update(second.prepare(batches[1:]))
    a, b = params_of(first.model), params_of(second.model)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=0, atol=1e-6)
    np.testing.assert_array_equal(jax.random.key_data(first.rng), jax.random.key_data(second.rng))
    assert second.step == 2 and second._train_step._cache_size() == 1
