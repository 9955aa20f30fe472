"""Fake `vllm.LLM`: an offline engine whose model runner holds its own weights and runs a NumPy forward."""
import functools
import os
import types
from typing import Optional

import jax
import numpy as np
from flax import nnx
import _contract as ct
import _fake_decoder as fd

from ..logprobs import Logprob
from ..outputs import CompletionOutput, RequestOutput
from ..sampling_params import SamplingParams

LOGPROBS_MODES = ("raw_logprobs", "processed_logprobs")


def state_shapes(cfg: dict, tp: int) -> tuple[dict, int, int]:
    """Engine name -> shape of every weight of tpu-inference's JAX model: head_dim padded to 128 lanes, KV heads
    repeated to tp, vocabulary padded to a multiple of tp; names from the contract (Qwen 3 `.weight`, Llama 3
    `.kernel`/`.scale`/`embed.embedding`; no separate head when tied)."""
    d = fd.dims(cfg)
    Hp = -(-d["H"] // 128) * 128
    Kx = d["K"] if tp <= d["K"] else tp
    if Kx % d["K"] or d["N"] % Kx:
        raise ValueError(f"tensor_parallel_size={tp} does not fit {d['K']} KV heads / {d['N']} query heads")
    D, F, V, N = d["D"], d["F"], -(-d["V"] // tp) * tp, d["N"]
    by_suffix = {"embed_tokens.weight": (V, D), "embed.embedding": (V, D), "lm_head.weight": (D, V),
                 "model.lm_head": (D, V), "layernorm.weight": (D,), "layernorm.scale": (D,), "norm.weight": (D,),
                 "norm.scale": (D,), "q_proj.weight": (D, N, Hp), "q_proj.kernel": (D, N, Hp),
                 "k_proj.weight": (D, Kx, Hp), "k_proj.kernel": (D, Kx, Hp), "v_proj.weight": (D, Kx, Hp),
                 "v_proj.kernel": (D, Kx, Hp), "o_proj.weight": (N, Hp, D), "o_proj.kernel": (N, Hp, D),
                 "gate_proj.weight": (D, F), "gate_proj.kernel": (D, F), "up_proj.weight": (D, F),
                 "up_proj.kernel": (D, F), "down_proj.weight": (F, D), "down_proj.kernel": (F, D),
                 "q_norm.weight": (Hp,), "k_norm.weight": (Hp,)}
    shapes = {}
    for name in ct.state_names("vllm", cfg):
        key = next(k for k in sorted(by_suffix, key=len, reverse=True) if name.endswith(k))
        shapes[name] = by_suffix[key]
    return shapes, Hp, Kx


class ModelConfig:
    """The slice of vllm.config.ModelConfig the adapter reads."""

    def __init__(self, hf_config: dict, tp: int, head_size: int, kv_heads: int):
        self.hf_config, self.tp, self._head, self._kv = hf_config, tp, head_size, kv_heads

    def get_head_size(self) -> int:
        return self._head

    def get_total_num_kv_heads(self) -> int:
        return self._kv


class ModelRunner:
    """Holds `state` (a nested nnx.State, as tpu-inference's runner) and the `state_leaves` its jitted code reads."""

    def __init__(self, hf_config: dict, dtype, tp: int, seed: int, device_indexes=None):
        shapes, Hp, Kx = state_shapes(hf_config, tp)
        self.model_config = ModelConfig(hf_config, tp, Hp, Kx)
        self.state = ct.nested_state(fd.dummy_weights(shapes, dtype, seed))
        self._names = tuple(".".join(map(str, p)) for p, _ in nnx.to_flat_state(self.state))
        self.refresh_state_leaves()
        self._shapes, self._dtype = shapes, np.dtype(dtype)
        self.kv_caches: Optional[list] = []
        self.decoder = (fd.Decoder(hf_config, fd.dims(hf_config)["H"], dtype)
                        if hf_config["model_type"] in fd.FORWARD_FAMILIES else None)
        devices = jax.devices()
        ids = device_indexes if device_indexes is not None else list(range(min(tp, len(devices))))
        # the runner's mesh, axes as tpu-inference's 2-D mesh ("data", "model"), when the devices exist here
        self.mesh = (jax.sharding.Mesh(np.asarray([devices[i] for i in ids]).reshape(1, -1), ("data", "model"))
                     if len(ids) == tp and max(ids) < len(devices) else None)

    def refresh_state_leaves(self) -> None:
        """Re-derive the leaves the compiled functions read from `state` (tpu-inference's method of this name)."""
        self.state_leaves = tuple(jax.tree.leaves(self.state))

    def weights(self) -> dict:
        """Canonical f32 arrays from the cached leaves (checked against the compiled shapes and dtypes)."""
        if len(self.state_leaves) != len(self._names):
            raise RuntimeError(f"state_leaves has {len(self.state_leaves)} leaves, the model has {len(self._names)}")
        w = {}
        for name, leaf in zip(self._names, self.state_leaves):
            leaf = np.asarray(leaf)
            if leaf.shape != self._shapes[name] or leaf.dtype != self._dtype:
                raise TypeError(f"leaf {name} is {leaf.dtype}{list(leaf.shape)}; the model was compiled for "
                                f"{self._dtype}{list(self._shapes[name])}")
            w[name] = leaf.astype(np.float32)
        cfg = self.model_config.hf_config
        d = fd.dims(cfg)
        qwen = cfg["model_type"] == "qwen3"
        wt, nm = ("weight", "weight") if qwen else ("kernel", "scale")
        embed = w["model.embed_tokens.weight" if qwen else "model.embed.embedding"][: d["V"]]
        head = w.get("lm_head.weight" if qwen else "model.lm_head")
        layers = []
        for i in range(d["L"]):
            p = f"model.layers.{i}."
            qn, kn = w.get(p + "self_attn.q_norm.weight"), w.get(p + "self_attn.k_norm.weight")
            layers.append(dict(in_norm=w[p + f"input_layernorm.{nm}"], post_norm=w[p + f"post_attention_layernorm.{nm}"],
                               wq=w[p + f"self_attn.q_proj.{wt}"], wk=w[p + f"self_attn.k_proj.{wt}"],
                               wv=w[p + f"self_attn.v_proj.{wt}"], wo=w[p + f"self_attn.o_proj.{wt}"],
                               q_norm=None if qn is None else qn[: d["H"]], k_norm=None if kn is None else kn[: d["H"]],
                               gate=w[p + f"mlp.gate_proj.{wt}"], up=w[p + f"mlp.up_proj.{wt}"],
                               down=w[p + f"mlp.down_proj.{wt}"]))
        return dict(embed=embed, layers=layers, final_norm=w[f"model.norm.{nm}"],
                    lm_head=embed.T if head is None else head[:, : d["V"]])  # tied: logits from the embedding


class Worker:
    """The driver worker: KV-cache lifecycle by collective_rpc method name."""

    def __init__(self, runner: ModelRunner):
        self.model_runner = runner

    def delete_kv_cache(self):
        self.model_runner.kv_caches = None

    def reinitialize_kv_cache(self):
        self.model_runner.kv_caches = []


class LLMEngine:
    """The engine object behind LLM: executor, prefix cache, collective_rpc."""

    def __init__(self, runner: ModelRunner, prefix_caching: bool, multiprocess_mode: bool):
        if not multiprocess_mode:  # as vLLM's v1 LLMEngine: the executor is reachable only in-process
            self.model_executor = types.SimpleNamespace(driver_worker=Worker(runner))
        self._worker = Worker(runner)
        self.prefix_caching = prefix_caching
        self.prefix_cache: dict = {}

    def reset_prefix_cache(self) -> bool:
        self.prefix_cache.clear()
        return True

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        worker = self._worker
        fn = getattr(worker, method) if isinstance(method, str) else functools.partial(method, worker)
        return [fn(*args, **(kwargs or {}))]


class LLM:
    """Offline engine: `LLM(model=dir_with_config_json, load_format='dummy', skip_tokenizer_init=True, ...)`."""

    def __init__(self, model: str, **kwargs):
        ct.check_kwargs("LLM", kwargs, ct.CONTRACT["vllm"]["LLM.kwargs"])  # LLM's own and EngineArgs' fields only
        kw = dict(skip_tokenizer_init=False, dtype="auto", load_format="auto", tensor_parallel_size=1, seed=0,
                  max_model_len=None, enable_prefix_caching=True, logprobs_mode="raw_logprobs",
                  gpu_memory_utilization=0.92, additional_config=None) | kwargs
        if kw["load_format"] != "dummy":
            raise NotImplementedError("the fake engine only starts from dummy weights (load_format='dummy')")
        if not kw["skip_tokenizer_init"]:
            raise NotImplementedError("the fake engine has no tokenizer: pass skip_tokenizer_init=True")
        if kw["logprobs_mode"] not in LOGPROBS_MODES:
            raise ValueError(f"logprobs_mode {kw['logprobs_mode']!r}; choose one of {LOGPROBS_MODES}")
        if not 0 < kw["gpu_memory_utilization"] <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {kw['gpu_memory_utilization']}")
        cfg = fd.read_hf_config(model)
        dtype = cfg.get("torch_dtype", "float32") if kw["dtype"] == "auto" else kw["dtype"]
        strategy = ((kw["additional_config"] or {}).get("sharding") or {}).get("sharding_strategy") or {}
        self.hf_config, self.max_model_len, self.logprobs_mode = cfg, kw["max_model_len"], kw["logprobs_mode"]
        self.gpu_memory_utilization, self.seed = kw["gpu_memory_utilization"], kw["seed"]
        runner = ModelRunner(cfg, fd.engine_dtype(dtype), kw["tensor_parallel_size"], kw["seed"],
                             strategy.get("device_indexes"))
        multiprocess = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") not in ("0", "false", "False")
        self.llm_engine = LLMEngine(runner, kw["enable_prefix_caching"], multiprocess)
        self._runner = runner
        self._rng = np.random.default_rng(kw["seed"])
        self._counter = 0

    def reset_prefix_cache(self) -> bool:
        return self.llm_engine.reset_prefix_cache()

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        return self.llm_engine.collective_rpc(method, timeout, args, kwargs)

    def get_default_sampling_params(self) -> SamplingParams:
        return SamplingParams()

    def generate(self, prompts, sampling_params=None, use_tqdm: bool = True, lora_request=None, priority=None,
                 tokenization_kwargs=None, mm_processor_kwargs=None):
        """One RequestOutput per prompt; prompts are TokensPrompt dicts {'prompt_token_ids': [...]}."""
        prompts = prompts if isinstance(prompts, list) else [prompts]
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params or SamplingParams()] * len(prompts)
        runner = self._runner
        if runner.kv_caches is None:
            raise RuntimeError("KV cache was deleted (collective_rpc('delete_kv_cache')) and not re-initialised")
        if runner.decoder is None:
            raise NotImplementedError(f"the fake engine does not run model_type {self.hf_config['model_type']!r}")
        weights = runner.weights()
        outs = []
        for prompt, sp in zip(prompts, params):
            if not isinstance(prompt, dict) or "prompt_token_ids" not in prompt:
                raise ValueError("without a tokenizer, prompts must be TokensPrompt dicts with 'prompt_token_ids'")
            outs.append(self._one(runner, weights, [int(t) for t in prompt["prompt_token_ids"]], sp))
        return outs

    def _one(self, runner, weights, ids, sp: SamplingParams) -> RequestOutput:
        """Prefill (reusing cached prompt K/V when the prefix cache has it), then decode token by token."""
        L = len(weights["layers"])
        key = tuple(ids[:-1])
        cache = self.llm_engine.prefix_cache
        if self.llm_engine.prefix_caching and key in cache:  # K/V computed under whatever weights were live then
            kv = [[list(k), list(v)] for k, v in cache[key]]
        else:
            kv = [[[], []] for _ in range(L)]
            if len(ids) > 1:
                runner.decoder.step(weights, np.asarray(ids[:-1]), np.arange(len(ids) - 1), kv)
            if self.llm_engine.prefix_caching:
                cache[key] = [(list(k), list(v)) for k, v in kv]
        logits = runner.decoder.step(weights, np.asarray(ids[-1:]), np.asarray([len(ids) - 1]), kv)[-1]
        rng = np.random.default_rng(sp.seed) if sp.seed is not None else self._rng
        stops = set(sp.stop_token_ids or ())
        eos = self.hf_config.get("eos_token_id")
        if not sp.ignore_eos and eos is not None:
            stops |= set(eos if isinstance(eos, list) else [eos])
        top_k = sp.top_k if sp.top_k > 0 else None
        tokens, lps, finish = [], [], "length"
        for t in range(sp.max_tokens):
            tok, raw, proc = fd.sample_next(logits, temperature=sp.temperature, top_k=top_k, top_p=sp.top_p, rng=rng)
            lp = raw if self.logprobs_mode == "raw_logprobs" else proc
            tokens.append(tok)
            if sp.logprobs is not None:
                entry = {tok: Logprob(float(lp[tok]), int((lp > lp[tok]).sum()) + 1)}
                for j in np.argsort(-lp)[: sp.logprobs]:
                    entry.setdefault(int(j), Logprob(float(lp[j]), int((lp > lp[j]).sum()) + 1))
                lps.append(entry)
            if tok in stops:
                finish = "stop"
                break
            if t + 1 < sp.max_tokens:
                logits = runner.decoder.step(weights, np.asarray([tok]), np.asarray([len(ids) + t]), kv)[-1]
        self._counter += 1
        cum = float(sum(d[tokens[i]].logprob for i, d in enumerate(lps))) if lps else None
        done = CompletionOutput(0, "", tokens, cum, lps if sp.logprobs is not None else None, finish,
                                tokens[-1] if finish == "stop" else None)
        return RequestOutput(str(self._counter), None, ids, None, [done], True)
