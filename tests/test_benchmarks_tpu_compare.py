"""The one-command TPU comparison's bookkeeping: job order, the summary's medians and ratios, the trace parsers."""

import json
import statistics
from unittest import mock

import pytest
from benchmark_scripts import BENCH, load_benchmark

@pytest.fixture(scope="module")
def tc():
    return load_benchmark("tpu_compare")


def test_plan_puts_training_rows_first_and_alternates_sides(tc):
    jobs = tc.plan(["grpo", "sft", "trace", "sampler"], rounds=2, tiny=False)
    assert jobs[:4] == [("grpo", 1, "upstream"), ("grpo", 1, "ours"), ("sft", 1, "upstream"), ("sft", 1, "ours")]
    assert jobs[4:8] == [("grpo", 2, "ours"), ("grpo", 2, "upstream"), ("sft", 2, "ours"), ("sft", 2, "upstream")]
    assert jobs[8] == ("trace", 1, "ours")
    samplers = jobs[9:]
    assert {p for p, _, _ in samplers} == {"sampler_b1", "sampler_b8", "sampler_b32", "sampler_b128"}
    assert len(samplers) == 16 and samplers[0][2] == "upstream" and samplers[8][2] == "ours"  # round 2: ours first


def test_both_sides_get_the_same_flags(tc):
    for part, (ours, theirs) in tc.work(tiny=False).items():
        if theirs is None:
            continue
        flags = lambda argv: argv[argv.index(next(a for a in argv if a.startswith("--"))):]
        assert flags(ours) == flags(theirs), part
    ours = tc.work(tiny=False)["grpo"][0]
    assert ours[ours.index("--num-layers") + 1] == "8" and ours[ours.index("--lora-rank") + 1] == "8"


def test_the_decode_ab_runs_the_grpo_rollout_shape_with_and_without_adapters(tc):
    jobs = tc.plan(["trace", "decode"], rounds=2, tiny=False)
    assert jobs == [("trace", 1, "ours"), ("decode_plain", 1, "ours"), ("decode_lora8", 1, "ours")]
    spec = tc.work(tiny=False)
    plain, lora = spec["decode_plain"][0], spec["decode_lora8"][0]
    grpo = spec["grpo"][0]
    value = lambda argv, flag: argv[argv.index(flag) + 1]
    assert value(plain, "--batch") == str(int(value(grpo, "--batch")) * int(value(grpo, "--num-generations")))
    assert value(plain, "--gen-len") == value(grpo, "--gen-len") and value(plain, "--num-layers") == "8"
    assert lora == plain + ["--lora-rank", "8"] and spec["decode_plain"][1] is None  # ours only: an A/B
    s = tc.summarize([row("decode_lora8", 1, "ours", tokens_per_s=5.0)], {})
    assert s["parts"]["decode_lora8"] == {"tokens_per_s": 5.0}


def test_the_readmes_decode_floor_is_the_benchmark_models_bytes(tc):
    """benchmarks/README.md's 'about X GB ... under about Y ms at 819 GB/s' follows from the GRPO model's flags."""
    import re

    argv = tc.work(tiny=False)["grpo"][0]
    v = lambda flag: int(argv[argv.index(flag) + 1])
    D, F, L, V = v("--embed-dim"), v("--hidden-dim"), v("--num-layers"), v("--vocab-size")
    q, kv = v("--num-heads") * v("--head-dim"), v("--num-kv-heads") * v("--head-dim")
    params = V * D + L * (2 * D * q + 2 * D * kv + 3 * D * F)  # tied table + q, o, k, v, gate, up, down
    gb = params * 2 / 1e9  # bfloat16
    text = (BENCH / "README.md").read_text()
    m = re.search(r"([\d,]+) × ([\d,]+) embedding,\s+about ([\d.]+) GB, so the loop cannot run under about (\d+) ms "
                  r"at 819 GB/s", text)
    assert m, "the decode-floor sentence is gone from benchmarks/README.md"
    assert (int(m[1].replace(",", "")), int(m[2].replace(",", ""))) == (V, D)
    assert m[3] == f"{gb:.2f}"
    assert int(m[4]) == round(v("--gen-len") * gb / 819 * 1000)


