"""HF checkpoints in and out: logits against `transformers`, configs both ways, sharding, bad files, atomic saves."""
import json
import os
import shutil

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import transformers
from flax import nnx
from jax.sharding import PartitionSpec as P
from safetensors import safe_open
from safetensors.numpy import save_file

from hf_fixtures import (FAMILIES, SLIDING_WINDOW, hf_logits, load_transformers, max_gap, our_logits, padded_batch,
                         save_hf_checkpoint)
from tunix_lit.models import loader
from tunix_lit.models.transformer import PRESETS, ModelConfig, make_mesh

TOL = 1e-4  # float32, matmul precision 'highest' (tests/conftest.py)
LENGTHS = (14, 9, 3, 12)  # left-padded rows; 14 > Gemma's sliding window of 4


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """family -> (checkpoint dir written by save_pretrained, the transformers model that wrote it)."""
    out = {}
    for family in FAMILIES:
        path = tmp_path_factory.mktemp(family)
        out[family] = (path, save_hf_checkpoint(family, path))
    return out


@pytest.fixture(scope="module")
def batch():
    return padded_batch(256, lengths=LENGTHS)


def _copy_without(src, dst, drop=(), replace=None):
    """A copy of checkpoint `src` in `dst` with tensors dropped or replaced (config.json unchanged)."""
    dst.mkdir()
    shutil.copy(src / "config.json", dst)
    with safe_open(src / "model.safetensors", framework="numpy") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys() if k not in drop}
    tensors.update(replace or {})
    save_file(tensors, dst / "model.safetensors", metadata={"format": "pt"})
    return dst


# ---------------------------------------------------------------- logits parity


@pytest.mark.parametrize("family", FAMILIES)
def test_loaded_logits_match_transformers_on_left_padded_batch(checkpoints, batch, family):
    path, hf_model = checkpoints[family]
    tokens, mask, positions = batch
    assert tokens.shape[1] > SLIDING_WINDOW
    model = loader.load_hf(path)
    assert max_gap(our_logits(model, *batch), hf_logits(hf_model, *batch), mask) <= TOL


def test_gemma3_parity_would_see_a_wrong_window(checkpoints, batch, tmp_path):
    """The same weights under a config with a wider window disagree: the parity above is not blind to the band."""
    path, hf_model = checkpoints["gemma3"]
    wide = shutil.copytree(path, tmp_path / "wide")
    config = json.loads((wide / "config.json").read_text())
    (wide / "config.json").write_text(json.dumps({**config, "sliding_window": 64}))
    assert loader.load_hf(wide).config.sliding_window == 64
    assert max_gap(our_logits(loader.load_hf(wide), *batch), hf_logits(hf_model, *batch), batch[1]) > 1e-2


@pytest.mark.parametrize("family", ["llama3", "qwen3", "gemma3"])
def test_save_hf_is_read_by_transformers_with_same_logits(checkpoints, batch, tmp_path, family):
    path, hf_model = checkpoints[family]
    saved = loader.save_hf(loader.load_hf(path), tmp_path / "out")
    assert sorted(os.listdir(saved)) == ["config.json", "model.safetensors"]
    reread = load_transformers(saved)
    assert type(reread).__name__ == type(hf_model).__name__
    assert max_gap(hf_logits(reread, *batch), hf_logits(hf_model, *batch), batch[1]) <= TOL
    assert max_gap(our_logits(loader.load_hf(saved), *batch), hf_logits(hf_model, *batch), batch[1]) <= TOL


def test_multimodal_gemma3_saves_as_text_only_causal_lm(checkpoints, batch, tmp_path):
    path, hf_model = checkpoints["gemma3_multimodal"]
    saved = loader.save_hf(loader.load_hf(path), tmp_path / "text")
    assert json.loads((saved / "config.json").read_text())["architectures"] == ["Gemma3ForCausalLM"]
    assert max_gap(hf_logits(load_transformers(saved), *batch), hf_logits(hf_model, *batch), batch[1]) <= TOL


# ---------------------------------------------------------------- sharded files


def test_sharded_checkpoint_from_transformers_loads(batch, tmp_path):
    hf_model = save_hf_checkpoint("llama3", tmp_path, max_shard_size="100KB")
    assert (tmp_path / "model.safetensors.index.json").exists() and not (tmp_path / "model.safetensors").exists()
    model = loader.load_hf(tmp_path)
    assert max_gap(our_logits(model, *batch), hf_logits(hf_model, *batch), batch[1]) <= TOL


