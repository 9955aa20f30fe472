"""Extract, from the real engine packages' source, every name the rollout adapters rely on.

The adapters in tunix_lit/rollout/external.py (and the test fakes under tests/rollout/fakes/) touch
keywords, attribute paths, methods and weight-state paths of vLLM (with its TPU backend tpu-inference)
and SGLang-JAX. This script reads those packages' source with `ast` (nothing is imported or run)
and writes the facts to tests/rollout/engine_contract.json, which tests/rollout/test_engine_contract.py
checks the adapters and the fakes against, offline.

Refresh (downloads go to a scratch folder outside the repository):

    pip download --no-deps tpu-inference==0.32.0 -d /tmp/pkgs
    pip download --no-deps vllm-tpu==0.32.0 -d /tmp/pkgs -v   # an sdist; if pip stops at its build step,
                                                           # fetch the .tar.gz URL pip printed
    git clone https://github.com/sgl-project/sglang-jax /tmp/pkgs/sglang-jax && git -C /tmp/pkgs/sglang-jax \
        checkout cddbf6f1cc33cbdd453bd8f36ff7051cf46ca176
    python tools/engine_contract.py --vllm /tmp/pkgs/vllm_tpu-0.32.0.tar.gz \
        --tpu-inference /tmp/pkgs/tpu_inference-0.32.0-py3-none-any.whl \
        --sglang-jax /tmp/pkgs/sglang-jax/python --sglang-jax-version cddbf6f1cc33cbdd453bd8f36ff7051cf46ca176
"""
import argparse
import ast
import json
import tarfile
import zipfile
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "rollout" / "engine_contract.json"


class Source:
    """Python files of one package, read from a wheel, an sdist or a directory, by path suffix."""

    def __init__(self, location: str):
        p = Path(location)
        if p.is_dir():
            self.files = {str(f.relative_to(p)): f.read_text() for f in p.rglob("*.py")}
        elif p.suffix in (".whl", ".zip"):
            with zipfile.ZipFile(p) as z:
                self.files = {n: z.read(n).decode() for n in z.namelist() if n.endswith(".py")}
        else:
            with tarfile.open(p) as t:
                self.files = {m.name: t.extractfile(m).read().decode() for m in t.getmembers()
                              if m.isfile() and m.name.endswith(".py")}
        self._trees = {}

    def tree(self, suffix: str) -> ast.Module:
        """The parsed file whose path ends with `suffix` (exactly one)."""
        hits = [n for n in self.files if n.endswith(suffix)]
        if len(hits) != 1:
            raise SystemExit(f"expected one file ending {suffix!r}, found {hits}")
        if hits[0] not in self._trees:
            self._trees[hits[0]] = ast.parse(self.files[hits[0]])
        return self._trees[hits[0]]

    def cls(self, suffix: str, name: str) -> ast.ClassDef:
        for node in ast.walk(self.tree(suffix)):
            if isinstance(node, ast.ClassDef) and node.name == name:
                return node
        raise SystemExit(f"class {name} not found in {suffix}")


def method(cls: ast.ClassDef, name: str):
    return next((n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name),
                None)


def params(fn) -> list:
    """Named parameters of a function, self left out."""
    a = fn.args
    return [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg != "self"]


def fields(cls: ast.ClassDef) -> list:
    """Annotated class-level fields (a dataclass or msgspec Struct)."""
    return [n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]


def self_attrs(cls: ast.ClassDef) -> list:
    """Attributes any method assigns on self (tuple targets included)."""
    out = set()
    for node in ast.walk(cls):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign)) else []
        for t in targets:
            for e in (t.elts if isinstance(t, ast.Tuple) else [t]):
                if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
                    out.add(e.attr)
    return sorted(out)


def methods(cls: ast.ClassDef) -> list:
    return sorted(n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))


# ---- weight-state paths: which nnx.Param leaves a model class creates, by walking its constructors ----
FLAX_LEAVES = {"Einsum": ["kernel"], "Linear": ["kernel"], "Embed": ["embedding"], "RMSNorm": ["scale"],
               "LayerNorm": ["scale"]}  # flax.nnx layers and the Param attributes they create (no biases here)


def _ctor_name(call) -> str:
    f = call.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


_UNKNOWN = object()


