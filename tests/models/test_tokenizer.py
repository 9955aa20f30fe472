"""tunix_lit.models.tokenizer against independent references.

HF files: `transformers.AutoTokenizer` loaded from the same temp files. SentencePiece: the
`sentencepiece` processor itself. Character tokenizer: ids worked out by hand in each test.
Every tokenizer here is trained in a temp dir; nothing touches the network.
"""
import json

import jax.numpy as jnp
import numpy as np
import pytest
import sentencepiece as spm
import tokenizers
import transformers
from tokenizers import decoders, models, pre_tokenizers, processors, trainers
from transformers.utils.chat_template_utils import render_jinja_template

from tunix_lit.models import tokenizer as tk

transformers.logging.set_verbosity_error()

CORPUS = ["The cat sat on the mat.", "Two plus two is four.", "What is 2+3? It is 5.",
          "A tiny tokenizer for a tiny book.", "Answer briefly and check the sum.",
          "héllo wörld, naïve café"] * 4

QWEN_TEMPLATE = (
    "{%- if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are helpful.<|im_end|>\\n' }}{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "    {%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}\n"
    "{%- endif %}\n"
)
GEMMA_TEMPLATE = """{{ bos_token }}
{% for message in messages %}
    {% if message['role'] == 'system' %}
        {{ raise_exception('system role not supported') }}
    {% endif %}
    {% set role = 'model' if message['role'] == 'assistant' else message['role'] %}
    {{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}
{% endfor %}
{% if add_generation_prompt %}
    {{ '<start_of_turn>model\n' }}
{% endif %}"""
LLAMA_TEMPLATE = """{{ bos_token }}
{% if date_string is not defined %}{% set date_string = strftime_now('%d %b %Y') %}{% endif %}
{{ '<|start_header_id|>system<|end_header_id|>\n\nToday: ' + date_string }}
{% if tools is not none %}{{ '\nTools: ' + tools | tojson }}{% endif %}
{{ '<|eot_id|>' }}
{% for message in messages %}
    {{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}
{% endfor %}
{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"""

CHAT = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is 2+3?"},
        {"role": "assistant", "content": "5"}, {"role": "user", "content": "And 2+4? <tricky> & 'quotes'"}]
TEXTS = ["", "The cat sat on the mat.", "  two  spaces\nand a newline", "héllo wörld, naïve café ✓",
         "What is 2+3?<|im_end|>", "<bos>The cat<end_of_turn>", "<|begin_of_text|>hi<|eot_id|>"]


def _train_bpe(specials, post_processor=None):
    bpe = tokenizers.Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(CORPUS, trainer)
    if post_processor is not None:
        bpe.post_processor = post_processor(bpe)
    return bpe


def _bos_template(bos):
    return lambda t: processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                   special_tokens=[(bos, t.token_to_id(bos))])


def _write(folder, bpe, config, generation_config=None, extra=None):
    folder.mkdir(parents=True)
    bpe.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    if generation_config is not None:
        (folder / "generation_config.json").write_text(json.dumps(generation_config))
    for name, text in (extra or {}).items():
        (folder / name).write_text(text)
    return folder