def row(part, rnd, side, **result):
    return dict(part=part, round=rnd, side=side, rc=0, timed_out=False, wall_s=1.0, result=result)


def test_summary_medians_and_ratios(tc):
    ours, theirs = [0.20, 0.24, 0.22], [0.18, 0.19, 0.30]
    rows = [row("grpo", i + 1, "ours", median_step_s=o, first_step_s=9.0) for i, o in enumerate(ours)]
    rows += [row("grpo", i + 1, "upstream", median_step_s=t, first_step_s=8.0) for i, t in enumerate(theirs)]
    rows.append(dict(part="sft", round=1, side="ours", rc=1, timed_out=False, wall_s=3.0, tail="boom"))
    s = tc.summarize(rows, {})
    g = s["parts"]["grpo"]
    assert g["ours"]["median"]["median_step_s"] == statistics.median(ours)
    want = round(statistics.median(ours) / statistics.median(theirs), 3)
    assert g["step_time_ours_over_upstream"] == want
    assert [f["part"] for f in s["failed"]] == ["sft"]
    assert s["parts"]["sft"]["sync_step_time_ours_over_upstream"] is None  # nothing finished on either side


def test_summary_keeps_a_later_good_row_over_a_timed_out_one(tc, tmp_path):
    bad = dict(part="sft", round=1, side="ours", rc=-9, timed_out=True, wall_s=500.0)
    good = row("sft", 1, "ours", median_step_s=0.1, tokens_per_s=100.0)
    (tmp_path / "a.jsonl").write_text(json.dumps(bad) + "\n")
    (tmp_path / "b.json").write_text(json.dumps({"rows": [good]}))
    s = tc.summarize(tc.load_rows([tmp_path / "a.jsonl", tmp_path / "b.json"]), {})
    assert s["parts"]["sft"]["ours"]["median"]["tokens_per_s"] == 100.0 and s["failed"] == []


def test_carried_wheels_leave_the_images_jax_alone():
    prep = load_benchmark("tpu_prepare_wheels")
    names = {n.split("==")[0].lower() for n in prep.COMMON + prep.OURS + prep.UPSTREAM}
    assert not names & {"jax", "jaxlib", "libtpu", "numpy", "ml_dtypes", "scipy"}
    assert "google-tunix" in names and "safetensors" in names


def test_count_transfers_splits_the_log_at_markers(tmp_path):
    tt = load_benchmark("train_trace")
    log = tmp_path / "t.log"
    log.write_text("W guard_lib.cc:125] host-to-device transfer: aval=...\n\n@@ step 0\n"
                   "W guard_lib.cc:125] host-to-device transfer: a\nW guard_lib.cc:125] device-to-host transfer: b\n"
                   "\n@@ step 1\nother line\n")
    got = tt.count_transfers(log)
    assert got["before"]["h2d"] == 1
    assert got["step 0"] == dict(h2d=1, d2h=1, d2d=0) and got["step 1"] == dict(h2d=0, d2h=0, d2d=0)


def test_count_transfers_by_shape_counts_unlabelled_jit_arguments_apart(tmp_path):
    import collections

    tt = load_benchmark("train_trace")
    log = tmp_path / "t.log"
    log.write_text("@@ steps\nW x] host-to-device transfer: aval=ShapedArray(int32[8,16]), dst_sharding=S\n"
                   "W x] host-to-device transfer: \nW x] host-to-device transfer: aval=ShapedArray(int32[8,16]), dst_sharding=T\n")
    avals = collections.Counter()
    assert tt.count_transfers(log, avals)["steps"]["h2d"] == 3
    assert avals["ShapedArray(int32[8,16])"] == 2 and avals["(no shape logged: a jit argument)"] == 1


