"""The shipped tiny model: loads offline, agrees with its tokenizer, is partly right, and saves/loads round trip."""
import json
import os
import re
import socket
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import tunix_lit
from tunix_lit.data import arith
from tunix_lit.models import tiny
from tunix_lit.models.tokenizer import CharTokenizer, Tokenizer
from tunix_lit.models.transformer import Transformer, make_mesh


@pytest.fixture(scope="module")
def shipped():
    return tiny.load()


def test_load_needs_no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    model, tokenizer = tiny.load()
    assert isinstance(model, Transformer) and isinstance(tokenizer, Tokenizer)


def test_assets_live_inside_the_package():
    assert tiny.asset_dir() == Path(tunix_lit.__file__).parent / "assets" / "tiny"
    names = {p.name for p in tiny.asset_dir().iterdir()}
    assert {"config.json", "model.safetensors", "char_tokenizer.json", "training_log.json"} <= names
    assert sum(p.stat().st_size for p in tiny.asset_dir().iterdir()) < 5_000_000  # a few MB at most


def test_vocabulary_and_shapes_agree_with_the_tokenizer(shipped):
    model, tokenizer = shipped
    cfg = model.config
    assert cfg.family == "qwen3"
    assert cfg.vocab_size == tokenizer.vocab_size == 3 + len(arith.ALPHABET)
    assert model.embedder.embedding[...].shape == (tokenizer.vocab_size, cfg.embed_dim)
    assert (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id) == (0, 1, 2)
    ids = tokenizer.encode("12+7=")
    assert tokenizer.decode(ids) == "12+7=" and ids[0] == tokenizer.bos_id
    logits, _ = model(jnp.asarray([ids, ids]))
    assert logits.shape == (2, len(ids), tokenizer.vocab_size)
    assert cfg == tiny.model_config(tokenizer.vocab_size)