def test_save_hf_shards_with_an_index_that_transformers_reads(checkpoints, batch, tmp_path):
    path, hf_model = checkpoints["qwen3"]
    saved = loader.save_hf(loader.load_hf(path), tmp_path / "sharded", max_shard_size="60KB")
    index = json.loads((saved / "model.safetensors.index.json").read_text())
    files = sorted(p.name for p in saved.glob("*.safetensors"))
    assert len(files) > 2 and sorted(set(index["weight_map"].values())) == files
    assert index["metadata"]["total_size"] == sum(p.numel() * 4 for p in hf_model.parameters())
    for f in files:  # no file above the limit unless a single tensor is
        with safe_open(saved / f, framework="numpy") as st:
            sizes = [st.get_tensor(k).nbytes for k in st.keys()]
        assert sum(sizes) <= 60_000 or len(sizes) == 1
    assert max_gap(hf_logits(load_transformers(saved), *batch), hf_logits(hf_model, *batch), batch[1]) <= TOL
    assert max_gap(our_logits(loader.load_hf(saved), *batch), hf_logits(hf_model, *batch), batch[1]) <= TOL


# ---------------------------------------------------------------- placement


@nnx.jit
def _forward(model, tokens, positions, mask):
    return model(tokens, positions, None, mask)[0]


@pytest.mark.parametrize("family", ["llama3", "gemma3"])
def test_mesh_load_is_sharded_and_matches_one_device(checkpoints, batch, family):
    path, _ = checkpoints[family]
    mesh = make_mesh(2, 4)
    model = loader.load_hf(path, mesh=mesh)
    q = model.layers[0].attn.q_proj.kernel[...]  # [D, N, H] = [64, 4, 16]
    assert q.sharding.spec == P("fsdp", "tp", None)
    assert {s.data.shape for s in q.addressable_shards} == {(32, 1, 16)}
    table = model.embedder.embedding[...]  # [V, D] = [256, 64]
    assert table.sharding.spec == P("tp", "fsdp") and table.addressable_shards[0].data.shape == (64, 32)
    if family == "llama3":  # untied head [D, V]
        assert model.lm_head.kernel[...].sharding.spec == P("fsdp", "tp")
    tokens, mask, positions = (jnp.asarray(x) for x in batch)
    with jax.set_mesh(mesh):
        sharded = np.asarray(_forward(model, tokens, positions, mask))
    single = our_logits(loader.load_hf(path), *batch)
    assert max_gap(sharded, single, batch[1]) <= 1e-5


def test_each_device_reads_only_its_block(checkpoints, monkeypatch):
    """The placement callback is asked for one block per device, never the whole tensor of a sharded param."""
    path, _ = checkpoints["qwen3"]
    asked = []
    real = jax.make_array_from_callback

    def spy(shape, sharding, callback):
        def wrapped(idx):
            block = callback(idx)
            asked.append((shape, block.shape))
            return block
        return real(shape, sharding, wrapped)

    monkeypatch.setattr(loader.jax, "make_array_from_callback", spy)
    loader.load_hf(path, mesh=make_mesh(2, 4))
    q_blocks = [block for shape, block in asked if shape == (64, 4, 16)]
    assert q_blocks and all(block == (32, 1, 16) for block in q_blocks)


def test_dtype_casts_params_and_config(checkpoints, batch):
    path, hf_model = checkpoints["qwen3"]
    model = loader.load_hf(path, dtype=jnp.bfloat16)
    assert model.config.dtype == model.config.param_dtype == "bfloat16"
    assert {x.dtype for x in jax.tree.leaves(nnx.state(model, nnx.Param))} == {jnp.dtype(jnp.bfloat16)}
    assert max_gap(our_logits(model, *batch), hf_logits(hf_model, *batch), batch[1]) < 0.5  # bf16: loose


# ---------------------------------------------------------------- configs


@pytest.mark.parametrize("cls", [transformers.LlamaConfig, transformers.Qwen3Config, transformers.Gemma3TextConfig])
def test_missing_keys_default_as_in_transformers(cls):
    """An almost empty config.json means what transformers' own defaults mean."""
    assert loader.config_from_hf({"model_type": cls.model_type}) == loader.config_from_hf(cls().to_dict())