@pytest.fixture(scope="module")
def hf_dirs(tmp_path_factory):
    """Three tiny checkpoints laid out like Qwen 3, Gemma 3 and Llama 3 tokenizer directories."""
    root = tmp_path_factory.mktemp("hf")
    qwen = _train_bpe(["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                      lambda t: processors.ByteLevel(trim_offsets=False))
    gemma = _train_bpe(["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"], _bos_template("<bos>"))
    llama_specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    llama = _train_bpe(llama_specials, lambda t: processors.Sequence(
        [processors.ByteLevel(trim_offsets=False), _bos_template("<|begin_of_text|>")(t)]))
    return {
        # Qwen 3: no BOS, eos = end of turn, generation config lists both stops
        "qwen": _write(root / "qwen", qwen, {
            "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "add_bos_token": False,
            "chat_template": QWEN_TEMPLATE}, {"eos_token_id": [qwen.token_to_id("<|im_end|>"),
                                                               qwen.token_to_id("<|endoftext|>")]}),
        # Gemma 3: BOS from the post-processor; config flags that disagree with it (transformers 5 drops them);
        # tokens as serialised AddedToken dicts
        "gemma": _write(root / "gemma", gemma, {
            "bos_token": {"__type": "AddedToken", "content": "<bos>", "lstrip": False, "normalized": False, "rstrip": False,
                          "single_word": False, "special": True},
            "eos_token": {"__type": "AddedToken", "content": "<eos>", "lstrip": False, "normalized": False, "rstrip": False,
                          "single_word": False, "special": True},
            "pad_token": "<pad>", "unk_token": "<unk>", "add_bos_token": False, "add_eos_token": True,
            "chat_template": GEMMA_TEMPLATE}, {"eos_token_id": 1}),
        # Llama 3: no pad token, several named templates, eos list in generation_config.json
        "llama": _write(root / "llama", llama, {
            "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
            "chat_template": [{"name": "default", "template": LLAMA_TEMPLATE},
                              {"name": "tool_use", "template": "{{ 'tools!' }}"}]},
            {"eos_token_id": [llama.token_to_id("<|end_of_text|>"), llama.token_to_id("<|eot_id|>")]}),
    }


FAMILIES = ["qwen", "gemma", "llama"]


@pytest.fixture(scope="module")
def pairs(hf_dirs):
    """(ours, transformers') for each family, loaded from the same directory."""
    return {name: (tk.load_tokenizer(d), transformers.AutoTokenizer.from_pretrained(str(d)))
            for name, d in hf_dirs.items()}


# ---- HF tokenizer.json against transformers ----

@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("add_special_tokens", [True, False])
def test_hf_encode_matches_transformers(pairs, family, add_special_tokens):
    ours, ref = pairs[family]
    for text in TEXTS:
        assert ours.encode(text, add_special_tokens=add_special_tokens) == \
            ref.encode(text, add_special_tokens=add_special_tokens), text


@pytest.mark.parametrize("family", FAMILIES)
def test_hf_bos_follows_post_processor_not_config_flags(pairs, family):
    """Gemma's config says add_bos_token=False, add_eos_token=True; transformers 5 ignores both, and so do we."""
    ours, ref = pairs[family]
    ids = ours.encode("The cat")
    assert ids == ref.encode("The cat")
    assert (ids[0] == ours.bos_id) == (family != "qwen")
    assert ids[-1] != ours.eos_id


@pytest.mark.parametrize("family", FAMILIES)
def test_hf_encode_batch_matches_transformers(pairs, family):
    ours, ref = pairs[family]
    assert ours.encode_batch(TEXTS) == ref(TEXTS)["input_ids"]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("skip_special_tokens", [True, False])
def test_hf_decode_matches_transformers(pairs, family, skip_special_tokens):
    ours, ref = pairs[family]
    rng = np.random.default_rng(0)
    sequences = [ours.encode(t) for t in TEXTS] + [rng.integers(0, ours.vocab_size, 12).tolist() for _ in range(5)]
    for ids in sequences:
        assert ours.decode(ids, skip_special_tokens=skip_special_tokens) == \
            ref.decode(ids, skip_special_tokens=skip_special_tokens), ids


@pytest.mark.parametrize("family", FAMILIES)
def test_hf_special_ids_and_vocab_size_match_transformers(pairs, family):
    ours, ref = pairs[family]
    assert ours.bos_id == ref.bos_token_id
    assert ours.eos_id == ref.eos_token_id
    assert ours.pad_id == (ref.pad_token_id if ref.pad_token_id is not None else ref.eos_token_id)
    assert ours.vocab_size == len(ref)


def test_hf_missing_pad_falls_back_to_eos_without_touching_the_backend(hf_dirs):
    before = tokenizers.Tokenizer.from_file(str(hf_dirs["llama"] / "tokenizer.json"))
    ours = tk.Tokenizer.wrap(before, config={"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"})
    assert ours.pad_id == ours.eos_id == before.token_to_id("<|eot_id|>")
    assert ours.backend is before
    assert before.padding is None
    assert before.to_str() == tokenizers.Tokenizer.from_file(str(hf_dirs["llama"] / "tokenizer.json")).to_str()


@pytest.mark.parametrize("family,expected", [
    ("qwen", ["<|im_end|>", "<|endoftext|>"]),
    ("gemma", ["<eos>", "<end_of_turn>"]),
    ("llama", ["<|eot_id|>", "<|end_of_text|>"]),
])
def test_hf_eos_ids_are_eos_first_then_turn_ends_and_generation_config(pairs, family, expected):
    ours, ref = pairs[family]
    assert ours.eos_ids[0] == ref.eos_token_id
    assert set(ours.eos_ids) == set(ref.convert_tokens_to_ids(expected))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_hf_chat_template_text_matches_transformers(pairs, family, add_generation_prompt):
    ours, ref = pairs[family]
    chat = CHAT[1:] if family == "gemma" else CHAT
    kwargs = {"date_string": "26 Jul 2024"} if family == "llama" else {}
    assert ours.apply_chat_template(chat, add_generation_prompt=add_generation_prompt, **kwargs) == \
        ref.apply_chat_template(chat, add_generation_prompt=add_generation_prompt, tokenize=False, **kwargs)


@pytest.mark.parametrize("family", FAMILIES)
def test_hf_chat_template_tokens_match_transformers(pairs, family):
    """tokenize=True encodes without special tokens: the template wrote BOS itself."""
    ours, ref = pairs[family]
    chat = CHAT[1:] if family == "gemma" else CHAT
    ids = ours.apply_chat_template(chat, tokenize=True)
    assert ids == ref.apply_chat_template(chat, add_generation_prompt=True, return_dict=False)
    if ours.bos_id is not None:
        assert ids.count(ours.bos_id) == 1


def test_hf_template_kwargs_and_tools_reach_the_template(pairs):
    qwen, qwen_ref = pairs["qwen"]
    assert qwen.apply_chat_template(CHAT[1:2], enable_thinking=False) == qwen_ref.apply_chat_template(
        CHAT[1:2], add_generation_prompt=True, tokenize=False, enable_thinking=False)
    llama, llama_ref = pairs["llama"]
    tools = [{"type": "function", "function": {"name": "add", "description": "a <b> & c",
                                               "parameters": {"type": "object", "properties": {}}}}]
    ours = llama.apply_chat_template(CHAT[1:2], tools=tools, chat_template="default", date_string="1 Jan 2025")
    assert "a <b> & c" in ours
    assert ours == llama_ref.apply_chat_template(CHAT[1:2], tools=tools, chat_template="default",
                                                 date_string="1 Jan 2025", add_generation_prompt=True, tokenize=False)


def test_hf_template_raise_exception_surfaces(pairs):
    import jinja2
    ours, _ = pairs["gemma"]
    with pytest.raises(jinja2.TemplateError, match="system role not supported"):
        ours.apply_chat_template(CHAT)


def test_hf_chat_template_jinja_file_wins_over_config(hf_dirs, tmp_path):
    folder = tmp_path / "with_jinja"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_bytes((hf_dirs["qwen"] / name).read_bytes())
    (folder / "chat_template.jinja").write_text("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}")
    ours, ref = tk.load_tokenizer(folder), transformers.AutoTokenizer.from_pretrained(str(folder))
    assert ours.apply_chat_template(CHAT) == ref.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    assert ours.apply_chat_template(CHAT).startswith("[system] Answer briefly.\n")


def test_hf_special_tokens_map_fills_names_the_config_leaves_out(hf_dirs, tmp_path):
    folder = tmp_path / "legacy"
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes((hf_dirs["gemma"] / "tokenizer.json").read_bytes())
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": GEMMA_TEMPLATE}))
    (folder / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "<bos>", "eos_token": {"content": "<end_of_turn>"}, "pad_token": "<pad>"}))
    ours, ref = tk.load_tokenizer(folder), transformers.AutoTokenizer.from_pretrained(str(folder))
    assert (ours.bos_id, ours.eos_id, ours.pad_id) == (ref.bos_token_id, ref.eos_token_id, ref.pad_token_id)
    assert ours.apply_chat_template(CHAT[1:]) == ref.apply_chat_template(CHAT[1:], add_generation_prompt=True,
                                                                         tokenize=False)


