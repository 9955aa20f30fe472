"""The placement helpers: which mesh, how many bytes, how a batch splits; checked against plain NumPy."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from tunix_lit.models import transformer as tf


@pytest.fixture(scope="module")
def mesh():
    if jax.device_count() < 8:
        pytest.skip(f"needs the 8 fake CPU devices of the test set-up (or 8 accelerators); {jax.device_count()} here")
    return tf.make_mesh(2, 4)


def test_mesh_of_finds_the_mesh_of_a_module_a_state_and_a_plain_tree(mesh):
    model = tf.create_model(tf.ModelConfig.from_name("tiny-qwen3"), mesh=mesh)
    assert tf.mesh_of(model) == mesh
    assert tf.mesh_of(nnx.state(model)) == mesh
    assert tf.mesh_of({"a": jax.device_put(np.ones(8), NamedSharding(mesh, P("fsdp")))}) == mesh
    assert tf.mesh_of(tf.create_model(tf.ModelConfig.from_name("tiny-qwen3"))) is None
    assert tf.mesh_of({"a": np.ones(3), "b": 7}) is None


def test_tree_bytes_counts_global_arrays_once_and_packs_sub_byte_types(mesh):
    a = np.zeros((6, 5), np.float32)
    b = jnp.zeros((4,), jnp.bfloat16)
    replicated = jax.device_put(np.zeros((8, 2), np.float32), NamedSharding(mesh, P()))
    assert tf.tree_bytes({"a": a, "b": b, "n": 3}) == 6 * 5 * 4 + 4 * 2
    assert tf.tree_bytes(replicated) == 8 * 2 * 4  # not 8 devices' copies
    int4 = jax.ShapeDtypeStruct((7, 3), jnp.int4)  # 21 values: 21 bytes stored, 10.5 -> 11 packed
    assert (tf.tree_bytes(int4), tf.tree_bytes(int4, packed=True)) == (21, 11)
    model = tf.create_model(tf.ModelConfig.from_name("tiny-llama3"))
    expected = sum(np.asarray(x).nbytes for x in jax.tree.leaves(nnx.state(model)))
    assert tf.tree_bytes(model) == expected


@pytest.mark.parametrize("rows,axes,expected", [
    (8, ("data", "fsdp"), P("fsdp")),          # no "data" axis on this mesh: fsdp alone
    (6, ("fsdp", "tp"), P("fsdp")),            # 6 does not divide by 2*4: fall back to the prefix
    (16, ("fsdp", "tp"), P(("fsdp", "tp"))),
    (3, ("fsdp", "tp"), P(None)),              # nothing divides: replicated
])
def test_batch_sharding_uses_the_longest_dividing_prefix(mesh, rows, axes, expected):
    got = tf.batch_sharding(mesh, rows, axes)
    assert got.spec == expected
    assert tf.batch_sharding(None, rows, axes) is None


def test_batch_sharding_places_a_later_batch_dim_and_full_rank(mesh):
    got = tf.batch_sharding(mesh, 4, batch_dim=1, ndim=3)
    assert got.spec == P(None, "fsdp", None)


def test_put_batch_puts_each_devices_rows_where_numpy_says(mesh):
    batch = {"tokens": np.arange(8 * 3).reshape(8, 3), "scale": np.float32(2.0)}
    placed = tf.put_batch(batch, mesh, ("fsdp", "tp"))
    tokens = placed["tokens"]
    # device at mesh position (i, j) holds rows [k, k+1) with k = i*4 + j (fsdp-major, then tp)
    where = {d.id: (i, j) for (i, j), d in np.ndenumerate(mesh.devices)}
    for shard in tokens.addressable_shards:
        i, j = where[shard.device.id]
        k = i * 4 + j
        assert np.array_equal(np.asarray(shard.data), batch["tokens"][k:k + 1])
    assert placed["scale"].sharding.is_fully_replicated and float(placed["scale"]) == 2.0
    assert np.array_equal(tf.to_host(tokens), batch["tokens"])
    stacked = tf.put_batch(np.zeros((3, 4, 5)), mesh, batch_dim=1)  # [accumulation, rows, ...]
    assert stacked.sharding.spec == P(None, "fsdp")
    assert tf.put_batch({"x": np.ones(2)}, None)["x"].sharding.is_fully_replicated


def test_put_replicated_puts_the_whole_value_on_every_device_keys_included(mesh):
    rep = tf.put_replicated({"key": jax.random.key(5), "x": np.arange(6.0).reshape(2, 3)}, mesh)
    for leaf in (rep["key"], rep["x"]):
        assert leaf.sharding.is_fully_replicated and len(leaf.sharding.device_set) == 8
    assert np.array_equal(jax.random.key_data(rep["key"]), jax.random.key_data(jax.random.key(5)))
    for shard in rep["x"].addressable_shards:
        assert np.array_equal(np.asarray(shard.data), np.arange(6.0).reshape(2, 3))
    assert tf.put_replicated({"x": np.ones(2)}, None)["x"].shape == (2,)
