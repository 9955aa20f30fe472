"""Fake `sgl_jax.srt.entrypoints.engine.Engine`: SGLang-JAX's offline engine over a NumPy model of its own.

It mirrors SGLang-JAX's shape of things: the model runner holds an NNX module `model` whose state uses
SGLang-JAX's names (`...q_proj.weight` as one [D, heads·H] matrix, norms as `.scale`, embeddings as
`.embedding`, a separate `lm_head.embedding` [V, D] even when tied, KV heads replicated up to tp_size), and the
compiled forward reads the flat list `model_state_leaves`, stale until someone replaces it. With the radix
cache on (`disable_radix_cache=False`) prompt K/V computed under old weights are served until `flush_cache()`.
Log-probs are those of softmax(logits / temperature), top-k/top-p not renormalised (SGLang's default).
It never imports tunix_lit.
"""
import asyncio
import dataclasses
import types
from typing import Optional

import jax
import numpy as np
from flax import nnx

import _contract as ct
import _fake_decoder as fd


@dataclasses.dataclass
class SamplingParams:
    """SGLang's per-request sampling settings (the fields the adapter uses)."""

    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    stop_token_ids: Optional[list] = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    n: int = 1
    sampling_seed: Optional[int] = None

    def convert_to_dict(self) -> dict:
        return dataclasses.asdict(self)


def state_shapes(cfg: dict, tp: int) -> tuple[dict, int]:
    """Engine name -> shape, KV heads replicated to tp_size when tp_size exceeds them; names from the contract
    (the real model classes' paths; no `lm_head` for tied embeddings)."""
    d = fd.dims(cfg)
    Kx = d["K"] if tp <= d["K"] else tp
    if Kx % d["K"]:
        raise ValueError(f"tp_size={tp} is not a multiple of {d['K']} KV heads")
    D, F, V, NH, KH = d["D"], d["F"], d["V"], d["N"] * d["H"], Kx * d["H"]
    by_suffix = {"embed_tokens.embedding": (V, D), "lm_head.embedding": (V, D), "layernorm.scale": (D,),
                 "norm.scale": (D,), "q_norm.scale": (d["H"],), "k_norm.scale": (d["H"],),
                 "q_proj.weight": (D, NH), "k_proj.weight": (D, KH), "v_proj.weight": (D, KH),
                 "o_proj.weight": (NH, D), "gate_proj.weight": (D, F), "up_proj.weight": (D, F),
                 "down_proj.weight": (F, D)}
    shapes = {}
    for name in ct.state_names("sglang_jax", cfg):
        key = next(k for k in sorted(by_suffix, key=len, reverse=True) if name.endswith(k))
        shapes[name] = by_suffix[key]
    return shapes, Kx


class FakeModel(nnx.Module):
    """An NNX module whose nested state spells the engine's weight names."""

    def __init__(self, flat: dict):
        root: dict = {}
        for name, value in flat.items():
            *parts, last = name.split(".")
            node = root
            for part in parts:
                node = node.setdefault(part, {})
            node[last] = value
        build = lambda d: nnx.Dict({k: build(v) if isinstance(v, dict) else nnx.Param(v) for k, v in d.items()})
        self.model = build(root["model"])
        if "lm_head" in root:  # untied checkpoints only
            self.lm_head = build(root["lm_head"])


class ModelConfig:
    """The slice of the runner's model config the adapter reads."""

    def __init__(self, hf_config, head_dim, kv_heads):
        self.hf_config, self.head_dim, self._kv = hf_config, head_dim, kv_heads

    def get_total_num_kv_heads(self) -> int:
        return self._kv


