"""The adapters and the fakes against the real engine packages' source, offline.

tests/rollout/engine_contract.json holds what tools/engine_contract.py read (with `ast`) from vllm-tpu 0.32.0,
tpu-inference 0.32.0 and sglang-jax at a pinned commit: constructor keywords, attributes each class sets,
methods, sampling fields and the weight-state paths of each model class. Every name the adapters use, and
every name the fakes accept or hold, must appear there; a renamed attribute in the facts is caught (the
negative controls below). tests/rollout/sglang_jax_tiny_state.json holds the state that sglang-jax's real
model classes build on CPU for a tiny config (tools/sglang_jax_side_state.py); the fake's must equal it.
"""
import ast
import copy
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from tunix_lit.models import transformer as tfm
from tunix_lit.rollout import external as ext

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CONTRACT = json.loads((HERE / "engine_contract.json").read_text())
SOURCE = ast.parse((ROOT / "tunix_lit" / "rollout" / "external.py").read_text())


def call_keywords(func: str, inside: str = None) -> set:
    """Keyword names of every call to `func` (as written) in external.py, optionally inside one function."""
    scope = SOURCE if inside is None else next(n for n in ast.walk(SOURCE)
                                               if isinstance(n, ast.FunctionDef) and n.name == inside)
    out = set()
    for n in ast.walk(scope):
        if isinstance(n, ast.Call) and ast.unparse(n.func) == func:
            out |= {k.arg for k in n.keywords if k.arg}
    return out


def attribute_reads(obj: str, inside: str) -> set:
    """Attributes read on the name `obj` inside one function of external.py (e.g. done.token_ids)."""
    fn = next(n for n in ast.walk(SOURCE) if isinstance(n, ast.FunctionDef) and n.name == inside)
    return {n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute) and ast.unparse(n.value) == obj}


def expand(templates, layers: int) -> set:
    return {t.replace("{i}", str(i)) for t in templates for i in (range(layers) if "{i}" in t else [0])}


def mapping_names(engine: str, family: str, tied: bool, layers: int = 2) -> set:
    """Every engine name the adapter's mapping table writes for a tiny config of `family`."""
    cfg = tfm.ModelConfig.from_name(f"tiny-{family}", num_layers=layers, tie_embeddings=tied)
    table = ext.vllm_mapping(cfg) if engine == "vllm" else ext.sglang_jax_mapping(cfg)
    return expand({r.engine for r in table.rules}, layers)