HUB_STYLE = {  # keys as config.json files on the Hub spell them (pre transformers 5)
    "llama": dict(model_type="llama", hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                  num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128_256,
                  rms_norm_eps=1e-5, tie_word_embeddings=True, rope_theta=500_000.0, torch_dtype="bfloat16",
                  max_position_embeddings=131_072,
                  rope_scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                    original_max_position_embeddings=8192)),
    "qwen3": dict(model_type="qwen3", hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151_936,
                  max_position_embeddings=40_960, rope_theta=1_000_000, rope_scaling=None, tie_word_embeddings=True,
                  use_sliding_window=False, sliding_window=None, max_window_layers=28, torch_dtype="bfloat16"),
    "gemma3_text": dict(model_type="gemma3_text", vocab_size=262_144, hidden_size=1152, intermediate_size=6912,
                        num_hidden_layers=26, num_attention_heads=4, num_key_value_heads=1, head_dim=256,
                        query_pre_attn_scalar=256, max_position_embeddings=32_768, sliding_window=512,
                        sliding_window_pattern=6, rope_theta=1_000_000, rope_local_base_freq=10_000,
                        rope_scaling=None, torch_dtype="bfloat16"),
    "gemma3_text_scaled": dict(model_type="gemma3_text", hidden_size=2560, intermediate_size=10240,
                               num_hidden_layers=34, num_attention_heads=8, num_key_value_heads=4,
                               sliding_window=1024, rope_scaling={"factor": 8.0, "rope_type": "linear"}),
}
PRESET_OF = {"llama": "llama3.2-1b", "qwen3": "qwen3-0.6b", "gemma3_text": "gemma3-1b"}


@pytest.mark.parametrize("name", HUB_STYLE)
def test_hub_and_transformers5_spellings_read_the_same(name):
    """The Hub's keys, and transformers 5's rewrite of them (rope_parameters, layer_types), give one ModelConfig."""
    hub = HUB_STYLE[name]
    rewritten = transformers.AutoConfig.for_model(**hub).to_dict()
    assert "rope_parameters" in rewritten
    assert loader.config_from_hf(hub) == loader.config_from_hf(rewritten)
    if name in PRESET_OF:
        assert loader.config_from_hf(hub) == ModelConfig.from_name(PRESET_OF[name])


def test_gemma3_multimodal_config_reads_its_text_config():
    full = transformers.Gemma3Config(text_config=HUB_STYLE["gemma3_text_scaled"]).to_dict()
    cfg = loader.config_from_hf(full)
    assert cfg.family == "gemma3" and cfg.num_layers == 34 and cfg.sliding_window == 1024
    assert cfg.rope_scaling.kind == "linear" and cfg.rope_scaling.factor == 8.0 and cfg.local_rope_theta == 10_000
    assert cfg.layer_types[:6] == ("local",) * 5 + ("global",)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_config_to_hf_round_trips_and_transformers_agrees(name):
    cfg = ModelConfig.from_name(name)
    hf = loader.config_to_hf(cfg)
    assert loader._canonical(loader.config_from_hf(hf)) == loader._canonical(cfg)
    parsed = transformers.AutoConfig.for_model(**hf).to_dict()  # transformers' reading of what we wrote
    assert loader._canonical(loader.config_from_hf(parsed)) == loader._canonical(cfg)


def test_config_to_hf_refuses_what_hf_cannot_express():
    with pytest.raises(ValueError, match=r"\['qk_norm'\].*'llama'"):
        loader.config_to_hf(ModelConfig.from_name("tiny-llama3", qk_norm=True))
    with pytest.raises(ValueError, match="attn_logit_softcap"):
        loader.config_to_hf(ModelConfig.from_name("tiny-gemma3", attn_logit_softcap=50.0))