class ModelRunner:
    """Owns `model` and the `model_state_leaves` list the compiled forward reads."""

    def __init__(self, cfg: dict, dtype, tp: int, seed: int, device_indexes=None):
        shapes, Kx = state_shapes(cfg, tp)
        devices = jax.devices()
        ids = device_indexes if device_indexes is not None else list(range(min(tp, len(devices))))
        # sglang-jax's mesh axes ("data", "tensor"), when the devices exist here
        self.mesh = (jax.sharding.Mesh(np.asarray([devices[i] for i in ids]).reshape(1, -1), ("data", "tensor"))
                     if len(ids) == tp and max(ids) < len(devices) else None)
        d = fd.dims(cfg)
        self.model_config = ModelConfig(cfg, d["H"], Kx)
        self.model = FakeModel(fd.dummy_weights(shapes, dtype, seed))
        state = nnx.split(self.model)[1]
        self._names = [".".join(map(str, p)) for p, _ in nnx.to_flat_state(state)]
        self.model_state_leaves = jax.tree.leaves(state)
        self._shapes, self._dtype, self._dims = shapes, np.dtype(dtype), d
        self.decoder = fd.Decoder(cfg, d["H"], dtype) if cfg["model_type"] in fd.FORWARD_FAMILIES else None

    def weights(self) -> dict:
        """Canonical f32 arrays from model_state_leaves, checked against the compiled shapes and dtypes."""
        if len(self.model_state_leaves) != len(self._names):
            raise RuntimeError(f"model_state_leaves has {len(self.model_state_leaves)} leaves, expected {len(self._names)}")
        w = {}
        for name, leaf in zip(self._names, self.model_state_leaves):
            leaf = np.asarray(leaf)
            if leaf.shape != self._shapes[name] or leaf.dtype != self._dtype:
                raise TypeError(f"leaf {name} is {leaf.dtype}{list(leaf.shape)}; the model was compiled for "
                                f"{self._dtype}{list(self._shapes[name])}")
            w[name] = leaf.astype(np.float32)
        d, Kx = self._dims, self.model_config.get_total_num_kv_heads()
        D, N, H = d["D"], d["N"], d["H"]
        layers = []
        for i in range(d["L"]):
            p = f"model.layers.{i}."
            layers.append(dict(in_norm=w[p + "input_layernorm.scale"], post_norm=w[p + "post_attention_layernorm.scale"],
                               wq=w[p + "self_attn.q_proj.weight"].reshape(D, N, H),
                               wk=w[p + "self_attn.k_proj.weight"].reshape(D, Kx, H),
                               wv=w[p + "self_attn.v_proj.weight"].reshape(D, Kx, H),
                               wo=w[p + "self_attn.o_proj.weight"].reshape(N, H, D),
                               q_norm=w.get(p + "self_attn.q_norm.scale"), k_norm=w.get(p + "self_attn.k_norm.scale"),
                               gate=w[p + "mlp.gate_proj.weight"], up=w[p + "mlp.up_proj.weight"],
                               down=w[p + "mlp.down_proj.weight"]))
        embed = w["model.embed_tokens.embedding"]
        return dict(embed=embed, layers=layers, final_norm=w["model.norm.scale"],
                    lm_head=w["lm_head.embedding"].T if "lm_head.embedding" in w else embed.T)  # tied: the embedding