def test_parameter_count_matches_the_config_and_the_stated_range(shipped):
    model, _ = shipped
    c = model.config
    per_layer = (c.embed_dim * c.num_heads * c.head_dim * 2  # q and o projections
                 + c.embed_dim * c.num_kv_heads * c.head_dim * 2  # k and v
                 + 3 * c.embed_dim * c.hidden_dim  # gate, up, down
                 + 2 * c.embed_dim + 2 * c.head_dim)  # two block norms, q/k norms
    expected = c.vocab_size * c.embed_dim + c.num_layers * per_layer + c.embed_dim  # tied head, final norm
    count = sum(x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    assert count == expected
    assert 300_000 <= count <= 3_000_000


def test_task_names_a_valid_config_and_matches_the_training_log():
    cfg = arith.ArithConfig(**tiny.TASK)
    log = json.loads((tiny.asset_dir() / "training_log.json").read_text())
    assert log["task"] == tiny.TASK
    assert cfg.ops == "+" and cfg.digits == 2
    assert log["checks"][-1][1] >= log["target_accuracy"] > max(acc for _, acc in log["checks"][:-1])


def _greedy_rows(model, tokenizer, prompts: list, max_new: int, width: int = 16) -> list:
    """Plain full-recompute greedy decoding (argmax at each row's last token, append, repeat; a row stops at EOS),
    every prompt at once: rows right-padded to `width` slots (causal: the padding after a row's last token changes
    none of its logits), one compiled forward a step for all rows."""
    forward = nnx.jit(lambda m, t: m(t)[0])
    rows = [tokenizer.encode(p) for p in prompts]
    ids, n = np.zeros((len(rows), width), np.int32), np.array([len(r) for r in rows])
    for i, r in enumerate(rows):
        ids[i, :len(r)] = r
    new, live = [[] for _ in rows], np.ones(len(rows), bool)
    for _ in range(max_new):
        nxt = np.asarray(forward(model, jnp.asarray(ids)))[np.arange(len(rows)), n - 1].argmax(-1)
        live &= nxt != tokenizer.eos_id
        for i in np.flatnonzero(live):
            new[i].append(int(nxt[i]))
            ids[i, n[i]] = nxt[i]
        n += live
    return [tokenizer.decode(t) for t in new]


def test_shipped_model_is_partly_right_on_heldout_sums(shipped):
    """Greedy exact match on 300 held-out sums lies in [25 %, 60 %]; wrong answers are still integers."""
    model, tokenizer = shipped
    problems = arith.sample(arith.ArithConfig(**tiny.TASK), 300, "heldout", seed=11)
    texts = _greedy_rows(model, tokenizer, [ex["prompt"] for ex in problems], max_new=4)
    right = integers = 0
    for ex, text in zip(problems, texts):
        a, b = map(int, re.match(r"^(\d+)\+(\d+)=$", ex["prompt"]).groups())
        right += text == str(a + b)
        integers += re.fullmatch(r"\d+", text) is not None
    accuracy = right / len(problems)
    assert 0.25 <= accuracy <= 0.60, accuracy
    assert integers / len(problems) > 0.95


def test_load_onto_a_mesh_gives_the_same_logits(shipped):
    model, tokenizer = shipped
    mesh = make_mesh(2, 4)
    sharded, _ = tiny.load(mesh=mesh)
    tokens = jnp.asarray([tokenizer.encode("12+7=")] * 2)
    kernel = sharded.layers[0].mlp.gate_proj.kernel[...]
    assert len(kernel.sharding.device_set) == 8
    np.testing.assert_allclose(np.asarray(sharded(tokens)[0]), np.asarray(model(tokens)[0]), atol=1e-5)


def test_save_then_load_round_trips(shipped, tmp_path):
    model, tokenizer = shipped
    path = tiny.save(model, tokenizer, tmp_path / "copy", log={"note": "round trip"})
    again, tok2 = tiny.load(path=path)
    for a, b in zip(jax.tree.leaves(nnx.state(model, nnx.Param)), jax.tree.leaves(nnx.state(again, nnx.Param))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert tok2.backend.alphabet == tokenizer.backend.alphabet
    assert json.loads((path / "training_log.json").read_text()) == {"note": "round trip"}
    assert all(p.stat().st_mode & 0o004 for p in path.iterdir())  # readable by everyone, as shipped files must be


def test_save_rejects_a_mismatched_tokenizer(shipped, tmp_path):
    model, _ = shipped
    with pytest.raises(ValueError, match="vocab_size"):
        tiny.save(model, CharTokenizer("0123456789"), tmp_path / "bad")
    with pytest.raises(TypeError, match="CharTokenizer"):
        tiny.save(model, object(), tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


@pytest.mark.slow
def test_a_built_wheel_ships_the_assets(tmp_path):
    """A non-editable install (wheel) carries assets/tiny, and load() finds them there."""
    import shutil
    import subprocess
    import sys

    root = Path(tunix_lit.__file__).resolve().parents[1]
    src = tmp_path / "src"
    src.mkdir()
    for name in ("setup.py", "settings.ini", "README.md"):
        shutil.copy(root / name, src / name)
    shutil.copytree(root / "tunix_lit", src / "tunix_lit", ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run(pip + ["wheel", ".", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "whl")],
                   cwd=src, check=True, capture_output=True)
    wheel = next((tmp_path / "whl").glob("*.whl"))
    subprocess.run(pip + ["install", "--no-deps", "--target", str(tmp_path / "site"), str(wheel)],
                   check=True, capture_output=True)
    probe = ("import tunix_lit; from tunix_lit.models import tiny; m, t = tiny.load(); "
             "print(tunix_lit.__file__, m.config.vocab_size, t.vocab_size)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, check=True, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(tmp_path / "site"), "JAX_PLATFORMS": "cpu"})
    location, vocab, tok_vocab = out.stdout.split()
    assert location.startswith(str(tmp_path / "site")) and vocab == tok_vocab == "19"