def test_compile_log_names_the_call_site_and_splits_by_time():
    """One jitted function compiled under the log: its compile is counted, timed and traced to this file; a
    second call of the same shapes compiles nothing; `until` before the compile leaves it out."""
    import jax
    import jax.numpy as jnp

    machine = load_benchmark("machine")
    x, y = jnp.ones((7, 5), jnp.float32), jnp.ones((3, 2), jnp.float32)  # made before the log starts
    log = machine.CompileLog(roots=("tests",)).start()
    f = jax.jit(lambda x: jnp.tanh(x) * 3.0 + x.sum())  # a fresh function: never in JAX's in-memory cache
    f(x).block_until_ready()
    first = log.summary()
    f(x).block_until_ready()
    log.stop()
    f(y).block_until_ready()  # a new shape compiles, but after stop(): not recorded
    again = log.summary()
    assert first["compile"]["n"] == 1 and first["compile"]["s"] > 0 and first["trace"]["n"] == 1
    assert again["compile"] == first["compile"]
    (site,) = first["top_sites"]
    assert site["site"].startswith("tests/test_benchmarks_tpu_compare.py:") and site["n"] == 1
    assert log.summary(until=0.0)["compile"]["n"] == 0


def test_the_28_layer_parts_plan_after_the_rest_and_summarise_as_their_kind(tc):
    jobs = tc.plan(["grpo", "grpo_l28", "sft_l28"], rounds=1, tiny=True)
    assert [j[0] for j in jobs] == ["grpo", "grpo", "grpo_l28", "grpo_l28", "sft_l28", "sft_l28"]
    specs = tc.work(tiny=True)
    assert "--lora-rank" not in specs["grpo_full_l28"][0] and "--lora-rank" not in specs["grpo_full_l28"][1]
    assert specs["grpo_l28"][0][specs["grpo_l28"][0].index("--num-layers") + 1] == "3"
    result = lambda step, first: dict(median_step_s=step, first_step_s=first, init_and_first_step_s=first + 1,
                                      first_step_compiles={"compile": {"n": 4, "s": 2.0}})
    row = lambda side, step, first: dict(part="grpo_l28", round=1, side=side, rc=0, timed_out=False, wall_s=1.0,
                                         result=result(step, first))
    out = tc.summarize([row("ours", 0.3, 10.0), row("upstream", 0.5, 12.0)], {})
    entry = out["parts"]["grpo_l28"]
    assert entry["step_time_ours_over_upstream"] == pytest.approx(0.6)
    assert entry["ours"]["first_step_compiles"]["compile"]["n"] == 4


def test_the_prompt_once_off_parts_are_ours_alone_and_keep_the_chips_memory(tc):
    jobs = tc.plan(["grpo", "grpo_whole", "grpo_whole_l28"], rounds=1, tiny=True)
    assert jobs[2:] == [("grpo_whole", 1, "ours"), ("grpo_whole_l28", 1, "ours")]
    specs = tc.work(tiny=True)
    ours, upstream = specs["grpo_whole_l28"]
    assert upstream is None and ours[ours.index("--prompt-once") + 1] == "0"
    assert ours[ours.index("--num-layers") + 1] == "3" and "--lora-rank" in ours
    memory = {"peak_mib": 900.0, "in_use_mib": 10.0, "limit_mib": 16000.0}
    row = lambda part, side: dict(part=part, round=1, side=side, rc=0, timed_out=False, wall_s=1.0,
                                  result=dict(median_step_s=0.2, first_step_s=5.0, init_and_first_step_s=6.0,
                                              device_memory=memory))
    out = tc.summarize([row("grpo_whole_l28", "ours"), row("grpo_full_l28", "ours"), row("grpo_full_l28", "upstream")],
                       {})
    assert out["parts"]["grpo_whole_l28"]["median_step_s"] == 0.2  # its own record, no ratio
    assert out["parts"]["grpo_full_l28"]["ours"]["device_memory"]["peak_mib"] == 900.0