def _const(expr, defaults: dict):
    """A keyword's value when knowable: a constant, a caller's parameter default, or getattr(cfg, name, default)."""
    if isinstance(expr, ast.Constant):
        return expr.value
    if isinstance(expr, ast.Name) and expr.id in defaults:
        return defaults[expr.id]
    if (isinstance(expr, ast.Call) and _ctor_name(expr) == "getattr" and len(expr.args) == 3
            and isinstance(expr.args[2], ast.Constant)):
        return expr.args[2].value  # a config attribute these models' configs leave unset
    return _UNKNOWN


def _defaults(fn) -> dict:
    """Parameter name -> constant default of a function (what an `if flag:` sees when the caller leaves it)."""
    a = fn.args
    pos = a.posonlyargs + a.args
    out = {x.arg: d.value for x, d in zip(pos[len(pos) - len(a.defaults):], a.defaults) if isinstance(d, ast.Constant)}
    out |= {x.arg: d.value for x, d in zip(a.kwonlyargs, a.kw_defaults) if isinstance(d, ast.Constant)}
    return out


def _truth(test, tied: bool, defaults: dict) -> bool:
    """A constructor's `if` on a single host: tie_word_embeddings is `tied`, pipeline-rank checks hold, a flag
    parameter takes its default, other optional features (quantisation, LoRA, drafts) are off."""
    if isinstance(test, ast.BoolOp):
        vals = [_truth(v, tied, defaults) for v in test.values]
        return all(vals) if isinstance(test.op, ast.And) else any(vals)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return not _truth(test.operand, tied, defaults)
    if isinstance(test, ast.Name) and test.id in defaults:
        return bool(defaults[test.id])
    text = ast.unparse(test)
    if "tie_word_embeddings" in text:
        return tied
    if "first_rank" in text or "last_rank" in text:
        return True
    if isinstance(test, ast.Compare):  # e.g. `x is None`, `quant_config is not None`: the plain path
        return "is not None" not in text and "!=" not in text
    return False  # use_bias, quantisation, LoRA, drafts: off


class StateWalker:
    """nnx state path templates ('{i}' for a layer index) of a model class, for tied or untied embeddings."""

    def __init__(self, src: Source, classes: dict):
        self.src, self.classes = src, classes  # class name -> file suffix where it is defined

    def leaves_of(self, name: str, tied: bool, given: dict = None) -> list:
        """Leaf paths (tuples) under one instance of class `name`."""
        if name in FLAX_LEAVES and name not in self.classes:
            return [(leaf,) for leaf in FLAX_LEAVES[name]]
        cls = self.src.cls(self.classes[name], name)
        base = next((b.attr if isinstance(b, ast.Attribute) else b.id for b in cls.bases
                     if (b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "")) in
                     set(FLAX_LEAVES) | set(self.classes)), None)
        kids: dict = {}  # attribute -> its leaf paths
        alias: dict = {}  # attribute -> the attribute it aliases (one Variable, two names)
        if base is not None:
            for path in self.leaves_of(base, tied):
                kids.setdefault(path[0], []).append(path)
        init = method(cls, "__init__")
        outer = getattr(self, "_defaults", {})
        self._defaults = (_defaults(init) if init else {}) | (given or {})  # the caller's constant keywords win
        self._walk(init.body if init else [], kids, alias, tied)
        self._defaults = outer
        for attr, target in alias.items():  # nnx flattens attributes sorted: the first name is kept
            if attr in kids and target in kids:
                kids.pop(max(attr, target))
        return [p for attr in sorted(kids) for p in kids[attr]]

    def _walk(self, body, kids: dict, alias: dict, tied: bool):
        for node in body:
            if isinstance(node, ast.If):
                self._walk(node.body if _truth(node.test, tied, self._defaults) else node.orelse, kids, alias, tied)
                continue
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and _ctor_name(node.value) == "delattr":
                gone = node.value.args[1].value
                kids.pop(gone, None)
                for a in [a for a, t in alias.items() if t == gone]:  # the alias now stands alone
                    del alias[a]
                continue
            if not isinstance(node, ast.Assign):
                continue
            for target in node.targets:
                elts = target.elts if isinstance(target, ast.Tuple) else [target]
                values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value] * len(elts)
                for t, v in zip(elts, values):
                    if not (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"):
                        continue
                    self._assign(t.attr, v, kids, alias, tied)

    def _assign(self, attr: str, value, kids: dict, alias: dict, tied: bool):
        if isinstance(value, ast.Attribute) and isinstance(value.value, ast.Name) and value.value.id == "self":
            if value.attr in kids:  # `self.weight = self.kernel`: one Variable under two names
                kids[attr] = [(attr,) + p[1:] for p in kids[value.attr]]
                alias[attr] = value.attr
            return
        if isinstance(value, ast.Attribute):  # `self.lm_head = self.embed.embedding`: shared with an earlier path
            return
        if not isinstance(value, ast.Call):
            return
        name = _ctor_name(value)
        if name == "Param":
            kids[attr] = [(attr,)]
        elif name == "make_layers":  # (start, end, layers) = make_layers(n, lambda i: Layer(...))
            lam = next(a for a in value.args if isinstance(a, ast.Lambda))
            kids["layers"] = [("layers", "{i}") + p for p in self.leaves_of(_ctor_name(lam.body), tied)]
        elif name in ("List", "ModuleList", "data") and value.args and isinstance(value.args[0], ast.ListComp):
            kids[attr] = [(attr, "{i}") + p for p in self.leaves_of(_ctor_name(value.args[0].elt), tied)]
        elif name in self.classes or name in FLAX_LEAVES:
            given = {k.arg: c for k in value.keywords if k.arg
                     for c in [_const(k.value, self._defaults)] if c is not _UNKNOWN}
            kids[attr] = [(attr,) + p for p in self.leaves_of(name, tied, given)]

    def templates(self, name: str, tied: bool) -> list:
        return sorted(".".join(p) for p in self.leaves_of(name, tied))


def classes_in(src: Source, suffixes: list) -> dict:
    """Class name -> file suffix, for every class defined in the given files."""
    out = {}
    for s in suffixes:
        for node in ast.walk(src.tree(s)):
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, s)
    return out