def test_hf_without_chat_template_names_where_it_looked(hf_dirs, tmp_path):
    folder = tmp_path / "no_template"
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes((hf_dirs["gemma"] / "tokenizer.json").read_bytes())
    (folder / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<bos>", "eos_token": "<eos>"}))
    ours = tk.load_tokenizer(folder)
    with pytest.raises(ValueError, match=r"no chat template: looked in .*chat_template\.jinja.*tokenizer_config\.json"):
        ours.apply_chat_template(CHAT)
    assert ours.apply_chat_template(CHAT, chat_template=tk.DEFAULT_CHAT_TEMPLATE).endswith("assistant: ")


def test_hf_named_templates_are_picked_as_transformers_picks_them(pairs, hf_dirs):
    ours, ref = pairs["llama"]
    for kwargs in ({}, {"tools": [{"name": "f"}]}, {"chat_template": "tool_use"}, {"chat_template": "{{ 'own' }}"}):
        assert ours.apply_chat_template(CHAT, date_string="1 Jan 2025", **kwargs) == ref.apply_chat_template(
            CHAT, date_string="1 Jan 2025", add_generation_prompt=True, tokenize=False, **kwargs), kwargs
    bpe = tokenizers.Tokenizer.from_file(str(hf_dirs["qwen"] / "tokenizer.json"))
    config = {"eos_token": "<|im_end|>", "chat_template": [{"name": "tool_use", "template": "x"}]}
    with pytest.raises(ValueError, match=r"\['tool_use'\] have no 'default'"):
        tk.Tokenizer.wrap(bpe, config=config).apply_chat_template(CHAT)


def test_hf_errors_name_missing_eos_and_unknown_tokens(hf_dirs):
    bpe = tokenizers.Tokenizer.from_file(str(hf_dirs["qwen"] / "tokenizer.json"))
    with pytest.raises(ValueError, match="no eos token"):
        tk.Tokenizer.wrap(bpe, config={})
    with pytest.raises(ValueError, match=r"eos_token '<nope>' .* not in the vocabulary"):
        tk.Tokenizer.wrap(bpe, config={"eos_token": "<nope>"})
    # the first generation_config eos id stands in for a missing eos_token
    stops = [bpe.token_to_id("<|endoftext|>"), bpe.token_to_id("<|im_end|>")]
    wrapped = tk.Tokenizer.wrap(bpe, config={}, generation_config={"eos_token_id": stops})
    assert (wrapped.eos_id, wrapped.eos_ids) == (stops[0], tuple(stops))


# ---- chat template environment against transformers' renderer ----

ENV_TEMPLATE = """{% set ns = namespace(n=0) %}
{% for m in messages %}
    {% if m.role == 'user' %}{% set ns.n = ns.n + 1 %}{% endif %}
    {% if loop.index > 3 %}{% break %}{% endif %}
    {% if m.role == 'assistant' %}{% generation %}A: {{ m.content }}{% endgeneration %}{% else %}{{ m | tojson }}{% endif %}

{% endfor %}
users={{ ns.n }} extra={{ extra | default('none') }} bos={{ bos_token | default('?') }}
{% if tools %}{{ tools | tojson(indent=2) }}{% endif %}"""


@pytest.mark.parametrize("variables", [{}, {"extra": "x", "bos_token": "<s>"},
                                       {"tools": [{"name": "f", "description": "<html> & 'q'"}]}])
def test_render_chat_template_matches_transformers_renderer(variables):
    ours = tk.render_chat_template(ENV_TEMPLATE, CHAT, add_generation_prompt=False, **variables)
    ref = render_jinja_template([CHAT], chat_template=ENV_TEMPLATE, add_generation_prompt=False, **variables)[0][0]
    assert ours == ref


def test_render_chat_template_drops_none_fields_and_refuses_empty_chat():
    source = "{% for m in messages %}{{ 'tool_calls' in m }}{% endfor %}"
    assert tk.render_chat_template(source, [{"role": "assistant", "content": "hi", "tool_calls": None}]) == "False"
    with pytest.raises(ValueError, match="empty conversation"):
        tk.render_chat_template(source, [])


def test_render_chat_template_is_sandboxed():
    import jinja2
    with pytest.raises(jinja2.exceptions.SecurityError):
        tk.render_chat_template("{{ messages.append(1) }}", CHAT)


# ---- SentencePiece against the sentencepiece processor ----

@pytest.fixture(scope="module")
def sp_models(tmp_path_factory):
    """Three SentencePiece models: defaults (pad -1), one with a pad id, one without BOS."""
    root = tmp_path_factory.mktemp("sp")
    settings = {"default": {}, "with_pad": {"pad_id": 3}, "no_bos": {"bos_id": -1}}
    out = {}
    for name, extra in settings.items():
        (root / name).mkdir()
        spm.SentencePieceTrainer.train(sentence_iterator=iter(CORPUS), model_prefix=str(root / name / "tokenizer"),
                                       vocab_size=48, user_defined_symbols=["<end_of_turn>"], minloglevel=2, **extra)
        out[name] = root / name / "tokenizer.model"
    return out


@pytest.mark.parametrize("name", ["default", "with_pad", "no_bos"])
def test_sentencepiece_encode_decode_match_the_processor(sp_models, name):
    sp = spm.SentencePieceProcessor(model_file=str(sp_models[name]))
    ours = tk.load_tokenizer(sp_models[name])
    for text in ["The cat sat on the mat.", "What is 2+3?<end_of_turn>", "héllo zzz", ""]:
        plain = sp.encode(text)
        assert ours.encode(text, add_special_tokens=False) == plain
        assert ours.encode(text) == ([sp.bos_id()] if sp.bos_id() >= 0 else []) + plain
        assert ours.decode(ours.encode(text)) == sp.decode(plain)
    assert ours.vocab_size == sp.get_piece_size()


def test_sentencepiece_decode_keeps_control_pieces_when_asked(sp_models):
    sp = spm.SentencePieceProcessor(model_file=str(sp_models["default"]))
    ours = tk.load_tokenizer(sp_models["default"])
    body = sp.encode("The cat")
    ids = [sp.bos_id(), *body, sp.eos_id()]
    assert ours.decode(ids, skip_special_tokens=False) == "<s>" + sp.decode(body) + "</s>"
    assert ours.decode(ids) == sp.decode(ids) == sp.decode(body)


def test_sentencepiece_special_ids_come_from_the_model(sp_models):
    default = tk.load_tokenizer(sp_models["default"])
    sp = default.backend
    assert sp.pad_id() == -1 and default.pad_id == sp.eos_id()  # pad -1 falls back to eos
    assert (default.bos_id, default.eos_id) == (sp.bos_id(), sp.eos_id())
    assert default.eos_ids == (sp.eos_id(), sp.piece_to_id("<end_of_turn>"))
    assert tk.load_tokenizer(sp_models["with_pad"]).pad_id == 3
    assert tk.load_tokenizer(sp_models["no_bos"]).bos_id is None


def test_sentencepiece_default_chat_format_keeps_every_role(sp_models):
    """Upstream renders Gemma turns and drops the system message; the default format keeps it."""
    ours = tk.load_tokenizer(sp_models["default"])
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+3?"}]
    assert ours.apply_chat_template(chat) == "system: Be brief.\nuser: 2+3?\nassistant: "
    assert ours.apply_chat_template(chat, add_generation_prompt=False) == "system: Be brief.\nuser: 2+3?\n"


# ---- character tokenizer ----

def test_char_id_layout_is_specials_then_alphabet():
    tok = tk.CharTokenizer("ab=")
    assert tok.tokens == ("<pad>", "<bos>", "<eos>", "a", "b", "=")
    assert tok.encode("ba=a") == [4, 3, 5, 3]
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.vocab_size) == (0, 1, 2, 6)