def check_adapters(c: dict) -> list:
    """Every name the adapters rely on that the facts `c` lack (empty when the adapters follow the packages)."""
    v, s, problems = c["vllm"], c["sglang_jax"], []

    def need(ok, what):
        if not ok:
            problems.append(what)

    # vLLM: constructor keywords, the path to the runner, what the sync and generate touch
    passed = call_keywords("vllm.LLM")
    need(passed <= set(v["LLM.kwargs"]), f"vllm.LLM keywords {sorted(passed - set(v['LLM.kwargs']))}")
    hops = dict(zip(ext.VllmEngine.RUNNER_PATH, ["LLM.attrs", "LLMEngine.attrs", "UniProcExecutor.attrs",
                                                 "TPUWorker.attrs"]))
    for attr, where in hops.items():
        need(attr in v[where], f"vllm runner path: {where} has no {attr!r}")
    need("VLLM_ENABLE_V1_MULTIPROCESSING" in v["envs"], "vllm env VLLM_ENABLE_V1_MULTIPROCESSING")
    for attr in ("state", "state_leaves", "mesh", "model_config"):
        need(attr in v["TPUModelRunner.attrs"], f"TPUModelRunner.{attr}")
    need("refresh_state_leaves" in v["TPUModelRunner.methods"], "TPUModelRunner.refresh_state_leaves()")
    for rpc in ("delete_kv_cache", "reinitialize_kv_cache"):  # collective_rpc calls these on the worker
        need(rpc in v["TPUWorker.methods"], f"TPUWorker.{rpc}()")
    for m in ("reset_prefix_cache", "collective_rpc", "generate"):
        need(m in v["LLM.methods"], f"LLM.{m}()")
    gen = call_keywords("self.handle.generate", "_vllm_generate")
    need(gen <= set(v["LLM.methods"].get("generate", [])), f"LLM.generate keywords {sorted(gen)}")
    sp = call_keywords("self._sampling_params", "_vllm_generate")
    need(sp <= set(v["SamplingParams.fields"]), f"SamplingParams fields {sorted(sp - set(v['SamplingParams.fields']))}")
    read = attribute_reads("done", "_vllm_generate")
    need(read <= set(v["CompletionOutput.fields"]), f"CompletionOutput fields {sorted(read)}")
    need("outputs" in v["RequestOutput.init"], "RequestOutput.outputs")
    need("logprob" in v["Logprob.fields"], "Logprob.logprob")
    for m in ("get_head_size", "get_total_num_kv_heads"):
        need(m in v["ModelConfig.methods"], f"vllm ModelConfig.{m}()")

    # SGLang-JAX
    passed = call_keywords("engine_module.Engine") | {"device_indexes"}  # placement adds device_indexes
    need(passed <= set(s["ServerArgs.fields"]), f"ServerArgs fields {sorted(passed - set(s['ServerArgs.fields']))}")
    path = ext.SglangJaxEngine.RUNNER_PATH
    need(path[0] in s["Engine.attrs"], f"Engine has no {path[0]!r}")
    need(path[1][0] in s["scheduler_info.keys"], f"scheduler_info has no key {path[1][0]!r}")
    need(path[2] in s["Scheduler.attrs"], f"Scheduler has no {path[2]!r}")
    need(path[3] in s["ModelWorker.attrs"] and path[4] in s["ModelWorker.attrs"], f"ModelWorker {path[3:]}")
    for attr in ("model", "model_state_leaves", "mesh", "model_config"):
        need(attr in s["ModelRunner.attrs"], f"sglang ModelRunner.{attr}")
    need("head_dim" in s["ModelConfig.attrs"], "sglang ModelConfig.head_dim")
    need("get_total_num_kv_heads" in s["ModelConfig.methods"], "sglang ModelConfig.get_total_num_kv_heads()")
    need("flush_cache" in s["Engine.methods"], "Engine.flush_cache()")
    gen = call_keywords("self.handle.async_generate", "_sglang_generate")
    need(gen <= set(s["Engine.methods"].get("async_generate", [])), f"Engine.async_generate keywords {sorted(gen)}")
    sp = call_keywords("dict", "_sglang_generate")
    need(sp <= set(s["SamplingParams.init"]), f"sglang SamplingParams {sorted(sp - set(s['SamplingParams.init']))}")

    # weight-state paths: the mapping writes exactly the names the real model class holds
    for engine in ("vllm", "sglang_jax"):
        for family in ext.ENGINE_FAMILIES[engine]:
            for tied in (True, False):
                real = expand(c[engine]["state"][family]["tied" if tied else "untied"], 2)
                ours = mapping_names(engine, family, tied)
                need(ours == real, f"{engine} {family} tied={tied}: mapping writes {sorted(ours - real)[:3]}, "
                                   f"engine holds unwritten {sorted(real - ours)[:3]}")
    return problems


def test_the_adapters_use_only_names_the_real_packages_have():
    assert check_adapters(CONTRACT) == []