def vllm_facts(vllm: Source, ti: Source, version: str) -> dict:
    llm = vllm.cls("vllm/entrypoints/llm.py", "LLM")
    engine_args = vllm.cls("vllm/engine/arg_utils.py", "EngineArgs")
    env_tree = vllm.tree("vllm/envs.py")
    env_names = sorted({n.value for n in ast.walk(env_tree) if isinstance(n, ast.Constant)
                        and isinstance(n.value, str) and n.value.startswith("VLLM_")})
    runner = ti.cls("tpu_inference/runner/tpu_runner.py", "TPUModelRunner")
    worker = ti.cls("tpu_inference/worker/tpu_worker.py", "TPUWorker")
    layer_files = ["tpu_inference/layers/jax/linear.py", "tpu_inference/layers/jax/embed.py",
                   "tpu_inference/layers/jax/norm.py"]
    states = {}
    for family, suffix, cls in [("qwen3", "tpu_inference/models/jax/qwen3.py", "Qwen3ForCausalLM"),
                                ("llama3", "tpu_inference/models/jax/llama3.py", "LlamaForCausalLM")]:
        files = layer_files + [suffix, "tpu_inference/models/jax/qwen2.py"]
        walker = StateWalker(ti, classes_in(ti, files))
        states[family] = {"class": cls, "tied": walker.templates(cls, True), "untied": walker.templates(cls, False)}
    registry = vllm_registry(ti)
    return {
        "version": version,
        "LLM.kwargs": sorted(set(params(method(llm, "__init__"))) | set(fields(engine_args))),
        "LLM.attrs": self_attrs(llm),
        "LLM.methods": {m: params(method(llm, m)) for m in ("generate", "reset_prefix_cache", "collective_rpc")},
        "LLMEngine.attrs": self_attrs(vllm.cls("vllm/v1/engine/llm_engine.py", "LLMEngine")),
        "UniProcExecutor.attrs": self_attrs(vllm.cls("vllm/v1/executor/uniproc_executor.py", "UniProcExecutor")),
        "envs": [e for e in env_names if e == "VLLM_ENABLE_V1_MULTIPROCESSING"],
        "SamplingParams.fields": fields(vllm.cls("vllm/sampling_params.py", "SamplingParams")),
        "CompletionOutput.fields": fields(vllm.cls("vllm/outputs.py", "CompletionOutput")),
        "RequestOutput.init": params(method(vllm.cls("vllm/outputs.py", "RequestOutput"), "__init__")),
        "Logprob.fields": fields(vllm.cls("vllm/logprobs.py", "Logprob")),
        "ModelConfig.methods": methods(vllm.cls("vllm/config/model.py", "ModelConfig")),
        "TPUWorker.attrs": self_attrs(worker),
        "TPUWorker.methods": methods(worker),
        "TPUModelRunner.attrs": self_attrs(runner),
        "TPUModelRunner.methods": methods(runner),
        "jax_model_registry": registry,
        "state": states,
    }


