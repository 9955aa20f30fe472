"""Several JAX processes on one machine: 2 processes x 4 fake CPU devices joined by jax.distributed over gloo.

The 2-process jobs run tests/multihost/worker.py through `launch_local`; each process reports what it saw
and the tests compare that with NumPy and with the same placement made here, in this one process of 8
devices. The launcher's own behaviour (environment, failure, timeout) is checked on plain Python commands.
"""
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, PartitionSpec as P

from tunix_lit import distributed
from tunix_lit.models import transformer as tfm

ROOT = Path(__file__).resolve().parents[1]
WORKER = str(ROOT / "tests" / "multihost" / "worker.py")
ROWS = 16


def _batch() -> dict:
    """The worker's global batch, written again here (an independent copy of its definition)."""
    return {"tokens": np.arange(ROWS * 6, dtype=np.int32).reshape(ROWS, 6),
            "weights": np.linspace(0.0, 1.0, ROWS, dtype=np.float32)}


def _one_process_meshes() -> dict:
    """The worker's three layouts, built over this process's 8 devices."""
    devices = np.asarray(jax.devices())
    return {"fsdp4_tp2": tfm.make_mesh(fsdp=4, tp=2),
            "tp_across_processes": Mesh(devices.reshape(2, 4).T, ("fsdp", "tp")),
            "data2_fsdp4": Mesh(devices.reshape(2, 4), ("data", "fsdp"))}


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """Run the worker's checks as 2 processes x 4 devices once; the two processes' reports."""
    out = tmp_path_factory.mktemp("multihost")
    results = distributed.launch_local([sys.executable, WORKER, "checks", str(out)], 2, devices_per_process=4,
                                       timeout_s=240)
    assert [r.returncode for r in results] == [0, 0]
    return [json.loads((out / f"report_{i}.json").read_text()) for i in range(2)], out


# --- joining ----------------------------------------------------------------------------------------------------

def test_two_processes_form_one_eight_device_job(reports):
    reports, _ = reports
    for i, report in enumerate(reports):
        assert report["info"] == {"process_index": i, "process_count": 2, "local_devices": 4, "global_devices": 8,
                                  "platform": "cpu"}
        assert report["initialize_again"] == report["info"]  # a second initialize() returns the same place
        assert "already joined as process" in report["rejoin_error"]


def test_resolve_cluster_prefers_arguments_then_environment_then_detection():
    env = {distributed.ENV_COORDINATOR: "10.0.0.1:8476", distributed.ENV_NUM_PROCESSES: "4",
           distributed.ENV_PROCESS_ID: "3"}
    assert distributed.resolve_cluster("h:1", 2, 1, environ=env) == ("h:1", 2, 1)
    assert distributed.resolve_cluster(environ=env) == ("10.0.0.1:8476", 4, 3)
    assert distributed.resolve_cluster(environ={}) is None