def test_char_round_trip_and_special_tokens():
    tok = tk.load_tokenizer(tk.CharTokenizer("0123456789+-*= \n"))
    text = "12+7=19\n3*3=9"
    ids = tok.encode(text)
    assert ids[0] == 1 and len(ids) == len(text) + 1
    assert tok.encode(text, add_special_tokens=False) == ids[1:]
    assert tok.decode(ids + [2, 0, 0]) == text
    assert tok.decode([1, 4, 2, 0], skip_special_tokens=False) == "<bos>1<eos><pad>"
    assert (tok.bos_id, tok.eos_id, tok.pad_id, tok.eos_ids) == (1, 2, 0, (2,))


def test_char_unknown_character_names_it_and_its_position():
    tok = tk.CharTokenizer("0123456789+=")
    with pytest.raises(ValueError, match=r"character '/' at position 2 .* not in the alphabet"):
        tok.encode("12/3")


@pytest.mark.parametrize("alphabet,message", [("", "non-empty"), ("abca", r"repeats \['a'\]")])
def test_char_rejects_bad_alphabets(alphabet, message):
    with pytest.raises(ValueError, match=message):
        tk.CharTokenizer(alphabet)


def test_char_save_and_load_round_trip(tmp_path):
    tok = tk.CharTokenizer("xyz \n\"é", chat_template="{{ messages[-1]['content'] }}")
    path = tok.save(tmp_path / "ckpt")
    assert path == tmp_path / "ckpt" / "char_tokenizer.json"
    back = tk.CharTokenizer.load(tmp_path / "ckpt")
    assert (back.tokens, back.chat_template) == (tok.tokens, tok.chat_template)
    loaded = tk.load_tokenizer(tmp_path / "ckpt")
    assert loaded.apply_chat_template([{"role": "user", "content": "xy"}]) == "xy"
    assert tk.load_tokenizer(path).encode("zy", add_special_tokens=False) == [5, 4]


