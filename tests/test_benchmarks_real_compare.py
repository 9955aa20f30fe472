"""The real-work comparison's bookkeeping: the summary of part records, and what a seed changes on each side."""
import json
import random
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark_scripts import load_benchmark

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def compare():
    return load_benchmark("real_grpo_compare")


def _run(side, seed, rng, good=True):
    steps = [round(rng.uniform(20, 90), 3)] + [round(rng.uniform(0.5, 3.0), 4) for _ in range(5)]
    before, after = rng.choice([0.38, 0.4, 0.42]), round(rng.uniform(0.4, 0.9), 2)
    result = {"side": side, "seed": seed, "steps": 6, "heldout_accuracy_before": before,
              "heldout_accuracy_after": after, "step_seconds": steps, "first_step_s": steps[0],
              "first_step_s_from_process_start": steps[0] + rng.uniform(10, 40),
              "median_step_s": statistics.median(steps[1:]), "train_seconds_to_last_step": sum(steps)}
    return {"side": side, "seed": seed, "rc": 0 if good else 1, "timed_out": False,
            "wall_s": round(rng.uniform(100, 200), 1), **({"result": result} if good else {"tail": "boom"})}


def test_summary_means_ranges_and_ratios_match_a_plain_computation(compare, tmp_path):
    rng = random.Random(7)
    runs = [_run(side, seed, rng) for seed in (0, 1, 2) for side in compare.order(seed)]
    # part 1 holds seed 0 and a failed try of seed 1's upstream run; part 2 repeats that run, which then succeeds
    failed = _run("upstream", 1, rng, good=False)
    (tmp_path / "a.json").write_text(json.dumps({"runs": runs[:2] + [failed], "machine": {"host": "a"}}))
    (tmp_path / "b.json").write_text(json.dumps({"runs": runs[2:], "machine": {"host": "b"}}))
    out = tmp_path / "all.json"
    compare.main(["--summarise", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--out", str(out)])
    record = json.loads(out.read_text())
    s = record["summary"]
    assert len(record["runs"]) == 6 and s["failed"] == []  # the good repeat replaced the failed try
    for side in ("ours", "upstream"):
        res = [r["result"] for r in runs if r["side"] == side]
        after = [x["heldout_accuracy_after"] for x in res]
        assert s["sides"][side]["heldout_accuracy_after"] == pytest.approx(
            {"mean": sum(after) / 3, "min": min(after), "max": max(after), "n": 3})
        pooled = [t for x in res for t in x["step_seconds"][1:]]
        assert s["sides"][side]["median_step_s"] == pytest.approx(statistics.median(pooled), abs=1e-4)
        assert s["sides"][side]["first_step_s"]["mean"] == pytest.approx(sum(x["step_seconds"][0] for x in res) / 3)
    mean = lambda side, key: sum(r["result"][key] for r in runs if r["side"] == side) / 3
    pooled = {side: statistics.median([t for r in runs if r["side"] == side for t in r["result"]["step_seconds"][1:]])
              for side in ("ours", "upstream")}
    ratios = s["ours_over_upstream"]
    assert ratios["median_step_s"] == pytest.approx(pooled["ours"] / pooled["upstream"], rel=1e-3)
    assert ratios["first_step_s"] == pytest.approx(mean("ours", "first_step_s") / mean("upstream", "first_step_s"),
                                                   rel=1e-3)
    assert ratios["first_step_s_from_process_start"] == pytest.approx(
        mean("ours", "first_step_s_from_process_start") / mean("upstream", "first_step_s_from_process_start"),
        rel=1e-3)
    assert s["heldout_after_minus_upstream"] == pytest.approx(
        mean("ours", "heldout_accuracy_after") - mean("upstream", "heldout_accuracy_after"))


def test_a_failed_run_is_reported_and_left_out(compare):
    rng = random.Random(3)
    runs = [_run("ours", 0, rng), _run("upstream", 0, rng, good=False)]
    s = compare.summarise(runs)
    assert list(s["sides"]) == ["ours"] and "ours_over_upstream" not in s
    assert s["failed"] == [{"side": "upstream", "seed": 0, "rc": 1, "timed_out": False, "wall_s": runs[1]["wall_s"],
                            "tail": "boom"}]


def test_sides_alternate_per_seed_and_runs_append(compare, tmp_path):
    assert [compare.order(s) for s in (0, 1, 2)] == [["upstream", "ours"], ["ours", "upstream"], ["upstream", "ours"]]
    assert compare.order(1, ["upstream"]) == ["upstream"]
    path = tmp_path / "part.json"
    compare.append_run(path, {"side": "ours", "seed": 0}, {"machine": 1})
    compare.append_run(path, {"side": "upstream", "seed": 0}, {"machine": 1})
    assert [r["side"] for r in json.loads(path.read_text())["runs"]] == ["ours", "upstream"]
    argv = compare.command("ours", 2, Path("/m"), "py", max_steps=3)
    assert argv[:6] == ["py", "benchmarks/real_grpo.py", "--model", "/m", "--seed", "2"] and "--max-steps" in argv
    assert "--set" not in compare.command("upstream", 2, Path("/m"), "py")  # the overrides are ours' alone
    probed = compare.command("ours", 1, Path("/m"), "py", ours_sets=["grpo.prompt_once=false"], probe=True)
    assert "--probe" in probed and probed[probed.index("--set") + 1:] == [*compare.OURS_SETS, "grpo.prompt_once=false"]
    upstream = compare.command("upstream", 1, Path("/m"), "py", ours_sets=["grpo.prompt_once=false"], probe=True)
    assert "--probe" not in upstream and "grpo.prompt_once=false" not in upstream


def _record_real_seeds_train_file(seed, monkeypatch):
    """The training file record_real_seeds hands `tunix-lit train` for `seed`, caught before the run starts."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import record_real_seeds
    finally:
        sys.path.remove(str(ROOT / "tools"))
    seen = {}

    class Caught(Exception):
        pass

    def fake_run(cmd, **_):
        train = next(c for c in cmd if c.startswith("data.train="))[len("data.train="):]
        seen["lines"] = Path(train).read_text().splitlines()
        seen["sets"] = [c for c in cmd if c.startswith(("rollout.seed=", "training.seed="))]
        raise Caught

    monkeypatch.setattr(record_real_seeds.subprocess, "run", fake_run)
    with pytest.raises(Caught):
        record_real_seeds.run_seed("gemma3_270m_grpo", seed, [])
    return seen


@pytest.mark.parametrize("seed", [0, 2])
def test_both_sides_train_on_record_real_seeds_order(seed, monkeypatch):
    want = _record_real_seeds_train_file(seed, monkeypatch)
    ours, upstream = load_benchmark("real_grpo"), load_benchmark("upstream_real_grpo")
    train = ROOT / "recipes" / "data" / "sums20_train.jsonl"
    assert ours.seed_lines(train.read_text().splitlines(), seed) == want["lines"]
    sets = ours.seed_overrides(seed, Path("x.jsonl"))
    assert sets[0] == "data.train=x.jsonl" and sets[1:] == want["sets"]
    recipe = upstream.load_recipe()
    assert upstream.train_lines(recipe, seed) == want["lines"]
    # upstream's batches: the rows in that order, cycled, 16 a step, as our RL loop reads them
    rows = [json.loads(line) for line in want["lines"]]
    batches = upstream.train_batches(rows, 16, 30)
    assert len(batches) == 30 and all(len(b) == 16 for b in batches)
    flat = [r for b in batches for r in b]
    assert flat[:len(rows)] == rows and flat[len(rows):] == rows[:480 - len(rows)]
    assert (seed == 0) == (want["lines"] == train.read_text().splitlines())


def test_the_upstream_script_imports_neither_library_at_load():
    code = ("import sys; sys.path.insert(0, 'tests'); from benchmark_scripts import load_benchmark; "
            "load_benchmark('upstream_real_grpo'); load_benchmark('real_grpo_compare'); "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('tunix', 'tunix_lit', 'jax')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_step_figures_from_step_end_times():
    up = load_benchmark("upstream_real_grpo")
    ours = load_benchmark("real_grpo")
    ends = [10.0, 12.5, 13.0, 16.0]
    for mod in (up, ours):
        f = mod.step_figures(4.0, ends, script_start=1.0)
        assert f["step_seconds"] == [6.0, 2.5, 0.5, 3.0] and f["first_step_s"] == 6.0
        assert f["first_step_s_from_process_start"] == 9.0 and f["median_step_s"] == 2.5
        assert f["train_seconds_to_last_step"] == 12.0


def test_copy_like_unzips_the_tokenizer_and_keeps_what_it_is_told(compare, tmp_path):
    import gzip

    like, dest = tmp_path / "like", tmp_path / "dest"
    like.mkdir()
    dest.mkdir()
    (like / "config.json").write_text("like's")
    (like / "generation_config.json").write_text("{}")
    with gzip.open(like / "tokenizer.json.gz", "wt") as f:
        f.write('{"tok": 1}')
    (dest / "config.json").write_text("the weights' own")
    compare.copy_like(like, dest, keep=("config.json",))
    assert (dest / "tokenizer.json").read_text() == '{"tok": 1}' and not (dest / "tokenizer.json.gz").exists()
    assert (dest / "config.json").read_text() == "the weights' own" and (dest / "generation_config.json").exists()
    compare.copy_like(like, tmp_path / "fresh", keep=("config.json",))  # nothing there to keep: copied
    assert (tmp_path / "fresh" / "config.json").read_text() == "like's"