@pytest.mark.parametrize("where, old, new", [
    ("LLMEngine.attrs", "model_executor", "engine_executor"),  # a renamed attribute on the path to the runner
    ("TPUModelRunner.methods", "refresh_state_leaves", "refresh_leaves"),
    ("ServerArgs.fields", "random_seed", "seed"),
    ("scheduler_info.keys", "scheduler", "scheduler_obj"),
])
def test_a_renamed_name_in_the_packages_is_caught(where, old, new):
    """Negative controls: the same check over facts with one name renamed reports exactly that name."""
    c = copy.deepcopy(CONTRACT)
    engine = "vllm" if where in c["vllm"] else "sglang_jax"
    names = c[engine][where]
    assert old in names
    c[engine][where] = [new if n == old else n for n in names]
    problems = check_adapters(c)
    assert len(problems) == 1 and old in problems[0], problems


def test_a_renamed_state_path_is_caught():
    """A model class whose head moved (e.g. an lm_head again for tied Qwen 3) fails the state-path check."""
    c = copy.deepcopy(CONTRACT)
    c["sglang_jax"]["state"]["qwen3"]["tied"] = c["sglang_jax"]["state"]["qwen3"]["tied"] + ["lm_head.embedding"]
    c["vllm"]["state"]["llama3"]["untied"] = [n.replace("model.lm_head", "lm_head.kernel")
                                               for n in c["vllm"]["state"]["llama3"]["untied"]]
    problems = check_adapters(c)
    assert len(problems) == 2 and "lm_head.kernel" in problems[0] and "sglang_jax qwen3 tied=True" in problems[1]


# ---------------------------------------------------------------- the fakes, against the same facts

@pytest.fixture(scope="module")
def fakes():
    sys.path.insert(0, str(HERE / "fakes"))
    import _contract
    import sgl_jax.srt.entrypoints.engine as sgl
    import vllm
    from vllm.entrypoints import llm as vllm_llm
    yield vllm, vllm_llm, sgl, _contract
    sys.path.remove(str(HERE / "fakes"))


def hf_config(model_type: str, tied: bool) -> dict:
    """The tiny config tools/sglang_jax_side_state.py built sglang-jax's real classes with."""
    return dict(model_type=model_type, vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=8, tie_word_embeddings=tied)


@pytest.mark.parametrize("model_type, family", [("qwen3", "qwen3"), ("llama", "llama3")])
@pytest.mark.parametrize("tied", [True, False])
def test_the_sglang_fake_holds_the_real_classes_state(fakes, model_type, family, tied):
    """Names and shapes equal those of sglang-jax's real model class built for the same tiny config."""
    _, _, sgl, _ = fakes
    real = json.loads((HERE / "sglang_jax_tiny_state.json").read_text())[f"{family}/tied={tied}"]
    shapes, _ = sgl.state_shapes(hf_config(model_type, tied), tp=1)
    assert {k: list(v) for k, v in shapes.items()} == real


@pytest.mark.parametrize("model_type, family", [("qwen3", "qwen3"), ("llama", "llama3")])
@pytest.mark.parametrize("tied", [True, False])
def test_the_vllm_fake_holds_the_contracts_state_paths(fakes, model_type, family, tied):
    _, vllm_llm, _, _ = fakes
    shapes, _, _ = vllm_llm.state_shapes(hf_config(model_type, tied), tp=1)
    assert set(shapes) == expand(CONTRACT["vllm"]["state"][family]["tied" if tied else "untied"], 2)


def test_the_fakes_accept_only_the_real_keywords_and_fields(fakes, tmp_path):
    vllm, vllm_llm, sgl, _ = fakes
    (tmp_path / "config.json").write_text(json.dumps(hf_config("qwen3", True) | {"torch_dtype": "float32"}))
    with pytest.raises(TypeError, match="'random_seed'"):  # vLLM's keyword is seed
        vllm.LLM(model=str(tmp_path), load_format="dummy", skip_tokenizer_init=True, random_seed=0)
    with pytest.raises(TypeError, match="'seed'"):  # SGLang-JAX's is random_seed
        sgl.Engine(model_path=str(tmp_path), load_format="dummy", skip_tokenizer_init=True, seed=0)
    import dataclasses
    for cls, real in [(vllm.SamplingParams, "SamplingParams.fields"), (vllm.CompletionOutput, "CompletionOutput.fields"),
                      (vllm.Logprob, "Logprob.fields")]:
        assert {f.name for f in dataclasses.fields(cls)} <= set(CONTRACT["vllm"][real]), cls
    assert {f.name for f in dataclasses.fields(sgl.SamplingParams)} <= set(CONTRACT["sglang_jax"]["SamplingParams.init"])


