"""Orbax checkpoints: round trip, LoRA-only, mismatch errors, corrupted / stale fallback, SIGKILL and SIGTERM resume."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import qwix
from flax import nnx

from tunix_lit.models.transformer import ModelConfig, create_model
from tunix_lit.sft import checkpoint as ck
from tunix_lit.sft import trainer as tr

CFG = ModelConfig.from_name("tiny-qwen3")
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("resume_script.py")


def batches(n, seed=0):
    rng = np.random.default_rng(seed)
    return [dict(tokens=rng.integers(0, 512, (2, 8)).astype(np.int32), loss_mask=np.ones((2, 8), np.int32))
            for _ in range(n)]


def flat(state):
    return {"/".join(map(str, k)): np.asarray(v.get_value()) for k, v in nnx.to_flat_state(state)}


def lora_model(rank=4):
    provider = qwix.LoraProvider(module_path=".*q_proj|.*up_proj", rank=rank, alpha=8.0)
    return qwix.apply_lora_to_model(create_model(CFG, seed=0), provider, jnp.zeros((1, 4), jnp.int32), rngs=nnx.Rngs(1))


def run(directory, model=None, steps=4, **kw):
    cfg = tr.TrainingConfig(max_steps=steps, checkpoint_dir=str(directory), save_every_n_steps=2, progress_bar=False, **kw)
    t = tr.PeftTrainer(model or create_model(CFG, seed=0), optax.adamw(1e-3), cfg)
    t.train(batches(steps * kw.get("gradient_accumulation_steps", 1)))
    return t


def test_round_trip_restores_params_optimizer_step_position_and_rng(tmp_path):
    t = run(tmp_path, steps=4, gradient_accumulation_steps=2, seed=5)
    assert t._checkpointer.steps() == [2, 4]
    fresh = tr.PeftTrainer(create_model(CFG, seed=1), optax.adamw(1e-3),
                           tr.TrainingConfig(max_steps=4, checkpoint_dir=str(tmp_path), progress_bar=False))
    assert fresh.restore_checkpoint() == 4
    assert (fresh.step, fresh.data_position) == (4, 8)
    for got, want in ((flat(nnx.state(fresh.model, nnx.Param)), flat(nnx.state(t.model, nnx.Param))),
                      (flat(nnx.state(fresh.optimizer)), flat(nnx.state(t.optimizer)))):
        assert got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in got)
    assert np.array_equal(jax.random.key_data(fresh._carry[1]), jax.random.key_data(t._carry[1]))


def test_keep_n_keeps_the_newest(tmp_path):
    t = run(tmp_path, steps=8, max_to_keep=2)
    assert t._checkpointer.steps() == [6, 8]


def test_lora_checkpoint_holds_only_lora_and_refuses_other_models(tmp_path):
    t = run(tmp_path, model=lora_model(rank=4), steps=2)
    saved = ck.flatten_tree(t._checkpointer._manager.item_metadata(2)["params"].tree)
    assert saved and all("lora" in k for k in saved)
    full = tr.PeftTrainer(create_model(CFG), optax.adamw(1e-3),
                          tr.TrainingConfig(checkpoint_dir=str(tmp_path), progress_bar=False))
    with pytest.raises(ck.CheckpointMismatchError, match=r"parameter leaf 'embedder/embedding' has shape absent in the "
                                                          r"checkpoint but \(512, 64\) in the model .*LoRA parameters only"):
        full.restore_checkpoint()
    other = tr.PeftTrainer(lora_model(rank=8), optax.adamw(1e-3),
                           tr.TrainingConfig(checkpoint_dir=str(tmp_path), progress_bar=False))
    with pytest.raises(ck.CheckpointMismatchError,
                       match=r"leaf 'layers/0/attn/q_proj/kernel_lora_a' has shape \(64, 4\) in the checkpoint but \(64, 8\)"):
        other.restore_checkpoint()


def test_corrupted_latest_checkpoint_falls_back_to_previous(tmp_path):
    run(tmp_path, steps=4)
    for f in (tmp_path / "4" / "params" / "d").iterdir():  # truncate the array data of the newest step
        with open(f, "r+b") as fh:
            fh.truncate(f.stat().st_size // 2)
    fresh = tr.PeftTrainer(create_model(CFG), optax.adamw(1e-3),
                           tr.TrainingConfig(checkpoint_dir=str(tmp_path), progress_bar=False))
    with pytest.warns(UserWarning, match=r"checkpoint step 4 at .*/4 is unreadable.*falling back"):
        assert fresh.restore_checkpoint() == 2


def test_missing_file_and_all_unreadable(tmp_path):
    run(tmp_path, steps=2)
    (tmp_path / "2" / "meta" / "metadata").unlink()
    c = ck.Checkpointer(tmp_path)
    with pytest.warns(UserWarning, match="step 2"), pytest.raises(RuntimeError, match="no readable checkpoint"):
        c.restore(nnx.state(create_model(CFG), nnx.Param))


def test_stale_temporary_from_a_killed_save_is_reported_and_ignored(tmp_path):
    run(tmp_path, steps=4)
    stale = tmp_path / "6.orbax-checkpoint-tmp-1733000000"
    shutil.copytree(tmp_path / "4", stale)
    (stale / "params" / "_METADATA").unlink()
    with pytest.warns(UserWarning, match=f"unfinished checkpoint save at {stale}"):
        c = ck.Checkpointer(tmp_path)
    assert c.steps() == [2, 4] and not stale.exists()
    assert c.restore(nnx.state(create_model(CFG), nnx.Param)).step == 4


def test_stop_request_then_resume_in_process_is_bit_identical(tmp_path):
    """Stop after step 3 (what SIGTERM does), resume in a new trainer: same params as 6 straight steps."""

    class StopAt(tr.TrainingHooks):
        def on_step_end(self, trainer, step):
            if step == 3:
                trainer.request_stop()

    cfg = tr.TrainingConfig(max_steps=6, save_every_n_steps=100, checkpoint_dir=str(tmp_path), progress_bar=False)
    first = tr.PeftTrainer(create_model(CFG, seed=0), optax.adamw(1e-3), cfg, hooks=[StopAt()])
    r1 = first.train(batches(6))
    assert (r1.stop_reason, r1.step) == ("requested", 3) and first._checkpointer.steps() == [3]
    second = tr.PeftTrainer(create_model(CFG, seed=0), optax.adamw(1e-3), cfg)
    r2 = second.train(batches(6))
    assert (r2.start_step, r2.step) == (3, 6)
    straight = tr.PeftTrainer(create_model(CFG, seed=0), optax.adamw(1e-3), tr.TrainingConfig(max_steps=6, progress_bar=False))
    straight.train(batches(6))
    a, b = flat(nnx.state(second.model, nnx.Param)), flat(nnx.state(straight.model, nnx.Param))
    assert all(np.array_equal(a[k], b[k]) for k in a)


# -- subprocess runs: SIGKILL and SIGTERM ------------------------------------------------------------------
def spawn(ckpt, out, *extra):
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", XLA_FLAGS="")
    return subprocess.Popen([sys.executable, str(SCRIPT), str(ckpt), str(out), *extra], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc, timeout=300):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def same(a, b):
    a, b = np.load(a), np.load(b)
    return a.files == b.files and all(np.array_equal(a[k], b[k]) for k in a.files)


@pytest.mark.slow
def test_sigkill_then_resume_is_bit_identical_and_forgetting_the_position_is_not(tmp_path):
    """Kill a run mid-way (SIGKILL), resume it: final params equal an uninterrupted run's, bit for bit."""
    marker = tmp_path / "marker"
    reference = spawn(tmp_path / "ref", tmp_path / "ref.npz")
    victim = spawn(tmp_path / "ck", tmp_path / "never.npz", "--sleep", "0.3", "--marker", str(marker))
    deadline = time.time() + 300
    while time.time() < deadline and not (marker.exists() and len(marker.read_text().split()) >= 5):
        time.sleep(0.05)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert victim.returncode == -signal.SIGKILL
    assert finish(reference)["step"] == 12
    shutil.copytree(tmp_path / "ck", tmp_path / "ck_control")
    resumed = spawn(tmp_path / "ck", tmp_path / "resumed.npz")
    control = spawn(tmp_path / "ck_control", tmp_path / "control.npz", "--forgetful-data")
    r, c = finish(resumed), finish(control)
    assert r["resumed_from"] >= 2 and r["step"] == 12 and c["resumed_from"] == r["resumed_from"]
    assert same(tmp_path / "resumed.npz", tmp_path / "ref.npz")
    assert not same(tmp_path / "control.npz", tmp_path / "ref.npz")  # the test can fail


@pytest.mark.slow
def test_sigterm_finishes_the_step_saves_exits_cleanly_and_resumes_there(tmp_path):
    reference = spawn(tmp_path / "ref", tmp_path / "ref.npz")
    first = spawn(tmp_path / "ck", tmp_path / "first.npz", "--sigterm-at", "5")
    out = finish(first)  # exit code 0
    assert out == dict(resumed_from=0, step=5, stop_reason="sigterm")
    assert 5 in ck.Checkpointer(tmp_path / "ck").steps()
    second = finish(spawn(tmp_path / "ck", tmp_path / "second.npz"))
    assert second == dict(resumed_from=5, step=12, stop_reason="max_steps")
    finish(reference)
    assert same(tmp_path / "second.npz", tmp_path / "ref.npz")
