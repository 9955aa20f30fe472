"""One process of a 2-process test job, started by `tunix_lit.distributed.launch_local` from tests/test_distributed.py.

    python worker.py checks OUT_DIR     # data split, gathered metric, orbax round trip, one writer; a report per process
    python worker.py kill OUT_DIR VICTIM  # process VICTIM kills itself after one collective; the other keeps computing

Each process writes what it saw to OUT_DIR/report_<process index>.json; the test compares those reports with
NumPy and with a one-process run. Nothing here asserts: a worker that hit an error exits non-zero and the
launcher's error carries its last lines.
"""
import json
import os
import signal
import sys
import time
from pathlib import Path

from tunix_lit import distributed

SCENARIO, OUT = sys.argv[1], Path(sys.argv[2])
# from the TUNIX_LIT_* variables the launcher set, before anything starts JAX; the kill scenario also asks for its
# own device count (4), which must win over the launcher's XLA_FLAGS
INFO = distributed.initialize(local_device_count=4 if SCENARIO == "kill" else None)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

from tunix_lit.models import transformer as tfm  # noqa: E402

ROWS = 16


def global_batch() -> dict:
    """The global batch every process holds on its host (the same on all of them, as put_batch expects)."""
    return {"tokens": np.arange(ROWS * 6, dtype=np.int32).reshape(ROWS, 6),
            "weights": np.linspace(0.0, 1.0, ROWS, dtype=np.float32)}


def meshes() -> dict:
    """Three layouts of the 8 global devices: batch split across processes, batch replicated across them, 2-D batch axes."""
    devices = np.asarray(jax.devices())  # process 0's four devices first, then process 1's
    return {"fsdp4_tp2": tfm.make_mesh(fsdp=4, tp=2),
            "tp_across_processes": Mesh(devices.reshape(2, 4).T, ("fsdp", "tp")),
            "data2_fsdp4": Mesh(devices.reshape(2, 4), ("data", "fsdp"))}


def local_shards(x) -> list:
    """[position of the device in jax.devices(), the shard's values] for each shard this process holds."""
    position = {d: i for i, d in enumerate(jax.devices())}
    return [[position[s.device], np.asarray(s.data).tolist()] for s in x.addressable_shards]


def check_data(report: dict) -> None:
    """Each process puts the global batch with put_batch; record its shards, the gathered arrays and two jitted results."""
    batch = global_batch()
    weighted_sum = jax.jit(lambda b: jnp.sum(b["tokens"].astype(jnp.float32) * b["weights"][:, None]))
    per_row = jax.jit(lambda b: jnp.mean(b["tokens"].astype(jnp.float32) ** 2, axis=-1) * b["weights"])
    for name, mesh in meshes().items():
        placed = tfm.put_batch(batch, mesh)
        metric = per_row(placed)
        try:
            np.asarray(metric)
            direct = "no error"
        except Exception as e:  # the multi-host failure the gathered path avoids
            direct = type(e).__name__
        report[name] = {
            "spec": str(placed["tokens"].sharding.spec),
            "fully_addressable": placed["tokens"].is_fully_addressable,
            "tokens_shards": local_shards(placed["tokens"]),
            "tokens_gathered": tfm.to_host(placed["tokens"]).tolist(),
            "weighted_sum": float(tfm.to_host(weighted_sum(placed))),
            "metric_fully_addressable": metric.is_fully_addressable,
            "metric_np_asarray": direct,
            "metric_gathered": tfm.to_host(metric).tolist(),
        }