def test_the_fakes_hide_the_runner_as_the_real_engines_do_by_default(fakes, tmp_path, monkeypatch):
    """Without VLLM_ENABLE_V1_MULTIPROCESSING=0 there is no model_executor; without enable_single_process, no
    scheduler in scheduler_info: the settings the adapters now pass."""
    vllm, _, sgl, _ = fakes
    (tmp_path / "config.json").write_text(json.dumps(hf_config("qwen3", True) | {"torch_dtype": "float32"}))
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    llm = vllm.LLM(model=str(tmp_path), load_format="dummy", skip_tokenizer_init=True)
    assert not hasattr(llm.llm_engine, "model_executor")
    eng = sgl.Engine(model_path=str(tmp_path), load_format="dummy", skip_tokenizer_init=True)
    assert "scheduler" not in eng.scheduler_info


def test_the_extractor_reads_a_small_package(tmp_path):
    """tools/engine_contract.py's state walker on a synthetic model: aliases, delattr, tied switch, layer lists."""
    sys.path.insert(0, str(ROOT / "tools"))
    import engine_contract as ec
    (tmp_path / "m.py").write_text('''
from flax import nnx
class Lin(nnx.Einsum):
    def __init__(self, use_bias: bool = True):
        self.weight = self.kernel
        delattr(self, "kernel")
        if use_bias:
            self.bias = nnx.Param(0)
class Head(nnx.Einsum):
    def __init__(self):
        self.weight = self.kernel
class Block(nnx.Module):
    def __init__(self):
        self.proj = Lin(use_bias=False)
        self.norm = nnx.RMSNorm(4)
class Model(nnx.Module):
    def __init__(self, config):
        self.embed = nnx.Embed(8, 4)
        self.layers = nnx.List([Block() for _ in range(2)])
        if not config.tie_word_embeddings:
            self.lm_head = Head()
''')
    src = ec.Source(str(tmp_path))
    walker = ec.StateWalker(src, ec.classes_in(src, ["m.py"]))
    assert walker.templates("Model", True) == ["embed.embedding", "layers.{i}.norm.scale", "layers.{i}.proj.weight"]
    assert walker.templates("Model", False) == ["embed.embedding", "layers.{i}.norm.scale", "layers.{i}.proj.weight",
                                                "lm_head.kernel"]  # kernel and its alias: nnx keeps the first name


@pytest.mark.skipif(not os.environ.get("TUNIX_LIT_ENGINE_PKGS"),
                    reason="set TUNIX_LIT_ENGINE_PKGS to a folder with the pinned packages to re-extract the facts")
def test_the_committed_facts_equal_a_fresh_extraction(tmp_path):
    """With the pinned packages at hand (see tools/engine_contract.py), a fresh extraction equals the committed file."""
    sys.path.insert(0, str(ROOT / "tools"))
    import engine_contract as ec
    pkgs = Path(os.environ["TUNIX_LIT_ENGINE_PKGS"])
    out = tmp_path / "facts.json"
    ec.main(["--vllm", str(pkgs / "vllm_tpu-0.32.0.tar.gz"), "--tpu-inference",
             str(pkgs / "tpu_inference-0.32.0-py3-none-any.whl"), "--sglang-jax", str(pkgs / "sglang-jax" / "python"),
             "--sglang-jax-version", CONTRACT["sglang_jax"]["version"], "--out", str(out)])
    assert json.loads(out.read_text()) == CONTRACT