class Engine:
    """`Engine(model_path=dir_with_config_json, load_format='dummy', tp_size=..., ...)`; generation by async_generate."""

    def __init__(self, **kwargs):
        ct.check_kwargs("ServerArgs", kwargs, ct.CONTRACT["sglang_jax"]["ServerArgs.fields"])  # Engine(**ServerArgs)
        kw = dict(load_format="auto", dtype="auto", tp_size=1, random_seed=None, disable_radix_cache=False,
                  skip_tokenizer_init=False, context_length=None, mem_fraction_static=None,
                  enable_single_process=False, device_indexes=None) | kwargs
        if kw["load_format"] != "dummy":
            raise NotImplementedError("the fake engine only starts from dummy weights (load_format='dummy')")
        if not kw["skip_tokenizer_init"]:
            raise NotImplementedError("the fake engine has no tokenizer: pass skip_tokenizer_init=True")
        seed = 42 if kw["random_seed"] is None else kw["random_seed"]  # ServerArgs' default seed
        self.mem_fraction_static, self.random_seed = kw["mem_fraction_static"], seed
        cfg = fd.read_hf_config(kw["model_path"])
        dtype = cfg.get("torch_dtype", "float32") if kw["dtype"] == "auto" else kw["dtype"]
        self.hf_config = cfg
        runner = ModelRunner(cfg, fd.engine_dtype(dtype), kw["tp_size"], seed, kw["device_indexes"])
        self._scheduler = types.SimpleNamespace(
            tp_worker=types.SimpleNamespace(worker=types.SimpleNamespace(model_runner=runner)))
        self.scheduler_info = {"max_total_num_tokens": 1 << 16, "max_req_input_len": kw["context_length"] or 4096}
        if kw["enable_single_process"]:  # the scheduler object is handed back only when it runs in this process
            self.scheduler_info["scheduler"] = self._scheduler
        self.radix_cache: Optional[dict] = None if kw["disable_radix_cache"] else {}
        self._rng = np.random.default_rng(seed)

    @property
    def _runner(self) -> ModelRunner:
        return self._scheduler.tp_worker.worker.model_runner

    def get_default_sampling_params(self) -> SamplingParams:
        return SamplingParams()

    def flush_cache(self) -> bool:
        if self.radix_cache is not None:
            self.radix_cache.clear()
        return True

    def generate(self, prompt=None, sampling_params=None, input_ids=None, return_logprob=False):
        """Blocking form of async_generate."""
        return asyncio.run(self.async_generate(prompt, sampling_params, input_ids, return_logprob))

    async def async_generate(self, prompt=None, sampling_params=None, input_ids=None, return_logprob=False,
                             logprob_start_len=None, top_logprobs_num=None, token_ids_logprob=None,
                             stream: bool = False, lora_path=None, return_routed_experts=False):
        """One dict per request: {'text', 'output_ids', 'meta_info': {'finish_reason', 'output_token_logprobs'}}."""
        if prompt is not None or input_ids is None:
            raise NotImplementedError("without a tokenizer, pass input_ids (a list of id lists)")
        single = input_ids and isinstance(input_ids[0], (int, np.integer))
        batch = [input_ids] if single else input_ids
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params or {}] * len(batch)
        runner = self._runner
        if runner.decoder is None:
            raise NotImplementedError(f"the fake engine does not run model_type {self.hf_config['model_type']!r}")
        weights = runner.weights()
        outs = [self._one(runner, weights, [int(t) for t in ids], SamplingParams(**sp), return_logprob)
                for ids, sp in zip(batch, params)]
        return outs[0] if single else outs

    def _one(self, runner, weights, ids, sp: SamplingParams, return_logprob: bool) -> dict:
        L = len(weights["layers"])
        key = tuple(ids[:-1])
        if self.radix_cache is not None and key in self.radix_cache:
            kv = [[list(k), list(v)] for k, v in self.radix_cache[key]]
        else:
            kv = [[[], []] for _ in range(L)]
            if len(ids) > 1:
                runner.decoder.step(weights, np.asarray(ids[:-1]), np.arange(len(ids) - 1), kv)
            if self.radix_cache is not None:
                self.radix_cache[key] = [(list(k), list(v)) for k, v in kv]
        logits = runner.decoder.step(weights, np.asarray(ids[-1:]), np.asarray([len(ids) - 1]), kv)[-1]
        rng = np.random.default_rng(sp.sampling_seed) if sp.sampling_seed is not None else self._rng
        stops = set(sp.stop_token_ids or ())
        eos = self.hf_config.get("eos_token_id")
        if not sp.ignore_eos and eos is not None:
            stops |= set(eos if isinstance(eos, list) else [eos])
        top_k = sp.top_k if sp.top_k > 0 else None
        tokens, lps, finish = [], [], {"type": "length", "length": sp.max_new_tokens}
        for t in range(sp.max_new_tokens):
            tok, raw, _ = fd.sample_next(logits, temperature=sp.temperature, top_k=top_k, top_p=sp.top_p, rng=rng)
            scaled = raw if sp.temperature < 1e-5 else _log_softmax(logits / sp.temperature)
            tokens.append(tok)
            lps.append((float(scaled[tok]), tok, None))
            if tok in stops:
                finish = {"type": "stop", "matched": tok}
                break
            if t + 1 < sp.max_new_tokens:
                logits = runner.decoder.step(weights, np.asarray([tok]), np.asarray([len(ids) + t]), kv)[-1]
        meta = {"finish_reason": finish, "prompt_tokens": len(ids), "completion_tokens": len(tokens)}
        if return_logprob:
            meta["output_token_logprobs"] = lps
        return {"text": "", "output_ids": tokens, "meta_info": meta}


def _log_softmax(z):
    z = z - z.max()
    return z - np.log(np.exp(z).sum())
