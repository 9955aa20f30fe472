"""The GRPO learner's first step: which programs it compiles, and that a run with another seed would find every one of
them in a persistent compile cache (the same module and options: the same cache key), so a warm second run compiles
nothing. A seed, a PRNG key or a path closed over as a constant would change a key and fail here."""
import collections

import jax
import optax
import pytest
from jax._src import cache_key, compiler

from tunix_lit.data import arith
from tunix_lit.models import tiny
from tunix_lit.rl import learner as rl
from tunix_lit.rl.cluster import RLCluster, RolloutConfig
from tunix_lit.rl.grpo import GRPOConfig, GRPOLearner

DATA = arith.sample(arith.ArithConfig(), 32, "train", seed=4)


@pytest.fixture(scope="module")
def programs():
    """Every program handed to XLA while the module's tests run: (module name, persistent-cache key), in order."""
    seen = []
    inner = compiler.compile_or_get_cached

    def record(backend, computation, devices, compile_options, *args, **kwargs):
        name = str(computation.operation.attributes["sym_name"]).strip('"')
        seen.append((name, cache_key.get(computation, devices, compile_options, backend)))
        return inner(backend, computation, devices, compile_options, *args, **kwargs)

    compiler.compile_or_get_cached = record
    try:
        yield seen
    finally:
        compiler.compile_or_get_cached = inner


@pytest.fixture(scope="module")
def seed0(programs):
    """The programs of seed 0's first step (shared by the tests: one learner built, not two)."""
    return first_step(0, programs)


def first_step(seed: int, seen: list) -> list:
    """The programs a fresh tiny GRPO learner with `seed` (rollout, training and data order) compiles in one step."""
    model, tok = tiny.load()
    cluster = RLCluster(model, tok, rollout_config=RolloutConfig(max_new_tokens=6, max_prompt_length=8,
                                                                 temperature=1.0, seed=seed))
    cfg = rl.RLTrainingConfig(batch_size=4, max_steps=1, progress_bar=False, seed=seed)
    learner = GRPOLearner(cluster, optax.adam(1e-3), cfg, GRPOConfig(num_generations=2, beta=0.0),
                          reward_fns=[arith.reward])
    start = len(seen)
    learner.train(DATA[seed:] + DATA[:seed])
    assert learner.step == 1
    return seen[start:]


def test_the_first_step_compiles_few_programs(seed0):
    names = collections.Counter(n for n, _ in seed0)
    # one train step, one prefill and one decode (the sampler is built for the rollout's one sampling mode)
    assert names["jit_flat_step"] == 1 and names["jit__trace_prefill"] == 1 and names["jit__trace_decode"] == 1, names
    assert sum(names.values()) <= 24, names  # the rest: small helpers (advantages, key splits, stage copies)


def test_a_second_seed_finds_every_first_step_program_of_the_first(programs, seed0):
    one, two = seed0, first_step(3, programs)
    big = lambda ps: {k for n, k in ps if "train_step" in n or "flat_step" in n or "_trace_" in n}
    # the train step, the sampler's prefill and decode were each compiled anew for the new learner ...
    assert len(big(two)) >= 3, sorted(n for n, _ in two)
    # ... and each is the very program (same cache key) the first seed compiled
    missing = sorted(n for n, k in two if k not in {k for _, k in one})
    assert not missing, f"programs whose cache key depends on the seed: {missing}"

