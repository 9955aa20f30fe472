"""benchmarks/rollout_correction.py: the stale engine really lags k syncs, arms name their corrections, and the
summary's means and ranges are the runs' own."""

import types

import jax.numpy as jnp
import numpy as np
import pytest
from benchmark_scripts import load_benchmark
from flax import nnx



@pytest.fixture(scope="module")
def rc():
    return load_benchmark("rollout_correction")


class _Engine:
    """Keeps a copy of every weight it is handed, as a rollout engine's sync would."""

    def __init__(self):
        self.received = []

    def sync_weights(self, model):
        self.received.append(np.asarray(model.kernel.value).copy())
        return types.SimpleNamespace(bytes_moved=8, seconds=0.0)


class _Cluster:
    def __init__(self, actor):
        self.actor, self.rollout = actor, _Engine()
        self.sync_count, self.synced_bytes, self.last_sync = 0, 0, None

    def mark_policy(self):
        pass


@pytest.mark.parametrize("k", [1, 3])
def test_the_engine_gets_the_weights_of_k_syncs_ago(rc, k):
    actor = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    learner = object.__new__(rc.StaleEngineLearner)  # only the sync is under test: no model, no trainer
    learner.stale, learner._snapshots, learner._shadow = k, rc.collections.deque(maxlen=k + 1), None
    learner.cluster = _Cluster(actor)
    actual = []  # the actor's weights at each sync: the reference
    for step in range(6):
        actor.kernel.value = jnp.full((2, 2), float(step))  # a new weight each step, as an update would make
        actual.append(np.asarray(actor.kernel.value).copy())
        learner.sync_rollout()
    got = learner.cluster.rollout.received
    assert len(got) == 6 and learner.cluster.sync_count == 6 and learner.cluster.synced_bytes == 48
    for step in range(6):
        np.testing.assert_array_equal(got[step], actual[max(step - k, 0)])  # k behind; the first weights until then


def test_arms_name_their_corrections(rc):
    args = types.SimpleNamespace(level="token", mode="truncate", cap=2.0)
    assert rc.arm_correction("fresh", args)[0] is None and rc.arm_correction("stale", args)[0] is None
    assert rc.arm_correction("stale_corrected", args) == ("token", "truncate", 2.0)
    assert rc.arm_correction("stale_corrected_sequence_mask_3", args) == ("sequence", "mask", 3.0)
    for bad in ("stale_corrected_row_truncate_2", "stale_corrected_token_truncate_x", "stale_corrected_token"):
        with pytest.raises(ValueError, match="unknown arm"):
            rc.arm_correction(bad, args)


def test_summary_means_and_ranges_are_the_runs_own(rc):
    rng = np.random.default_rng(0)
    runs = []
    for arm, base in (("fresh", 0.6), ("stale", 0.1), ("stale_corrected", 0.3)):
        for seed in range(3):
            runs.append({"arm": arm, "seed": seed, "heldout_before": 0.4, "heldout_after": base + 0.1 * rng.uniform(),
                         "reward_last10": float(rng.uniform()), "logp_gap_max_mean": float(rng.uniform())})
    s = rc.summarise(runs)
    assert list(s) == ["fresh", "stale", "stale_corrected"]
    mean = {arm: sum(r["heldout_after"] for r in runs if r["arm"] == arm) / 3 for arm in s}
    assert s["stale_corrected"]["gap_recovered"] == pytest.approx(  # the share of the gap the correction closes
        (mean["stale_corrected"] - mean["stale"]) / (mean["fresh"] - mean["stale"]))
    for arm in s:
        after = [r["heldout_after"] for r in runs if r["arm"] == arm]
        assert s[arm]["seeds"] == 3
        assert s[arm]["heldout_after"]["mean"] == pytest.approx(sum(after) / 3)
        assert (s[arm]["heldout_after"]["min"], s[arm]["heldout_after"]["max"]) == (min(after), max(after))
        assert s[arm]["heldout_gain"]["mean"] == pytest.approx(sum(after) / 3 - 0.4)
        assert "is_weight_mean" not in s[arm]  # no weights were logged: none is made up
        assert arm.startswith("stale_corrected") or "gap_recovered" not in s[arm]


def test_the_sweeps_table_is_its_records_runs():
    """The one-seed sweep the record's setting was chosen from: each table row is a stored run, quoted unchanged."""
    import json
    from pathlib import Path
    results = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
    sweep = json.loads((results / "rollout_correction_sweep.json").read_text())
    earlier = json.loads((results / "rollout_correction_lr5e-4.json").read_text())
    assert sweep["table"] and all(rec["complete"] for rec in sweep["records"])
    for row in sweep["table"]:
        if row["from"] == "rollout_correction_lr5e-4.json":
            rec = earlier
        else:
            rec = sweep["records"][int(row["from"].removeprefix("records[").removesuffix("]"))]
        settings = rec["settings"]
        assert (settings["learning_rate"], settings["stale"]) == (row["learning_rate"], row["stale"])
        (run,) = [r for r in rec["runs"] if (r["arm"], r["seed"]) == (row["arm"], row["seed"])]
        assert run["heldout_after"] == row["heldout_after"]
    assert len(sweep["table"]) == sum(len(r["runs"]) for r in sweep["records"]) + \
        sum(r["seed"] == 0 for r in earlier["runs"])  # every run is in the table once
