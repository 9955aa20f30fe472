"""The sampler against independent references: a full-recompute loop, a full forward pass, NumPy, HF `generate`."""
import functools
import math
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tunix_lit.generate import sampler as sampler_lib
from tunix_lit.generate.sampler import Sampler, sample_logits
from tunix_lit.models.tokenizer import CharTokenizer, Tokenizer
from tunix_lit.models.transformer import ModelConfig, create_model, make_mesh

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "models"))  # hf_fixtures lives beside the model tests

ALPHABET = "0123456789+-*= abcdefghijklmnop"
PROMPTS = ["12+7=", "hello", "3*4-5=", "a"]


class IntTokenizer:
    """Stand-in tokenizer: text is space-separated ids; pad/bos/eos configurable."""

    def __init__(self, pad_id=0, bos_id=1, eos_id=2):
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.eos_ids = (eos_id,)

    def encode(self, text):
        return [int(t) for t in text.split()]

    def decode(self, ids):
        return " ".join(str(int(i)) for i in ids)


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.wrap(CharTokenizer(ALPHABET))


def make_model(tok, family="tiny-qwen3", seed=0, mesh=None, tied=False):
    # untied by default: a random tied model with the default table (std 1) puts all mass on its input token,
    # which would make greedy checks trivial and every log-prob 0; a tied one gets a table of std 0.1 instead
    cfg = ModelConfig.from_name(family, vocab_size=tok.vocab_size, tie_embeddings=tied)
    model = create_model(cfg, seed=seed, mesh=mesh)
    if tied:
        table = model.embedder.embedding
        table.set_value(table.get_value() * (0.1 / float(np.asarray(table.get_value()).std())))
    return model


@pytest.fixture(scope="module")
def model(tok):
    return make_model(tok)


@functools.partial(jax.jit, static_argnums=0)
def _forward(graphdef, state, x):
    return nnx.merge(graphdef, state)(x)[0]


