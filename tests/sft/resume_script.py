"""A small training run for the resume tests (run as a subprocess; not collected by pytest).

  python resume_script.py CKPT_DIR OUT.npz [--max-steps 12] [--sleep 0] [--sigterm-at N]
                          [--forgetful-data] [--marker FILE]

Trains tiny-qwen3 on a deterministic stream of batches with a loss that uses the trainer's RNG (random
token dropout), so both the data position and the RNG must be restored for a resumed run to match.
Writes the final trainable parameters to OUT.npz and one JSON line (result) to stdout.
"""
import argparse
import json
import os
import signal
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402

from tunix_lit.models.transformer import ModelConfig, create_model  # noqa: E402
from tunix_lit.sft import trainer as tr  # noqa: E402

B, T = 4, 16


class Stream:
    """Batch i is a pure function of i; `seek` is how a resumed run skips what was consumed."""

    def __init__(self, forgetful=False):
        self.start, self.forgetful = 0, forgetful

    def seek(self, n):
        self.start = 0 if self.forgetful else n  # negative control: a source that forgets its position

    def __iter__(self):
        for i in range(self.start, 10_000):
            rng = np.random.default_rng(i)
            yield dict(tokens=rng.integers(0, 512, (B, T)).astype(np.int32), loss_mask=np.ones((B, T), np.int32))


def dropout_loss(model, batch, rng):
    """Next-token loss on a random half of the target positions: the RNG matters."""
    keep = jax.random.bernoulli(rng, 0.5, batch["loss_mask"].shape)
    return tr.next_token_loss(model, dict(batch, loss_mask=batch["loss_mask"] * keep), rng)


class Steer(tr.TrainingHooks):
    def __init__(self, args):
        self.args = args

    def on_step_end(self, trainer, step):
        if self.args.marker:
            with open(self.args.marker, "a") as f:
                f.write(f"{step}\n")
        if step == self.args.sigterm_at:
            os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(self.args.sleep)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("ckpt")
    p.add_argument("out")
    p.add_argument("--max-steps", type=int, default=12)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--sigterm-at", type=int, default=-1)
    p.add_argument("--forgetful-data", action="store_true")
    p.add_argument("--marker", default=None)
    args = p.parse_args()
    model = create_model(ModelConfig.from_name("tiny-qwen3"), seed=0)
    cfg = tr.TrainingConfig(max_steps=args.max_steps, checkpoint_dir=args.ckpt, save_every_n_steps=2,
                            max_to_keep=3, log_every_n_steps=1, progress_bar=False, seed=1)
    trainer = tr.PeftTrainer(model, optax.adamw(1e-3), cfg, loss_fn=dropout_loss, hooks=[Steer(args)])
    result = trainer.train(Stream(args.forgetful_data))
    trainer.close()
    params = {"/".join(map(str, k)): np.asarray(v.get_value()) for k, v in nnx.to_flat_state(nnx.state(trainer.model, nnx.Param))}
    np.savez(args.out, **params)
    print(json.dumps(dict(resumed_from=result.start_step, step=result.step, stop_reason=result.stop_reason)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