def vllm_registry(ti: Source) -> list:
    """Architectures tpu-inference runs as JAX (flax_nnx) models."""
    tree = ti.tree("tpu_inference/models/common/model_loader.py")
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):
            t = node.targets[0]
            if isinstance(t.value, ast.Name) and t.value.id == "_MODEL_REGISTRY" and isinstance(t.slice, ast.Constant):
                out.add(t.slice.value)
    return sorted(out)


def sglang_facts(sg: Source, version: str) -> dict:
    engine = sg.cls("sgl_jax/srt/entrypoints/engine.py", "Engine")
    layer_files = ["sgl_jax/srt/layers/linear.py", "sgl_jax/srt/layers/embeddings.py",
                   "sgl_jax/srt/layers/layernorm.py"]
    states = {}
    for family, suffix, cls in [("qwen3", "sgl_jax/srt/models/qwen3.py", "Qwen3ForCausalLM"),
                                ("llama3", "sgl_jax/srt/models/llama.py", "LlamaForCausalLM")]:
        walker = StateWalker(sg, classes_in(sg, layer_files + [suffix]))
        states[family] = {"class": cls, "tied": walker.templates(cls, True), "untied": walker.templates(cls, False)}
    scheduler_src = sg.files[next(n for n in sg.files if n.endswith("sgl_jax/srt/managers/scheduler.py"))]
    return {
        "version": version,
        "ServerArgs.fields": fields(sg.cls("sgl_jax/srt/server_args.py", "ServerArgs")),
        "Engine.attrs": self_attrs(engine),
        "Engine.methods": {m: params(method(engine, m)) for m in ("async_generate", "flush_cache", "shutdown")},
        "Scheduler.attrs": self_attrs(sg.cls("sgl_jax/srt/managers/scheduler.py", "Scheduler")),
        "scheduler_info.keys": sorted(k for k in ("scheduler", "max_total_num_tokens", "max_req_input_len")
                                      if f'"{k}":' in scheduler_src),
        "ModelWorker.attrs": self_attrs(sg.cls("sgl_jax/srt/managers/tp_worker.py", "ModelWorker")),
        "ModelRunner.attrs": self_attrs(sg.cls("sgl_jax/srt/model_executor/model_runner.py", "ModelRunner")),
        "ModelConfig.attrs": self_attrs(sg.cls("sgl_jax/srt/configs/model_config.py", "ModelConfig")),
        "ModelConfig.methods": methods(sg.cls("sgl_jax/srt/configs/model_config.py", "ModelConfig")),
        "SamplingParams.init": params(method(sg.cls("sgl_jax/srt/sampling/sampling_params.py", "SamplingParams"),
                                             "__init__")),
        "state": states,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm", required=True, help="vllm-tpu sdist (.tar.gz) or source directory")
    ap.add_argument("--tpu-inference", required=True, help="tpu-inference wheel or source directory")
    ap.add_argument("--sglang-jax", required=True, help="sglang-jax wheel or its python/ source directory")
    ap.add_argument("--vllm-version", default="vllm-tpu 0.32.0 + tpu-inference 0.32.0")
    ap.add_argument("--sglang-jax-version", required=True)
    ap.add_argument("--out", default=str(OUT))
    a = ap.parse_args(argv)
    facts = {"vllm": vllm_facts(Source(a.vllm), Source(a.tpu_inference), a.vllm_version),
             "sglang_jax": sglang_facts(Source(a.sglang_jax), a.sglang_jax_version)}
    Path(a.out).write_text(json.dumps(facts, indent=1, sort_keys=True) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
