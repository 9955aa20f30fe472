"""Upstream Tunix 0.1.7 running this project's Gemma 3 270M GRPO recipe, for the real-work comparison (its own venv).

    python benchmarks/upstream_real_grpo.py --model HF_DIR [--seed S] [--max-steps N] [--heldout-n N]

The settings come from `recipes/gemma3_270m_grpo.yaml` itself (LoRA rank and alpha, Adam's learning rate, prompts
a step, steps, G, beta, new tokens, prompt length, temperature, stop tokens, the data files), so both sides read one
file. `HF_DIR` is the float32 checkpoint directory `gemma_gguf_to_hf.py` writes (model.safetensors, config.json,
tokenizer.json). What upstream is given:

- the model: `gemma3.params_safetensors.create_model_from_safe_tensors(HF_DIR, ModelConfig.gemma3_270m())`, float32
  (upstream's default parameter type is bfloat16; ours loads this checkpoint as float32);
- LoRA: qwix's provider on every attention and MLP projection, which upstream's Gemma 3 names `q_einsum`,
  `kv_einsum` (k and v in one tensor, so one adapter for both), `attn_vec_einsum`, `gate_proj`, `up_proj`,
  `down_proj`; rank and alpha from the recipe; the adapters' initial key is the seed;
- `RLCluster` (vanilla rollout, actor, rollout and reference roles on one one-device mesh, no reference model: beta
  is 0) and `GRPOLearner` (`GRPOConfig(num_generations, num_iterations=1, beta, epsilon=0.2)`, the
  sequence-mean-token-mean loss: the recipe's), `optax.adam`, no checkpoints, no in-loop evaluation;
- the tokenizer: HF_DIR's tokenizer.json through the `tokenizers` library, in the duck-typed form upstream's
  `TokenizerAdapter` accepts (encode / decode / bos_id / eos_id / pad_id); upstream's sampler adds the <bos>;
- the data: the recipe's training rows in the order `tools/record_real_seeds.py` gives seed S (seed 0: file order;
  S > 0: the lines shuffled by `random.Random(S)`), cycled, cut into batches of the recipe's prompts a step;
  `RolloutConfig.seed = S` (upstream samples every step from that one key);
- the reward and the score: `recipes/real_sums.py`'s `reward` and `accuracy`, imported by path.

Held-out accuracy before and after: upstream's `Sampler`, greedy, the first `--heldout-n` held-out sums (all 100 by
default) in one batch, scored by `real_sums.accuracy`. Timings (`time.perf_counter`): the end of each global step is
when `RLCluster.update_actor` returns and the actor's weights are ready (`jax.block_until_ready`); first step from
the start of `learner.train` and from the start of this script; the median step over steps 2..N. Prints one
`RESULT {json}` line, the keys of `benchmarks/real_grpo.py`'s record where they apply.
"""
import time

T_SCRIPT = time.perf_counter()  # before every import that costs: "from process start" is measured from here

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_timing import step_figures  # noqa: E402  (both sides time their steps alike)

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "gemma3_270m_grpo.yaml"
# upstream's Gemma 3 names for the projections tunix_lit adapts by default (q, k, v, o, gate, up, down)
LORA_MODULES = ".*q_einsum|.*kv_einsum|.*attn_vec_einsum|.*gate_proj|.*up_proj|.*down_proj"


def load_recipe(path: Path = RECIPE) -> dict:
    """The recipe file as written (its sections as dicts)."""
    import yaml

    return yaml.safe_load(Path(path).read_text())


def train_lines(recipe: dict, seed: int, recipe_path: Path = RECIPE) -> list[str]:
    """The training file's lines in seed `seed`'s order: record_real_seeds' meaning (0: file order; else shuffled)."""
    lines = (recipe_path.parent / recipe["data"]["train"]).read_text().splitlines()
    if seed:
        random.Random(seed).shuffle(lines)
    return lines


def train_batches(rows: list[dict], batch: int, steps: int) -> list[dict]:
    """`steps` batches of `batch` consecutive rows, the rows cycled (tunix_lit's RL loop reads them so)."""
    flat = [rows[i % len(rows)] for i in range(batch * steps)]
    return [flat[i:i + batch] for i in range(0, len(flat), batch)]