def full_logits(model, ids):
    """Logits float32 [len(ids), V] of one full forward pass (no cache). The row is right-padded to a multiple of 32
    slots, which causality makes invisible to the real positions, so a model compiles once for every short row."""
    graphdef, state = nnx.split(model)
    x = np.zeros((1, -(-len(ids) // 32) * 32), np.int32)
    x[0, :len(ids)] = ids
    return np.asarray(_forward(graphdef, state, x))[0, :len(ids)]


def greedy_reference(model, prompt_ids, max_new_tokens, stop_ids=()):
    """Greedy by full recompute: no cache, no left padding; the sequence is right-padded to one fixed length,
    which causality makes invisible to the last real position."""
    ids = list(prompt_ids)
    for _ in range(max_new_tokens):
        ids.append(int(np.argmax(full_logits(model, ids)[-1])))
        if ids[-1] in stop_ids:
            break
    return ids[len(prompt_ids):]


def full_logprobs(model, prompt, completion, temperature=1.0):
    """log_softmax(logits / T) of one full forward pass over prompt + completion, at each completion token (NumPy)."""
    logits = np.asarray(full_logits(model, list(prompt) + list(completion)), np.float64) / temperature
    logp = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) - logits.max(-1, keepdims=True)
    rows = np.arange(len(prompt) - 1, len(prompt) + len(completion) - 1)
    return logp[rows, np.asarray(completion)]


@pytest.mark.parametrize("family", ["tiny-qwen3", "tiny-llama3", "tiny-gemma3"])
def test_greedy_equals_full_recompute_loop(tok, family):
    """Mixed prompt lengths in one batch; gemma3's 4-slot window is shorter than the sequences."""
    model = make_model(tok, family)
    out = Sampler(model, tok).generate([tok.encode(p) for p in PROMPTS], max_new_tokens=10, stop_tokens=[])
    for prompt, got in zip(out.prompt_tokens, out.tokens):
        assert list(got) == greedy_reference(model, prompt, 10)


@pytest.mark.parametrize("family", ["tiny-qwen3", "tiny-llama3", "tiny-gemma3"])
def test_one_row_decodes_attending_first_and_equals_full_recompute(tok, family, monkeypatch):
    """On a CPU a batch of one row decodes through chapter 10's attend-then-write step; tokens and log-probs
    equal a full forward pass over the final sequence. A two-row call keeps the plain path and agrees too."""
    model = make_model(tok, family)
    sampler = Sampler(model, tok)
    assert sampler.append_last == (jax.default_backend() == "cpu")
    seen, real_decode = [], sampler_lib.decode
    monkeypatch.setattr(sampler_lib, "decode", lambda g, s, carry, *a, **k: (seen.append(carry.cache.append_last),
                                                                              real_decode(g, s, carry, *a, **k))[1])
    for prompts in ([PROMPTS[0]], PROMPTS[:2]):
        out = sampler.generate([tok.encode(p) for p in prompts], max_new_tokens=8, stop_tokens=[])
        for prompt, got, lp in zip(out.prompt_tokens, out.tokens, out.logprobs):
            assert list(got) == greedy_reference(model, prompt, 8)
            np.testing.assert_allclose(lp, full_logprobs(model, prompt, got, 1.0), atol=2e-4)
    assert seen == [sampler.append_last, False]  # traced once per batch shape: one row, then two


@pytest.mark.parametrize("dots", ["eigen", "ynnpack"])
def test_either_cpu_matmul_kernel_gives_the_full_recompute_tokens(tok, model, dots, monkeypatch):
    """Both kernel choices of chapter 14 compile the prefill and decode, and both give the reference's greedy tokens."""
    if jax.default_backend() != "cpu":
        pytest.skip("the matmul-kernel choice is an XLA:CPU option; other backends compile without it")
    monkeypatch.setenv("TUNIX_LIT_DECODE_DOTS", dots)
    sampler = Sampler(model, tok)
    eigen = {"xla_cpu_experimental_ynn_fusion_type": ""} if dots == "eigen" else {}
    assert sampler.compiler_options == {"xla_cpu_copy_insertion_use_region_analysis": True, **eigen}
    prompts = [tok.encode(p) for p in PROMPTS]
    out = sampler.generate(prompts, max_new_tokens=6, stop_tokens=[])
    for prompt, got in zip(out.prompt_tokens, out.tokens):
        assert list(got) == greedy_reference(model, prompt, 6)


def test_one_row_decode_copies_add_the_down_kernels_as_d_by_f(tok, monkeypatch):
    """One row on a CPU: the per-call copies add each layer's down kernel as [D, F] (several rows: not), and the
    sampled tokens' log-probs still match a full forward pass."""
    if jax.default_backend() != "cpu":
        pytest.skip("the per-call copies are made for a CPU decode loop only")
    model = make_model(tok, "tiny-qwen3", seed=3, tied=True)
    real, per_layer = sampler_lib.decode_projections, []

    def spy(model, batch):
        fused = real(model, batch)
        per_layer.append(len(fused[0]))
        return fused
    monkeypatch.setattr(sampler_lib, "decode_projections", spy)
    lowest = 0.0
    for prompts in ([PROMPTS[0]], PROMPTS[:2]):
        out = Sampler(model, tok).generate([tok.encode(p) for p in prompts], max_new_tokens=6, temperature=0.9,
                                           seed=4, stop_tokens=[])
        for prompt, got, lp in zip(out.prompt_tokens, out.tokens, out.logprobs):
            np.testing.assert_allclose(lp, full_logprobs(model, prompt, got, 0.9), atol=2e-4)
            lowest = min(lowest, float(np.min(lp)))
    assert per_layer == [3, 2]  # (q|k|v, gate|up, down as [D, F]) for one row; two kernels for two rows
    assert lowest < -1.0  # a spread-out policy, so a wrong MLP output would show in the log-probs


@pytest.mark.parametrize("family", ["tiny-gemma3", "tiny-qwen3"])
def test_decode_copies_give_the_full_forward_log_probs_with_a_tied_head(tok, family, monkeypatch):
    """A tied head and several rows: the CPU decode's per-call copies (the table transposed, q|k|v and gate|up
    side by side) are made, and tokens and log-probs match a full forward pass; decode_copies=False makes none."""
    model = make_model(tok, family, seed=3, tied=True)
    made = []

    def spy(name):  # records whether each copy was made when the decode program is traced
        real = getattr(sampler_lib, name)

        def wrapped(*args):
            out = real(*args)
            made.append((name, out is not None))
            return out
        return wrapped

    for name in ("decode_head", "decode_projections"):
        monkeypatch.setattr(sampler_lib, name, spy(name))
    outs = {}
    for copies in (True, False):
        made.clear()
        outs[copies] = Sampler(model, tok, decode_copies=copies).generate(
            [tok.encode(p) for p in PROMPTS], max_new_tokens=6, temperature=0.9, seed=4, stop_tokens=[])
        cpu = jax.default_backend() == "cpu"  # elsewhere both are asked and decline: an accelerator takes either layout
        expected = [("decode_head", cpu), ("decode_projections", cpu)] if copies else []
        assert made == expected
    assert np.concatenate(outs[True].logprobs).min() < -1.0  # a spread-out policy, so the check below can fail
    for prompt, got, lp in zip(outs[True].prompt_tokens, outs[True].tokens, outs[True].logprobs):
        np.testing.assert_allclose(lp, full_logprobs(model, prompt, got, 0.9), atol=2e-4)
    for a, b in zip(outs[True].tokens, outs[False].tokens):
        np.testing.assert_array_equal(a, b)


def test_greedy_stops_where_the_loop_stops(tok, model):
    """With a stop token the rows end at the reference's first stop token, and include it."""
    first = greedy_reference(model, tok.encode(PROMPTS[0]), 6)
    stop = first[2]  # the third greedy token of the first prompt becomes a stop token
    out = Sampler(model, tok)(PROMPTS, max_new_tokens=6, stop_tokens=[stop, tok.eos_id])
    for prompt, got, finished in zip(out.prompt_tokens, out.tokens, out.finished):
        want = greedy_reference(model, prompt, 6, stop_ids=(stop, tok.eos_id))
        assert list(got) == want
        assert finished == (want[-1] in (stop, tok.eos_id))
    assert out.finished[0] and len(out.tokens[0]) == 3


@pytest.mark.parametrize("family", ["llama3", "qwen3", "gemma3"])
def test_greedy_equals_transformers_generate(family, tmp_path):
    """Our loader + sampler against HF greedy `generate` on a tiny random checkpoint of each family."""
    torch = pytest.importorskip("torch")
    hf_fixtures = pytest.importorskip("hf_fixtures")
    loader = pytest.importorskip("tunix_lit.models.loader")
    hf_model = hf_fixtures.save_hf_checkpoint(family, tmp_path)
    model = loader.load_hf(tmp_path)
    vocab = model.config.vocab_size
    prompts = np.random.default_rng(0).integers(3, vocab, size=(2, 7))  # 7 + 12 slots: past gemma3's window of 4
    n = 12
    hf_model.generation_config.eos_token_id = None  # no stopping on either side
    with torch.no_grad():
        want = hf_model.generate(input_ids=torch.as_tensor(prompts, dtype=torch.long),
                                 attention_mask=torch.ones(prompts.shape, dtype=torch.long),
                                 max_new_tokens=n, do_sample=False, pad_token_id=0)[:, prompts.shape[1]:].numpy()
    out = Sampler(model, IntTokenizer()).generate(prompts, max_new_tokens=n, stop_tokens=[])
    np.testing.assert_array_equal(np.stack(out.tokens), want)


def test_sampled_logprobs_equal_full_forward_log_softmax_at_temperature(tok, model):
    """Sampled at T=1.3 with top-k and top-p, the reported log-probs are log softmax(logits / 1.3), untruncated."""
    out = Sampler(model, tok)(PROMPTS, max_new_tokens=12, temperature=1.3, top_k=12, top_p=0.95, seed=4,
                              stop_tokens=[])
    for prompt, toks, lps in zip(out.prompt_tokens, out.tokens, out.logprobs):
        assert toks.shape == lps.shape == (12,)
        np.testing.assert_allclose(lps, full_logprobs(model, prompt, toks, temperature=1.3), atol=2e-4)
        assert np.abs(lps - full_logprobs(model, prompt, toks)).max() > 1e-3  # not the raw logits' (T matters)


@pytest.mark.parametrize("temperature", [0.5, 0.9, 2.0])
def test_sampled_logprobs_follow_the_temperature(tok, model, temperature):
    """Plain temperature sampling: the log-probs the learners recompute at the same T (NumPy reference)."""
    out = Sampler(model, tok)(PROMPTS, max_new_tokens=8, temperature=temperature, seed=1, stop_tokens=[])
    for prompt, toks, lps in zip(out.prompt_tokens, out.tokens, out.logprobs):
        np.testing.assert_allclose(lps, full_logprobs(model, prompt, toks, temperature=temperature), atol=2e-4)


def test_greedy_logprobs_are_the_raw_logits(tok, model):
    """Greedy counts as temperature 1."""
    out = Sampler(model, tok)(PROMPTS, max_new_tokens=8, temperature=0.0, stop_tokens=[])
    for prompt, toks, lps in zip(out.prompt_tokens, out.tokens, out.logprobs):
        np.testing.assert_allclose(lps, full_logprobs(model, prompt, toks), atol=2e-4)


def _allowed_top_p(logits, top_p):
    """Ids kept by nucleus sampling (NumPy, float64): sorted by probability, keep while the mass above is < top_p."""
    p = np.exp(logits - logits.max())
    p /= p.sum()
    order = np.argsort(-p, kind="stable")
    above = np.cumsum(p[order]) - p[order]
    return set(order[above < top_p - 1e-6]), set(order[above < top_p + 1e-6])  # (surely kept, possibly kept)


@pytest.mark.parametrize("top_k,top_p", [(5, None), (None, 0.7), (8, 0.5), (1, None), (None, 0.05)])
def test_top_k_top_p_never_leave_the_allowed_set(top_k, top_p):
    """4,000 draws per distribution; every draw is in the NumPy-computed set, and (for k > 1) more than one id shows up."""
    rng = np.random.default_rng(0)
    for trial in range(3):
        logits = (rng.normal(size=64) * 2.0).astype(np.float32)
        many = jnp.asarray(np.tile(logits, (4000, 1)))
        draws = np.asarray(sample_logits(many, jax.random.key(trial), jnp.float32(1.0), jnp.float32(top_p or 1.0),
                                         top_k=top_k, use_top_p=top_p is not None))
        allowed = set(np.argsort(-logits)[:top_k]) if top_k else set(range(64))
        if top_p is not None:
            allowed &= _allowed_top_p(logits.astype(np.float64), top_p)[1]
        assert set(draws.tolist()) <= allowed, sorted(set(draws.tolist()) - allowed)
        if len(allowed) > 1:
            assert len(set(draws.tolist())) > 1


def test_top_k_in_the_sampler_stays_in_the_models_top_k(tok, model):
    """The first sampled token of 64 copies of a prompt is always among the full pass's 3 most likely ids."""
    prompt = tok.encode("12+7=")
    logits = full_logits(model, prompt)[-1]
    out = Sampler(model, tok)(["12+7="] * 64, max_new_tokens=1, top_k=3, temperature=2.0, seed=0, stop_tokens=[])
    firsts = {int(t[0]) for t in out.tokens}
    assert firsts <= set(np.argsort(-logits)[:3]) and len(firsts) > 1


@pytest.mark.slow  # the default run's test_greedy_equals_full_recompute_loop decodes mixed prompt lengths in one batch
def test_left_padding_does_not_change_greedy_output(tok, model):
    sampler = Sampler(model, tok)
    alone = sampler(["3*4-5="], max_new_tokens=10, stop_tokens=[]).tokens[0]
    crowded = sampler(["3*4-5=", "1+2+3+4+5+6+7+8+9="], max_new_tokens=10, stop_tokens=[]).tokens[0]
    fixed = sampler(["3*4-5="], max_new_tokens=10, stop_tokens=[], max_prompt_length=40).tokens[0]
    assert list(alone) == list(crowded) == list(fixed)


def test_generated_token_equal_to_pad_id_stays_visible(tok, model):
    """Masks come from lengths: make the pad id a token greedy decoding emits; the output must not change."""
    prompt = [1] + CharTokenizer(ALPHABET).encode("hello")
    want = greedy_reference(model, prompt, 8)
    pad_tok = IntTokenizer(pad_id=want[1], eos_id=-5)  # the second generated token is now the pad id
    out = Sampler(model, pad_tok).generate([prompt, prompt[:3]], max_new_tokens=8, stop_tokens=[])
    assert list(out.tokens[0]) == want


# tied: the decode loop's transposed table on a mesh (chapter 15); the untied head (12 s, the plainer path) with -m slow
@pytest.mark.parametrize("tied", [pytest.param(False, marks=pytest.mark.slow), True])
def test_sharded_sampler_gives_the_tokens_of_one_device(tok, tied):
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 devices (tests/conftest.py sets 8 fake CPU devices)")
    mesh = make_mesh(2, 4)
    plain = make_model(tok, seed=3, tied=tied)
    single = Sampler(plain, tok)
    sharded = Sampler(make_model(tok, seed=3, mesh=mesh, tied=tied), tok)
    assert sharded.state["layers"][0]["mlp"]["gate_proj"]["kernel"][...].sharding.mesh.size == 8
    # the last case is one row: the attend-then-write decode step on a sharded cache
    cases = ((PROMPTS, dict()), (PROMPTS, dict(temperature=1.0, top_k=6, seed=11)), (PROMPTS[:1], dict()))
    for prompts, kw in cases:
        b = sharded(prompts, max_new_tokens=10, stop_tokens=[], **kw)
        if kw:  # sampled: the draws of the same sampler on one device
            want = single(prompts, max_new_tokens=10, stop_tokens=[], **kw).tokens
        else:  # greedy: the one-device full-recompute loop (its forward is compiled once, not two sampler programs)
            want = [greedy_reference(plain, p, 10) for p in b.prompt_tokens]
        for x, y in zip(want, b.tokens):
            assert list(x) == list(y), (len(prompts), kw)


def test_compile_count_stays_bounded_across_prompt_lengths(tok, model):
    """Prompt lengths 1..40 (+BOS) fall in buckets 8, 16, 32, 64: four traces of each function, then none."""
    sampler = Sampler(model, tok, max_len=128)
    for n in range(1, 41):
        sampler(["1" * n, "2" * max(1, n // 3)], max_new_tokens=5 + n % 4)  # 5..8 new tokens: one G bucket (8)
    assert dict(sampler.traces) == {"prefill": 4, "decode": 4}
    for n in (5, 13, 29, 2):
        sampler(["3" * n, "4"], max_new_tokens=6, temperature=0.0)
    assert dict(sampler.traces) == {"prefill": 4, "decode": 4}


def test_temperature_and_top_p_values_do_not_recompile(tok, model):
    sampler = Sampler(model, tok)
    sampler(PROMPTS, max_new_tokens=4, temperature=0.5, top_p=0.9)
    before = dict(sampler.traces)
    for t, p in ((0.7, 0.8), (1.5, 0.3), (0.1, 0.99)):
        sampler(PROMPTS, max_new_tokens=4, temperature=t, top_p=p)
    assert dict(sampler.traces) == before


def test_zero_temperature_is_greedy_even_with_top_k_and_top_p(tok, model):
    sampler = Sampler(model, tok)
    greedy = sampler(PROMPTS, max_new_tokens=8, stop_tokens=[]).tokens
    forced = sampler(PROMPTS, max_new_tokens=8, stop_tokens=[], temperature=0.0, top_k=5, top_p=0.5, seed=3).tokens
    assert all(list(a) == list(b) for a, b in zip(greedy, forced))


def test_top_k_alone_samples(tok, model):
    """Upstream ignores top_k without top_p; here top_k alone samples at temperature 1."""
    sampler = Sampler(model, tok)
    greedy = sampler(["12+7="] * 16, max_new_tokens=8, stop_tokens=[]).tokens
    sampled = sampler(["12+7="] * 16, max_new_tokens=8, stop_tokens=[], top_k=8, seed=0).tokens
    assert len({tuple(t) for t in sampled}) > 1
    assert any(list(a) != list(b) for a, b in zip(greedy, sampled))


def test_seed_repeats_a_draw_and_no_seed_draws_anew(tok, model):
    sampler = Sampler(model, tok, seed=0)
    kw = dict(max_new_tokens=10, temperature=1.0, stop_tokens=[])
    a, b = sampler(PROMPTS, seed=5, **kw).tokens, sampler(PROMPTS, seed=5, **kw).tokens
    c, d = sampler(PROMPTS, **kw).tokens, sampler(PROMPTS, **kw).tokens
    assert all(list(x) == list(y) for x, y in zip(a, b))
    assert any(list(x) != list(y) for x, y in zip(c, d))
    again = Sampler(model, tok, seed=0)  # the stream itself is reproducible from the constructor's seed
    assert all(list(x) == list(y) for x, y in zip(c, again(PROMPTS, **kw).tokens))


def test_decode_exits_early_when_every_row_is_done(tok, model):
    """Call the two compiled functions directly: the loop ends at the slot where the last row stopped."""
    ids = [tok.encode(p) for p in PROMPTS[:2]]
    refs = [greedy_reference(model, i, 12) for i in ids]
    stops = [refs[0][1], refs[1][1]]  # each row's second greedy token stops it (or an earlier one)
    ends = [min(k for k, t in enumerate(r) if t in stops) for r in refs]
    graphdef, state = nnx.split(model)
    P, L = 8, 32
    stop_ids = np.full(8, -1, np.int32)
    stop_ids[:2] = stops
    mode = sampler_lib.SamplingMode(greedy=True)
    pad = np.array([P - len(i) for i in ids], np.int32)
    args = (jnp.float32(1.0), jnp.float32(1.0), stop_ids, np.int32(0))
    prefill = jax.jit(sampler_lib.prefill, static_argnums=0, static_argnames=("buffer_len", "mode", "cache_dtype"))
    decode = jax.jit(sampler_lib.decode, static_argnums=0, static_argnames="mode")
    carry = prefill(graphdef, state, sampler_lib.left_pad(ids, P, 0), pad, jax.random.key(0), *args,
                    buffer_len=L, mode=mode, cache_dtype=jnp.float32)
    carry = decode(graphdef, state, carry, np.int32(L - 1), jax.random.key(0), *args, mode=mode)
    assert int(carry.step) == P + max(ends) < L - 1
    assert bool(np.asarray(carry.done).all())
    tokens = np.asarray(carry.tokens)
    for row, ref, end in zip(tokens, refs, ends):
        assert list(row[P:P + end + 1]) == ref[:end + 1] and (row[P + end + 1:] == 0).all()


def test_echo_returns_prompt_then_completion(tok, model):
    out = Sampler(model, tok)(["12+7=", "a"], max_new_tokens=5, echo=True, stop_tokens=[])
    plain = Sampler(model, tok)(["12+7=", "a"], max_new_tokens=5, stop_tokens=[])
    for prompt, e, p, elp, plp in zip(out.prompt_tokens, out.tokens, plain.tokens, out.logprobs, plain.logprobs):
        assert list(e) == list(prompt) + list(p)
        assert np.isnan(elp[:len(prompt)]).all() and np.allclose(elp[len(prompt):], plp)
    assert out.text[0].startswith("12+7=") and out.text[0] == "12+7=" + plain.text[0]


def test_text_leaves_out_the_stop_token(tok, model):
    out = Sampler(model, tok)(PROMPTS, max_new_tokens=8)
    for t, toks, f in zip(out.text, out.tokens, out.finished):
        assert t == tok.decode(toks[:-1] if f else toks)
        assert f == (toks[-1] == tok.eos_id)


def test_token_api_takes_a_padded_array_and_mask(tok, model):
    ids = [tok.encode(p) for p in PROMPTS]
    T = max(map(len, ids))
    right = np.zeros((len(ids), T), np.int32)
    mask = np.zeros((len(ids), T), bool)
    for r, i in enumerate(ids):
        right[r, :len(i)], mask[r, :len(i)] = i, True
    sampler = Sampler(model, tok)
    a = sampler.generate(ids, max_new_tokens=6, stop_tokens=[])
    b = sampler.generate(right, max_new_tokens=6, stop_tokens=[], prompt_mask=mask)
    assert all(list(x) == list(y) for x, y in zip(a.tokens, b.tokens))


def test_one_new_token(tok, model):
    out = Sampler(model, tok)(PROMPTS, max_new_tokens=1, stop_tokens=[])
    for prompt, t in zip(out.prompt_tokens, out.tokens):
        assert list(t) == greedy_reference(model, prompt, 1)


def test_new_state_changes_output_without_recompiling(tok, model):
    sampler = Sampler(model, tok)
    before_tokens = sampler(PROMPTS, max_new_tokens=6, stop_tokens=[]).tokens
    traces = dict(sampler.traces)
    other = make_model(tok, seed=9)
    sampler.state = nnx.state(other)
    after = sampler(PROMPTS, max_new_tokens=6, stop_tokens=[])
    assert dict(sampler.traces) == traces
    assert any(list(a) != list(b) for a, b in zip(before_tokens, after.tokens))
    for prompt, t in zip(after.prompt_tokens, after.tokens):
        assert list(t) == greedy_reference(other, prompt, 6)


def test_new_state_of_another_shape_is_rejected(tok, model):
    sampler = Sampler(model, tok)
    wider = create_model(ModelConfig.from_name("tiny-qwen3", vocab_size=tok.vocab_size, tie_embeddings=False,
                                               hidden_dim=256))
    with pytest.raises(ValueError, match="expected"):
        sampler.state = nnx.state(wider)
    deeper = make_model(tok, "tiny-gemma3")
    with pytest.raises(ValueError, match="same structure"):
        sampler.state = nnx.state(deeper)


@pytest.mark.parametrize("call,message", [
    (lambda s: s([]), "prompts is empty"),
    (lambda s: s.generate([]), "prompt_ids is empty"),
    (lambda s: s.generate([[1, 4], []]), "prompt 1 has no tokens"),
    (lambda s: s(["1" * 70], max_new_tokens=8), "a prompt of 71 tokens does not fit the buffer: max_len=64"),
    (lambda s: s(["1+1="], max_new_tokens=64), "a prompt of 5 tokens does not fit the buffer"),
    (lambda s: s(["1" * 20], max_prompt_length=16), "a prompt of 21 tokens is longer than max_prompt_length=16"),
    (lambda s: s(["1+1="], top_p=0.0), "top_p must be in (0, 1], got 0.0"),
    (lambda s: s(["1+1="], top_p=1.5), "top_p must be in (0, 1], got 1.5"),
    (lambda s: s(["1+1="], temperature=-0.5), "temperature must be a finite number >= 0 (0 means greedy), got -0.5"),
    (lambda s: s(["1+1="], temperature=math.nan), "got nan"),
    (lambda s: s(["1+1="], top_k=0), "top_k must be a positive integer, got 0"),
    (lambda s: s(["1+1="], max_new_tokens=0), "max_new_tokens must be a positive integer, got 0"),
    (lambda s: s.generate(np.ones((2, 3)), prompt_mask=np.ones((2, 4))), "must both be [B, T]"),
])
def test_bad_input_is_a_value_error_naming_the_value(tok, model, call, message):
    sampler = Sampler(model, tok, max_len=64)
    with pytest.raises(ValueError) as err:
        call(sampler)
    assert message in str(err.value)
    assert not sampler.traces  # rejected before anything compiled


def test_a_tokenizer_without_the_surface_is_a_type_error(model):
    with pytest.raises(TypeError, match="lacks"):
        Sampler(model, object())


def test_inverse_cdf_draws_follow_the_softmax_probabilities():
    """200,000 draws from a 16-way distribution: every frequency within 5 standard errors of its NumPy softmax."""
    from tunix_lit.generate.sampler import categorical_by_cdf

    logits = np.random.default_rng(3).normal(size=16).astype(np.float32) * 2.0
    p = np.exp(logits.astype(np.float64) - logits.max())
    p /= p.sum()
    n = 200_000
    draws = np.asarray(categorical_by_cdf(jax.random.key(0), jnp.asarray(np.tile(logits, (n, 1)))))
    freq = np.bincount(draws, minlength=16) / n
    assert (np.abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / n) + 1e-9).all(), (freq, p)


def test_inverse_cdf_never_draws_an_impossible_id():
    """Ids with logit -inf (top-k/top-p cut, or masked) are never drawn, even at the ends of the row."""
    from tunix_lit.generate.sampler import categorical_by_cdf

    logits = np.full((50_000, 12), -np.inf, np.float32)
    logits[:, 3:5] = [0.0, 30.0]  # nearly all mass on id 4, the last possible one
    draws = np.asarray(categorical_by_cdf(jax.random.key(1), jnp.asarray(logits)))
    assert set(draws.tolist()) <= {3, 4}


def test_two_level_inverse_cdf_matches_the_softmax_across_blocks():
    """V = 1000 (not a multiple of the 128-id block): mass spread over ids in several blocks, incl. the padded last one."""
    from tunix_lit.generate.sampler import categorical_by_cdf

    V, n = 1000, 40_000  # 5 standard errors: under 0.01 for every live id, far below a misplaced block's error
    live = np.array([0, 127, 128, 300, 511, 640, 999])  # block edges and the last (partial) block
    logits = np.full(V, -np.inf, np.float32)
    logits[live] = np.random.default_rng(5).normal(size=live.size).astype(np.float32)
    p = np.exp(logits[live].astype(np.float64) - logits[live].max())
    p /= p.sum()
    draws = np.asarray(categorical_by_cdf(jax.random.key(2), jnp.asarray(np.tile(logits, (n, 1)))))
    assert set(np.unique(draws).tolist()) <= set(live.tolist())  # never an impossible id
    freq = np.array([(draws == i).mean() for i in live])
    assert (np.abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / n) + 1e-9).all(), (freq, p)


def test_two_level_inverse_cdf_with_all_mass_on_the_last_id():
    from tunix_lit.generate.sampler import categorical_by_cdf

    logits = np.full((20_000, 777), -np.inf, np.float32)
    logits[:, 776] = 0.0
    logits[:, 5] = -40.0  # a sliver of mass far away
    draws = np.asarray(categorical_by_cdf(jax.random.key(3), jnp.asarray(logits)))
    assert set(draws.tolist()) <= {5, 776} and (draws == 776).mean() > 0.99


def test_prompt_runs_finds_equal_runs_of_identical_prompts_only():
    a, b, c = np.array([1, 5, 6]), np.array([1, 7]), np.array([1, 5, 6, 6])
    assert sampler_lib.prompt_runs([a, a, b, b, c, c]) == 2
    assert sampler_lib.prompt_runs([a] * 4) == 4
    assert sampler_lib.prompt_runs([a, b, a, b]) == 1  # duplicates, not adjacent
    assert sampler_lib.prompt_runs([a, a, a, b, b]) == 1  # unequal runs
    assert sampler_lib.prompt_runs([a, a, b, c]) == 1  # one run breaks
    assert sampler_lib.prompt_runs([a]) == 1


def test_runs_of_one_prompt_prefill_once_and_sample_as_the_full_batch_does(tok, model, monkeypatch):
    """Runs of 3 copies: tokens and log-probs equal those of the same call with every row prefilled, the
    log-probs equal a full forward pass at the temperature, and the run-shaped prefill compiles once."""
    rows = [tok.encode(p) for p in PROMPTS[:3] for _ in range(3)]
    shared = Sampler(model, tok)
    kw = dict(max_new_tokens=6, temperature=0.8, seed=5, stop_tokens=[])
    a = shared.generate(rows, **kw)
    shared.generate(rows, **{**kw, "seed": 6})
    assert dict(shared.traces) == {"prefill": 1, "decode": 1}
    assert len({tuple(t) for t in a.tokens[:3]}) > 1  # the copies of one prompt sample independently
    monkeypatch.setattr(sampler_lib, "prompt_runs", lambda rows: 1)  # every row prefilled
    b = Sampler(model, tok).generate(rows, **kw)
    assert [list(t) for t in a.tokens] == [list(t) for t in b.tokens]
    np.testing.assert_allclose(np.stack(a.logprobs), np.stack(b.logprobs), atol=1e-5)
    for p, t, lp in zip(a.prompt_tokens, a.tokens, a.logprobs):
        logits = np.asarray(full_logits(model, list(p) + list(t)), np.float64) / 0.8
        z = logits[len(p) - 1:-1]
        want = z[np.arange(len(t)), t] - z.max(-1) - np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1))
        np.testing.assert_allclose(lp, want, atol=1e-4)