def test_char_default_chat_template():
    tok = tk.load_tokenizer(tk.CharTokenizer("abc"))
    assert tok.apply_chat_template([{"role": "user", "content": "ab"}]) == "user: ab\nassistant: "


# ---- the shared surface ----

def test_decode_accepts_lists_numpy_and_jax_arrays():
    tok = tk.load_tokenizer(tk.CharTokenizer("abc"))
    ids = [1, 3, 4, 5, 2]
    for form in (ids, np.array(ids, np.int32), jnp.array(ids, jnp.int32), np.array([], np.int64)):
        assert tok.decode(form) == ("abc" if len(form) else "")


def test_decode_rejects_bad_ids():
    tok = tk.load_tokenizer(tk.CharTokenizer("abc"))
    with pytest.raises(ValueError, match=r"shape \[T\]; got shape \(2, 2\)"):
        tok.decode(np.ones((2, 2), np.int32))
    with pytest.raises(ValueError, match=r"id 6 at position 1 is outside the vocabulary \[0, 6\)"):
        tok.decode([3, 6])
    with pytest.raises(TypeError, match="integers"):
        tok.decode(np.array([1.0, 2.0]))


def test_encode_rejects_non_strings():
    tok = tk.load_tokenizer(tk.CharTokenizer("abc"))
    with pytest.raises(TypeError, match="encode takes a str"):
        tok.encode(["abc"])