def real_sums_module():
    """recipes/real_sums.py, imported by path (plain Python)."""
    spec = importlib.util.spec_from_file_location("real_sums", ROOT / "recipes" / "real_sums.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class HFTokenizer:
    """tokenizer.json through `tokenizers`, with the methods upstream's TokenizerAdapter asks of a custom tokenizer."""

    def __init__(self, directory: Path):
        import tokenizers

        self.tok = tokenizers.Tokenizer.from_file(str(Path(directory) / "tokenizer.json"))
        ids = {name: self.tok.token_to_id(name) for name in ("<bos>", "<eos>", "<pad>")}
        if None in ids.values():
            raise ValueError(f"{directory}/tokenizer.json lacks one of {list(ids)}: not Gemma's tokenizer")
        self._bos, self._eos, self._pad = ids["<bos>"], ids["<eos>"], ids["<pad>"]

    def encode(self, text: str, **_) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids  # upstream's sampler puts <bos> in front

    def decode(self, ids, **_) -> str:
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=True)

    def bos_id(self) -> int:
        return self._bos

    def eos_id(self) -> int:
        return self._eos

    def pad_id(self) -> int:
        return self._pad


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, type=Path, help="HF-style checkpoint directory (gemma_gguf_to_hf.py)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=None, help="default: the recipe's")
    p.add_argument("--heldout-n", type=int, default=None, help="the first N held-out sums (default: all)")
    p.add_argument("--train-micro-batch", type=int, default=None,
                   help="prompts per micro-batch (upstream's train_micro_batch_size; the update is the same): "
                        "for a chip whose memory one whole step's logits overflow")
    p.add_argument("--name", default="gemma3_270m_grpo")
    p.add_argument("--out", type=Path, default=None, help="also write the record here (JSON)")
    a = p.parse_args(argv)

    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    import qwix
    from flax import nnx
    from tunix.generate import sampler as sampler_lib
    from tunix.models.gemma3 import model as gemma3_lib
    from tunix.models.gemma3 import params_safetensors
    from tunix.rl import rl_cluster as rl_cluster_lib
    from tunix.rl.grpo import grpo_learner
    from tunix.rl.rollout import base_rollout

    t_imported = time.perf_counter()
    r = load_recipe()
    ro, tr, g = r["rollout"], r["training"], r["grpo"]
    if r["optimizer"]["name"] != "adam" or r.get("reference") is not None:
        raise SystemExit("this script mirrors an Adam recipe without a reference model; the recipe changed")
    steps = a.max_steps or int(tr["max_steps"])
    batch, G = int(tr["batch_size"]), int(g["num_generations"])
    real_sums = real_sums_module()
    rows = [json.loads(line) for line in train_lines(r, a.seed) if line.strip()]
    held = [json.loads(line) for line in (RECIPE.parent / r["data"]["heldout"]).read_text().splitlines()
            if line.strip()][:a.heldout_n]

    mesh = jax.make_mesh((1, 1), ("fsdp", "tp"), axis_types=(jax.sharding.AxisType.Auto,) * 2)
    config = gemma3_lib.ModelConfig.gemma3_270m()
    config.param_dtype = jnp.float32  # the checkpoint's type; ours loads it as float32 too
    t0 = time.perf_counter()
    with jax.set_mesh(mesh):
        base = params_safetensors.create_model_from_safe_tensors(str(a.model), config, mesh, dtype=jnp.float32)
        provider = qwix.LoraProvider(module_path=LORA_MODULES, rank=int(r["lora"]["rank"]),
                                     alpha=float(r["lora"]["alpha"]))
        actor = qwix.apply_lora_to_model(base, provider, rngs=nnx.Rngs(a.seed), **base.get_model_input())
    load_s = time.perf_counter() - t0
    lora_params = int(sum(x.size for x in jax.tree.leaves(nnx.state(actor, nnx.LoRAParam))))
    tokenizer = HFTokenizer(a.model)
    stop = [int(t) for t in ro["stop_tokens"]]
    prompt_len, new_tokens = int(ro["max_prompt_length"]), int(ro["max_new_tokens"])

    def heldout_accuracy(model) -> tuple[float, list]:
        """Greedy completions of the held-out prompts by upstream's Sampler, scored by real_sums.accuracy."""
        cache = sampler_lib.CacheConfig(cache_size=prompt_len + new_tokens, num_layers=config.num_layers,
                                        num_kv_heads=config.num_kv_heads, head_dim=config.head_dim)
        sampler = sampler_lib.Sampler(transformer=model, tokenizer=tokenizer, cache_config=cache)
        out = sampler([h["prompt"] for h in held], max_generation_steps=new_tokens, max_prompt_length=prompt_len,
                      eos_tokens=stop, temperature=0.0)
        scores = real_sums.accuracy([h["prompt"] for h in held], out.text, [h["answer"] for h in held])
        return float(np.mean(scores)), list(out.text)

    t0 = time.perf_counter()
    before, before_text = heldout_accuracy(actor)
    before_s = time.perf_counter() - t0

    rollout_config = base_rollout.RolloutConfig(
        max_tokens_to_generate=new_tokens, max_prompt_length=prompt_len, kv_cache_size=prompt_len + new_tokens,
        temperature=float(ro["temperature"]), top_p=ro["top_p"] if ro.get("top_p") else 1.0,
        top_k=ro.get("top_k"), eos_tokens=stop, seed=a.seed)
    training_config = rl_cluster_lib.RLTrainingConfig(
        actor_optimizer=optax.adam(float(r["optimizer"]["learning_rate"])), eval_every_n_steps=10 ** 9,
        max_steps=steps, checkpoint_root_directory=None,
        mini_batch_size=batch if a.train_micro_batch else None, train_micro_batch_size=a.train_micro_batch)
    cluster_config = rl_cluster_lib.ClusterConfig(
        role_to_mesh={rl_cluster_lib.Role.ACTOR: mesh, rl_cluster_lib.Role.REFERENCE: mesh,
                      rl_cluster_lib.Role.ROLLOUT: mesh},
        rollout_engine="vanilla", offload_to_cpu=False, training_config=training_config,
        rollout_config=rollout_config)
    cluster = rl_cluster_lib.RLCluster(actor=actor, reference=None, tokenizer=tokenizer, cluster_config=cluster_config)

    rewards = []  # one mean a call: one call a global step, or one a micro-batch with --train-micro-batch

    def reward(prompts, completions, answer, **_):
        scores = real_sums.reward(prompts, completions, answer)
        rewards.append(float(np.mean(scores)))
        return scores

    reward.__name__ = "reward"
    learner = grpo_learner.GRPOLearner(
        rl_cluster=cluster, reward_fns=[reward],
        algo_config=grpo_learner.GRPOConfig(num_generations=G, num_iterations=1, beta=float(g["beta"]),
                                            epsilon=float(g.get("epsilon", 0.2))))
    ends = []
    update_actor = cluster.update_actor

    def timed_update(*args, **kwargs):
        done = cluster.actor_trainer.train_steps
        out = update_actor(*args, **kwargs)
        if cluster.actor_trainer.train_steps > done:  # an optimizer step (micro-batches only accumulate)
            jax.block_until_ready(nnx.state(cluster.actor_trainer.model, nnx.LoRAParam))
            ends.append(time.perf_counter())
        return out

    cluster.update_actor = timed_update
    dataset = [{"prompts": np.array([x["prompt"] for x in b]), "answer": np.array([str(x["answer"]) for x in b])}
               for b in train_batches(rows, batch, steps)]
    t_train = time.perf_counter()
    learner.train(dataset)
    train_s = time.perf_counter() - t_train

    t0 = time.perf_counter()
    model = cluster.actor_trainer.model
    after, after_text = heldout_accuracy(model)
    after_s = time.perf_counter() - t0
    done = int(cluster.actor_trainer.train_steps)
    per = len(rewards) // done if done and len(rewards) % done == 0 else 1  # reward calls a step (micro-batches)
    rewards = [float(np.mean(rewards[i:i + per])) for i in range(0, len(rewards), per)]
    n = min(5, len(rewards))
    record = {"name": a.name, "side": "upstream", "seed": a.seed, "library": "google-tunix " + _version("google-tunix"),
              "backend": jax.default_backend(), "devices": [str(d) for d in jax.devices()],
              "host": platform.node(), "cpus": os.cpu_count(), "load_average": os.getloadavg(),
              "settings": {"batch_prompts": batch, "num_generations": G, "steps": steps, "beta": g["beta"],
                           "lora": r["lora"], "lora_modules": LORA_MODULES, "learning_rate": r["optimizer"]["learning_rate"],
                           "max_new_tokens": new_tokens, "max_prompt_length": prompt_len,
                           "temperature": ro["temperature"], "stop_tokens": stop, "rollout_seed": a.seed,
                           "heldout_n": len(held), "param_dtype": "float32",
                           "train_micro_batch": a.train_micro_batch},
              "steps": int(cluster.actor_trainer.train_steps), "lora_params": lora_params,
              "heldout_accuracy_before": before, "heldout_accuracy_after": after,
              "train_seconds": round(train_s, 1), "wall_seconds_in_process": round(time.perf_counter() - T_SCRIPT, 1),
              "import_s": round(t_imported - T_SCRIPT, 2), "load_s": round(load_s, 2),
              "heldout_eval_s": [round(before_s, 2), round(after_s, 2)],
              "reward_first_last": [float(np.mean(rewards[:n])), float(np.mean(rewards[-n:]))] if n else None,
              "rewards_per_step": [round(x, 4) for x in rewards],
              "eval_curve": [[0, before], [int(cluster.actor_trainer.train_steps), after]],
              **step_figures(t_train, ends, T_SCRIPT),
              "heldout_completions": {"before": before_text, "after": after_text}}
    print("RESULT " + json.dumps(record, default=float), flush=True)
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(record, indent=1, default=float))
    return 0


def _version(dist: str) -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