def check_checkpoint(report: dict) -> None:
    """Both processes save one sharded state with orbax and restore it onto another layout."""
    import orbax.checkpoint as ocp

    mesh = meshes()["fsdp4_tp2"]
    kernel = (np.arange(16 * 8, dtype=np.float32).reshape(16, 8) * 0.25 - 3.0)
    bias = np.arange(8, dtype=np.float32) + 0.5
    put = lambda value, spec: jax.make_array_from_callback(value.shape, NamedSharding(mesh, spec), lambda i: value[i])
    state = {"kernel": put(kernel, P("fsdp", "tp")), "bias": put(bias, P("tp")), "step": put(np.int32(7), P())}
    path = OUT / "checkpoint" / "7"
    with ocp.StandardCheckpointer() as ckpt:
        ckpt.save(path, state)
        ckpt.wait_until_finished()
    distributed.barrier("checkpoint saved")
    other = meshes()["tp_across_processes"]  # restore onto a layout whose shards live on other processes
    target = {"kernel": jax.ShapeDtypeStruct((16, 8), jnp.float32, sharding=NamedSharding(other, P("tp", "fsdp"))),
              "bias": jax.ShapeDtypeStruct((8,), jnp.float32, sharding=NamedSharding(other, P("fsdp"))),
              "step": jax.ShapeDtypeStruct((), jnp.int32, sharding=NamedSharding(other, P()))}
    with ocp.StandardCheckpointer() as ckpt:
        restored = ckpt.restore(path, target)
    report["checkpoint"] = {
        "kernel_spec": str(restored["kernel"].sharding.spec),
        "kernel_shards": local_shards(restored["kernel"]),
        "kernel": tfm.to_host(restored["kernel"]).tolist(),
        "bias": tfm.to_host(restored["bias"]).tolist(),
        "step": int(tfm.to_host(restored["step"])),
        "files": sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()),
    }


def check_replicated(report: dict) -> None:
    """A PRNG key and a step count put whole on every device with put_replicated (plain device_put refuses this)."""
    mesh = meshes()["fsdp4_tp2"]
    try:
        jax.device_put(jax.random.key(0), NamedSharding(mesh, P()))
        direct = "no error"
    except Exception as e:  # what put_replicated avoids
        direct = type(e).__name__
    rep = tfm.put_replicated({"key": jax.random.key(11), "step": np.int32(7)}, mesh)
    draw = jax.jit(lambda k: jax.random.uniform(k, (4,)))(rep["key"])  # a jitted use of the global key
    report["replicated"] = {
        "device_put_directly": direct,
        "key_devices": len(rep["key"].sharding.device_set),
        "key_data": tfm.to_host(jax.random.key_data(rep["key"])).tolist(),
        "draw": tfm.to_host(draw).tolist(),
        "step": int(tfm.to_host(rep["step"])),
    }


def check_writer(report: dict) -> None:
    """Only the writer writes the log; after a barrier every process reads what it wrote."""
    log = OUT / "train.log"
    if distributed.is_writer():
        log.write_text(f"step 1 loss 0.5 (written by process {jax.process_index()})\n")
    distributed.barrier("log written")
    report["writer"] = {"is_writer": distributed.is_writer(), "log": log.read_text()}


def checks() -> None:
    report = {"info": INFO.__dict__, "initialize_again": distributed.initialize().__dict__}
    try:
        distributed.initialize("127.0.0.1:1", 3, 2)
        report["rejoin_error"] = None
    except ValueError as e:
        report["rejoin_error"] = str(e)
    check_data(report)
    check_checkpoint(report)
    check_replicated(report)
    check_writer(report)
    (OUT / f"report_{INFO.process_index}.json").write_text(json.dumps(report))


def kill(victim: int) -> None:
    """After one collective the victim dies by SIGKILL; the other keeps running collectives until JAX stops it."""
    mesh = tfm.make_mesh(fsdp=8)
    x = tfm.put_batch(np.ones((ROWS, 4), np.float32), mesh)
    total = jax.jit(jnp.sum)
    print(f"process {INFO.process_index}: {INFO.local_devices} / {INFO.global_devices} devices, "
          f"first sum {float(tfm.to_host(total(x)))}", flush=True)
    if INFO.process_index == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    for step in range(10**9):  # ends only when the job fails (or the launcher's timeout stops it)
        total(x + step).block_until_ready()
        if step % 200 == 0:
            print(f"process {INFO.process_index}: still computing after {time.monotonic() - start:.1f} s", flush=True)
            time.sleep(0.05)


if __name__ == "__main__":
    if SCENARIO == "checks":
        checks()
    elif SCENARIO == "kill":
        kill(int(sys.argv[3]))
    else:
        sys.exit(f"unknown scenario {SCENARIO!r}; choose one of: checks, kill")