def test_unsupported_configs_name_the_choices():
    with pytest.raises(ValueError, match="unsupported model_type 'mistral'; choose one of: llama, qwen3, gemma3_text, gemma3"):
        loader.config_from_hf({"model_type": "mistral"})
    with pytest.raises(ValueError, match="LlamaForSequenceClassification.*choose one of: LlamaForCausalLM"):
        loader.config_from_hf({"model_type": "llama", "architectures": ["LlamaForSequenceClassification"]})
    with pytest.raises(ValueError, match="unsupported rope_type 'yarn'.*default, linear, llama3"):
        loader.config_from_hf({"model_type": "qwen3", "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})
    with pytest.raises(ValueError, match="attention_bias=True"):
        loader.config_from_hf({"model_type": "llama", "attention_bias": True})


# ---------------------------------------------------------------- bad checkpoints


def test_missing_tensor_is_named_with_its_shape(checkpoints, tmp_path):
    path, _ = checkpoints["llama3"]
    bad = _copy_without(path, tmp_path / "bad", drop={"model.layers.1.mlp.up_proj.weight"})
    with pytest.raises(ValueError, match=r"missing tensor 'model\.layers\.1\.mlp\.up_proj\.weight': expected shape \(128, 64\)"):
        loader.load_hf(bad)


def test_wrong_shape_names_tensor_expected_and_found(checkpoints, tmp_path):
    path, _ = checkpoints["gemma3"]
    wrong = np.zeros((16, 64), np.float32)  # K·H = 2·16 = 32 rows expected
    bad = _copy_without(path, tmp_path / "bad", replace={"model.layers.2.self_attn.k_proj.weight": wrong})
    with pytest.raises(ValueError, match=r"'model\.layers\.2\.self_attn\.k_proj\.weight' has shape \(16, 64\), expected \(32, 64\)"):
        loader.load_hf(bad)


def test_unexpected_tensor_is_reported(checkpoints, tmp_path):
    path, _ = checkpoints["qwen3"]
    extra = {"model.layers.0.self_attn.q_proj.bias": np.zeros(64, np.float32)}
    bad = _copy_without(path, tmp_path / "bad", replace=extra)
    with pytest.raises(ValueError, match=r"unexpected tensor 'model\.layers\.0\.self_attn\.q_proj\.bias' with shape \(64,\)"):
        loader.load_hf(bad)


def test_missing_files_are_file_not_found(checkpoints, tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        loader.load_hf(tmp_path)
    shutil.copy(checkpoints["qwen3"][0] / "config.json", tmp_path)
    with pytest.raises(FileNotFoundError, match="no safetensors weights"):
        loader.load_hf(tmp_path)


# ---------------------------------------------------------------- reading and writing files


def test_views_equal_safe_open_and_copy_nothing(tmp_path):
    arrays = {"bf": np.arange(24, dtype=np.float32).reshape(2, 3, 4).astype(ml_dtypes.bfloat16),
              "f32": np.linspace(-1, 1, 10, dtype=np.float32), "i64": np.arange(5, dtype=np.int64)}
    save_file(arrays, tmp_path / "t.safetensors")
    views = loader.read_safetensors(tmp_path / "t.safetensors")
    with safe_open(tmp_path / "t.safetensors", framework="numpy") as f:
        for k in f.keys():
            ref = f.get_tensor(k)
            assert views[k].dtype == ref.dtype and np.array_equal(views[k], ref)
    assert not any(v.flags.owndata or v.flags.writeable for v in views.values())


def test_head_transforms_are_views_and_invert():
    cfg = ModelConfig.from_name("tiny-qwen3")  # N 8, K 4, H 16, D 64
    shapes = {"q_heads": (128, 64), "kv_heads": (64, 64), "o_heads": (64, 128), "linear": (128, 64)}
    for name, shape in shapes.items():
        w = np.random.default_rng(0).normal(size=shape).astype(np.float32)
        t = loader.TRANSFORMS[name]
        ours = t.to_nnx(w, cfg)
        assert np.shares_memory(ours, w), name
        assert np.array_equal(t.to_hf(ours, cfg), w), name
    q = loader.TRANSFORMS["q_heads"].to_nnx(np.arange(128 * 64).reshape(128, 64), cfg)
    assert q[5, 2, 3] == (2 * 16 + 3) * 64 + 5  # [D, N, H] picks HF row n·H + h, column d


def test_key_map_reads_both_ways():
    names = loader.key_map("gemma3")
    path, _ = names.to_nnx("model.layers.12.post_attention_layernorm.weight")
    assert path == "layers.12.post_attn_norm.scale"
    assert loader.key_map("llama3").to_nnx("model.layers.12.post_attention_layernorm.weight")[0] == "layers.12.pre_mlp_norm.scale"
    assert names.to_hf("layers.3.pre_mlp_norm.scale")[0] == "model.layers.3.pre_feedforward_layernorm.weight"
    assert names.to_nnx("model.layers.0.self_attn.q_proj.bias") is None


def test_save_refuses_to_clobber_and_leaves_nothing_behind_on_failure(checkpoints, tmp_path, monkeypatch):
    model = loader.load_hf(checkpoints["qwen3"][0])
    target = loader.save_hf(model, tmp_path / "ckpt")
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    with pytest.raises(FileExistsError, match="overwrite=True"):
        loader.save_hf(model, target)

    def failing_save_file(tensors, filename, metadata=None):  # dies on the second shard
        if "model-00002-of" in str(filename):
            raise OSError("disk full")
        save_file(tensors, filename, metadata=metadata)

    monkeypatch.setattr(loader, "save_file", failing_save_file)
    with pytest.raises(OSError, match="disk full"):
        loader.save_hf(model, target, max_shard_size="60KB", overwrite=True)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before  # old checkpoint intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no temporary directories left
    with pytest.raises(OSError):
        loader.save_hf(model, tmp_path / "fresh", max_shard_size="60KB")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]

    monkeypatch.setattr(loader, "save_file", save_file)
    loader.save_hf(model, target, max_shard_size="60KB", overwrite=True)
    assert (target / "model.safetensors.index.json").exists() and not (target / "model.safetensors").exists()