def test_device_memory_is_none_where_the_backend_keeps_no_count():
    machine = load_benchmark("machine")

    class Chip:
        def memory_stats(self):
            return {"peak_bytes_in_use": 3 * 2**30, "bytes_in_use": 2**20, "bytes_limit": 16 * 2**30}

    import jax
    got = machine.device_memory()
    assert set(got) == {"peak_mib", "in_use_mib", "limit_mib"}
    if jax.default_backend() == "cpu":  # XLA:CPU keeps no allocator statistics
        assert got["peak_mib"] is None
    with mock.patch.object(jax, "devices", lambda: [Chip()]):
        assert machine.device_memory() == {"peak_mib": 3072.0, "in_use_mib": 1.0, "limit_mib": 16384.0}


def test_prompt_once_off_is_set_beside_our_prompt_once_run(tc):
    compiles = lambda s, fetched: {"cache_fetch": {"n": fetched, "s": 0.1},
                                   "top_sites": [{"site": "core.py:1", "s": s}]}
    once = dict(part="grpo", round=1, side="ours", rc=0, timed_out=False, wall_s=1.0,
                result=dict(median_step_s=0.2, first_step_s=9.0, init_and_first_step_s=10.0,
                            first_step_compiles=compiles(50.0, 0), prompt_once_ran=True))
    whole = dict(once, part="grpo_whole", result=dict(median_step_s=0.21, first_step_s=6.0,
                                                       first_step_compiles=compiles(35.0, 2)))
    got = tc.summarize([once, whole], {})["parts"]["grpo_whole"]["vs_prompt_once"]
    assert got == {"step_time_ratio": 1.05, "train_step_compile_s": [50.0, 35.0], "programs_fetched_from_cache": 2,
                   "once_ran_prompt_once": True}


def test_a_forced_prompt_once_run_is_preferred_over_the_default_one(tc):
    """`grpo` runs the library's default (whole rows on a chip at this shape): `grpo_once` is the shared-prompt side."""
    assert tc.plan(["grpo_once"], rounds=1, tiny=True) == [("grpo_once", 1, "ours")]
    assert tc.work(tiny=True)["grpo_once"][0][-2:] == ["--prompt-once", "1"]
    compiles = lambda s: {"cache_fetch": {"n": 0, "s": 0.0}, "top_sites": [{"site": "core.py:1", "s": s}]}
    row = lambda part, step, s, ran: dict(part=part, round=1, side="ours", rc=0, timed_out=False, wall_s=1.0,
                                          result=dict(median_step_s=step, first_step_s=5.0, prompt_once_ran=ran,
                                                      first_step_compiles=compiles(s)))
    rows = [row("grpo", 0.21, 35.0, False), row("grpo_whole", 0.21, 35.0, False), row("grpo_once", 0.2, 50.0, True)]
    got = tc.summarize(rows, {})["parts"]["grpo_whole"]["vs_prompt_once"]
    assert got["train_step_compile_s"] == [50.0, 35.0] and got["once_ran_prompt_once"] is True
    assert got["step_time_ratio"] == 1.05


def test_the_summary_says_whether_our_trainer_donated(tc):
    """`trainer_donates` of our last good GRPO row reaches the summary; a record from before it reads None."""
    row = lambda part, donates: dict(part=part, round=1, side="ours", rc=0, timed_out=False, wall_s=1.0,
                                     result=dict(median_step_s=0.2, first_step_s=5.0,
                                                 **({} if donates is None else {"trainer_donates": donates})))
    parts = tc.summarize([row("grpo", True), row("grpo_full_l28", None)], {})["parts"]
    assert parts["grpo"]["ours"]["trainer_donates"] is True
    assert parts["grpo_full_l28"]["ours"]["trainer_donates"] is None