# ---- load_tokenizer ----

def test_load_prefers_tokenizer_json_then_model_then_char(hf_dirs, sp_models, tmp_path):
    folder = tmp_path / "all"
    folder.mkdir()
    tk.CharTokenizer("abc").save(folder)
    assert isinstance(tk.load_tokenizer(folder), tk.CharAdapter)
    (folder / "tokenizer.model").write_bytes(sp_models["default"].read_bytes())
    assert isinstance(tk.load_tokenizer(folder), tk.SentencePieceAdapter)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_bytes((hf_dirs["qwen"] / name).read_bytes())
    assert isinstance(tk.load_tokenizer(folder), tk.HFAdapter)
    # a direct file path picks that file whatever else the folder holds
    assert isinstance(tk.load_tokenizer(folder / "char_tokenizer.json"), tk.CharAdapter)
    assert isinstance(tk.load_tokenizer(folder / "tokenizer.model"), tk.SentencePieceAdapter)


def test_load_accepts_any_dot_model_file(sp_models, tmp_path):
    renamed = tmp_path / "tokenizer_gemma3.model"
    renamed.write_bytes(sp_models["default"].read_bytes())
    assert isinstance(tk.load_tokenizer(str(renamed)), tk.SentencePieceAdapter)


def test_load_errors_list_the_names_looked_for(tmp_path):
    names = "tokenizer.json, tokenizer.model, char_tokenizer.json"
    with pytest.raises(FileNotFoundError, match=f"no tokenizer in .*: looked for {names}"):
        tk.load_tokenizer(tmp_path)
    with pytest.raises(FileNotFoundError, match=f"does not exist; give a directory holding one of {names}"):
        tk.load_tokenizer(tmp_path / "missing")
    (tmp_path / "vocab.txt").write_text("a\nb\n")
    with pytest.raises(ValueError, match="vocab.txt is not a tokenizer file"):
        tk.load_tokenizer(tmp_path / "vocab.txt")


def test_wrap_accepts_built_objects_and_refuses_others(hf_dirs, sp_models):
    sp = spm.SentencePieceProcessor(model_file=str(sp_models["default"]))
    assert isinstance(tk.load_tokenizer(sp), tk.SentencePieceAdapter)
    bpe = tokenizers.Tokenizer.from_file(str(hf_dirs["qwen"] / "tokenizer.json"))
    assert isinstance(tk.Tokenizer.wrap(bpe, config={"eos_token": "<|im_end|>"}), tk.HFAdapter)
    wrapped = tk.load_tokenizer(tk.CharTokenizer("ab"))
    assert tk.Tokenizer.wrap(wrapped) is wrapped
    with pytest.raises(TypeError, match=r"cannot wrap a dict; expected one of: .*CharTokenizer.*Tokenizer.*Processor"):
        tk.Tokenizer.wrap({"vocab": 1})