@pytest.mark.parametrize("args, env, message", [
    ((None, None, None), {distributed.ENV_COORDINATOR: "h:1"}, "TUNIX_LIT_NUM_PROCESSES, TUNIX_LIT_PROCESS_ID missing"),
    (("h:1", 2, None), {}, "process_id missing"),
    (("h", 2, 0), {}, "'host:port'"),
    (("h:70000", 2, 0), {}, "'host:port'"),
    (("h:1", 2, 2), {}, "process_id=2, num_processes=2"),
    (("h:1", 0, 0), {}, "num_processes=0"),
    (("h:1", "two", 0), {}, "num_processes must be a non-negative integer"),
    (("h:1", 2, -1), {}, "process_id must be a non-negative integer"),
])
def test_resolve_cluster_names_what_is_wrong(args, env, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        distributed.resolve_cluster(*args, environ=env)


def test_resolve_cluster_rejects_a_count_of_the_wrong_type():
    with pytest.raises(TypeError, match="num_processes must be an int or a decimal string, got float 2.0"):
        distributed.resolve_cluster("h:1", 2.0, 0, environ={})


def test_initialize_after_jax_started_is_refused_before_joining():
    jax.devices()  # this test process has started its backend
    with pytest.raises(RuntimeError, match="before JAX starts its backend"):
        distributed.initialize("127.0.0.1:1", 2, 0)
    assert not jax.distributed.is_initialized()


def test_initialize_without_a_cluster_says_how_to_give_one():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TUNIX_LIT_", "SLURM_", "OMPI_", "JAX_COORD"))}
    env["PYTHONPATH"] = str(ROOT)
    code = "from tunix_lit import distributed; distributed.initialize(initialization_timeout_s=5)"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "no cluster to join" in proc.stderr and distributed.ENV_COORDINATOR in proc.stderr


# --- data in, metrics out ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["fsdp4_tp2", "tp_across_processes", "data2_fsdp4"])
def test_each_process_puts_the_rows_a_one_process_run_puts_on_those_devices(reports, layout):
    reports, _ = reports
    batch = _batch()
    one_process = tfm.put_batch(batch, _one_process_meshes()[layout])["tokens"]
    expected = {position: np.asarray(s.data) for position, s in
                ((jax.devices().index(s.device), s) for s in one_process.addressable_shards)}
    seen = {}
    for i, report in enumerate(reports):
        assert report[layout]["fully_addressable"] is False
        for position, values in report[layout]["tokens_shards"]:
            assert position // 4 == i  # a process holds shards on its own devices only
            seen[position] = np.asarray(values)
    assert sorted(seen) == list(range(8))
    for position, values in seen.items():
        np.testing.assert_array_equal(values, expected[position], err_msg=f"{layout}: device {position}")
    for report in reports:  # the global array is the batch, row for row
        np.testing.assert_array_equal(np.asarray(report[layout]["tokens_gathered"]), batch["tokens"])
        np.testing.assert_allclose(report[layout]["weighted_sum"],
                                   float(np.sum(batch["tokens"].astype(np.float64) * batch["weights"][:, None])),
                                   rtol=1e-6)


def test_a_metric_spread_over_processes_is_gathered_whole_on_every_process(reports):
    reports, _ = reports
    batch = _batch()
    expected = np.mean(batch["tokens"].astype(np.float64) ** 2, axis=-1) * batch["weights"]
    for report in reports:
        metric = report["fsdp4_tp2"]
        assert metric["metric_fully_addressable"] is False
        assert metric["metric_np_asarray"] != "no error"  # reading it directly fails: the reason to_host gathers
        for layout in ("fsdp4_tp2", "tp_across_processes", "data2_fsdp4"):
            np.testing.assert_allclose(report[layout]["metric_gathered"], expected, rtol=1e-6)


def test_state_replicated_on_every_device_across_processes_keys_included(reports):
    reports, _ = reports
    key_data = np.asarray(jax.random.key_data(jax.random.key(11))).tolist()
    draw = np.asarray(jax.random.uniform(jax.random.key(11), (4,)))  # what one process draws from that key
    for report in reports:
        rep = report["replicated"]
        assert rep["device_put_directly"] != "no error"  # a local key cannot be sent to the other host's devices
        assert rep["key_devices"] == 8 and rep["key_data"] == key_data and rep["step"] == 7
        np.testing.assert_allclose(rep["draw"], draw, rtol=1e-6)


# --- checkpoints and logs ---------------------------------------------------------------------------------------

def test_both_processes_save_and_restore_one_sharded_orbax_checkpoint(reports):
    reports, _ = reports
    kernel = np.arange(16 * 8, dtype=np.float32).reshape(16, 8) * 0.25 - 3.0
    bias = np.arange(8, dtype=np.float32) + 0.5
    for i, report in enumerate(reports):
        ckpt = report["checkpoint"]
        assert ckpt["kernel_spec"] == str(P("tp", "fsdp"))
        np.testing.assert_array_equal(np.asarray(ckpt["kernel"]), kernel)
        np.testing.assert_array_equal(np.asarray(ckpt["bias"]), bias)
        assert ckpt["step"] == 7
        # restored onto a layout that splits the kernel's rows over tp = (device k, device 4 + k): each process
        # holds the half of the rows its position on tp selects
        for position, values in ckpt["kernel_shards"]:
            assert position // 4 == i
            np.testing.assert_array_equal(np.asarray(values), kernel[8 * i:8 * (i + 1), 2 * (position % 4):2 * (position % 4) + 2])
        assert {"ocdbt.process_0/manifest.ocdbt", "ocdbt.process_1/manifest.ocdbt"} <= set(ckpt["files"])  # both wrote


def test_exactly_one_process_writes_the_log_and_all_read_it(reports):
    reports, out = reports
    assert [r["writer"]["is_writer"] for r in reports] == [True, False]
    assert (out / "train.log").read_text().splitlines() == ["step 1 loss 0.5 (written by process 0)"]
    assert reports[1]["writer"]["log"] == reports[0]["writer"]["log"]  # read after the barrier


# --- failure ----------------------------------------------------------------------------------------------------

# a dying worker with -m slow: the coordinator_dies case runs the same failure path by default
@pytest.mark.parametrize("victim", [pytest.param(1, marks=pytest.mark.slow), 0], ids=["worker_dies", "coordinator_dies"])
def test_a_killed_process_makes_the_other_exit_with_an_error(victim, tmp_path):
    """The heartbeat timeout comes from TUNIX_LIT_HEARTBEAT_TIMEOUT_S; the worker's local_device_count=4 beats the launcher's 2."""
    heartbeat = 5
    results = distributed.launch_local([sys.executable, WORKER, "kill", str(tmp_path), str(victim)], 2,
                                       devices_per_process=2, timeout_s=120, grace_s=120, check=False,
                                       env={distributed.ENV_HEARTBEAT: str(heartbeat)})
    dead, survivor = results[victim], results[1 - victim]
    assert dead.returncode == -9 and "4 / 8 devices, first sum 64.0" in dead.output
    assert not survivor.stopped, "the survivor hung until the launcher stopped it"
    assert survivor.returncode != 0
    assert survivor.seconds - dead.seconds < 6 * heartbeat + 10, (dead.seconds, survivor.seconds)
    message = distributed.failure_message(results, 120)
    assert message.startswith(f"process {victim} of 2 failed first (killed by SIGKILL")


# --- the launcher on plain commands -----------------------------------------------------------------------------

def test_launch_gives_each_process_its_place_devices_and_a_shared_coordinator():
    show = ("import os; print(os.environ['TUNIX_LIT_PROCESS_ID'], os.environ['TUNIX_LIT_NUM_PROCESSES'], "
            "os.environ['TUNIX_LIT_COORDINATOR'], os.environ['XLA_FLAGS'])")
    results = distributed.launch_local([sys.executable, "-c", show], 3, devices_per_process=2, timeout_s=60,
                                       env={"XLA_FLAGS": "--xla_force_host_platform_device_count=8 --xla_cpu_foo=1"})
    fields = [r.output.split() for r in results]
    assert [f[:2] for f in fields] == [["0", "3"], ["1", "3"], ["2", "3"]]
    assert len({f[2] for f in fields}) == 1 and fields[0][2].startswith("127.0.0.1:")
    assert all(f[3:] == ["--xla_cpu_foo=1", "--xla_force_host_platform_device_count=2"] for f in fields)
    assert all(r.returncode == 0 and not r.stopped for r in results)


def test_a_failing_process_stops_the_others_and_the_error_names_it():
    code = ("import os, sys, time; pid = os.environ['TUNIX_LIT_PROCESS_ID']; print('hello from', pid); "
            "time.sleep(60) if pid == '0' else sys.exit('bad row in shard ' + pid)")
    start = time.monotonic()
    with pytest.raises(distributed.LaunchError) as info:
        distributed.launch_local([sys.executable, "-c", code], 2, devices_per_process=1, timeout_s=60, grace_s=0.5)
    assert time.monotonic() - start < 30
    message = str(info.value)
    assert message.startswith("process 1 of 2 failed first (exit code 1")
    assert "bad row in shard 1" in message and "process 0: stopped by the launcher" in message
    assert [r.stopped for r in info.value.results] == [True, False]


def test_time_running_out_stops_every_process_and_its_children():
    code = ("import subprocess, time; p = subprocess.Popen(['sleep', '60']); print('child', p.pid, flush=True); "
            "time.sleep(60)")
    start = time.monotonic()
    with pytest.raises(distributed.LaunchError, match=r"timed out after 2 s with process\(es\) 0, 1 of 2 still running") as info:
        distributed.launch_local([sys.executable, "-c", code], 2, devices_per_process=1, timeout_s=2)
    assert time.monotonic() - start < 20
    for result in info.value.results:
        assert result.stopped
        child = int(result.output.split()[1])
        stat = Path(f"/proc/{child}/stat")
        assert not stat.exists() or stat.read_text().split(")")[1].split()[0] in "ZX"  # gone, or a zombie


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(argv="python -c 1"), TypeError, "argv must be a non-empty list"),
    (dict(num_processes=0), ValueError, "num_processes must be a positive integer"),
    (dict(devices_per_process=0), ValueError, "devices_per_process must be a positive integer"),
    (dict(timeout_s=0), ValueError, "timeout_s must be > 0"),
])
def test_launch_rejects_bad_arguments(kwargs, error, message):
    call = dict(argv=[sys.executable, "-c", "1"], num_processes=2, devices_per_process=1, timeout_s=10) | kwargs
    with pytest.raises(error, match=message):
        distributed.launch_local(call.pop("argv"), call.pop("num_processes"), **call)


def test_process_env_replaces_the_parent_device_count_and_keeps_the_package_importable():
    env = distributed.process_env(1, 2, "127.0.0.1:9", 4, base={"XLA_FLAGS": "--xla_force_host_platform_device_count=8",
                                                                 "PYTHONPATH": "/elsewhere"})
    assert env["XLA_FLAGS"] == "--xla_force_host_platform_device_count=4"
    package_root = str(Path(distributed.__file__).resolve().parents[1])  # the checkout, or site-packages when installed
    assert env["PYTHONPATH"].split(os.pathsep) == [package_root, "/elsewhere"]
    assert (env[distributed.ENV_PROCESS_ID], env[distributed.ENV_NUM_PROCESSES], env["JAX_PLATFORMS"]) == ("1", "2", "cpu")
