"""Fake `vllm.LLM`: an offline engine whose model runner holds its own weights and runs a NumPy forward."""
import functools
import types
from typing import Optional

import numpy as np
import _fake_decoder as fd

from ..logprobs import Logprob
from ..outputs import CompletionOutput, RequestOutput
from ..sampling_params import SamplingParams

LOGPROBS_MODES = ("raw_logprobs", "processed_logprobs")


def state_shapes(cfg: dict, tp: int) -> tuple[dict, int, int]:
    """Engine name -> shape of every weight, with head_dim padded to 128 lanes and KV heads repeated to tp."""
    d = fd.dims(cfg)
    Hp = -(-d["H"] // 128) * 128
    Kx = d["K"] if tp <= d["K"] else tp
    if Kx % d["K"] or d["N"] % Kx:
        raise ValueError(f"tensor_parallel_size={tp} does not fit {d['K']} KV heads / {d['N']} query heads")
    D, F, V = d["D"], d["F"], d["V"]
    shapes = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,), "lm_head.weight": (D, V)}
    for i in range(d["L"]):
        p = f"model.layers.{i}."
        shapes |= {p + "input_layernorm.weight": (D,), p + "post_attention_layernorm.weight": (D,),
                   p + "self_attn.q_proj.weight": (D, d["N"], Hp), p + "self_attn.k_proj.weight": (D, Kx, Hp),
                   p + "self_attn.v_proj.weight": (D, Kx, Hp), p + "self_attn.o_proj.weight": (d["N"], Hp, D),
                   p + "mlp.gate_proj.weight": (D, F), p + "mlp.up_proj.weight": (D, F),
                   p + "mlp.down_proj.weight": (F, D)}
        if cfg["model_type"] in ("gemma3_text", "gemma3"):  # sandwich norms around attention and MLP
            shapes |= {p + "pre_feedforward_layernorm.weight": (D,), p + "post_feedforward_layernorm.weight": (D,)}
        if cfg["model_type"] in ("qwen3", "gemma3_text", "gemma3"):
            shapes |= {p + "self_attn.q_norm.weight": (d["H"],), p + "self_attn.k_norm.weight": (d["H"],)}
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
    """Holds `state` (engine name -> array) and the cached `state_leaves` the compiled forward reads."""

    def __init__(self, hf_config: dict, dtype, tp: int, seed: int):
        shapes, Hp, Kx = state_shapes(hf_config, tp)
        self.model_config = ModelConfig(hf_config, tp, Hp, Kx)
        self.state = fd.dummy_weights(shapes, dtype, seed)
        self.state_leaves = tuple(self.state[k] for k in sorted(self.state))  # what "compiled" code reads
        self._names = tuple(sorted(self.state))
        self._shapes, self._dtype = shapes, np.dtype(dtype)
        self.kv_caches: Optional[list] = []
        self.decoder = (fd.Decoder(hf_config, fd.dims(hf_config)["H"], dtype)
                        if hf_config["model_type"] in fd.FORWARD_FAMILIES else None)

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
        L = fd.dims(self.model_config.hf_config)["L"]
        layers = []
        for i in range(L):
            p = f"model.layers.{i}."
            layers.append(dict(in_norm=w[p + "input_layernorm.weight"], post_norm=w[p + "post_attention_layernorm.weight"],
                               wq=w[p + "self_attn.q_proj.weight"], wk=w[p + "self_attn.k_proj.weight"],
                               wv=w[p + "self_attn.v_proj.weight"], wo=w[p + "self_attn.o_proj.weight"],
                               q_norm=w.get(p + "self_attn.q_norm.weight"), k_norm=w.get(p + "self_attn.k_norm.weight"),
                               gate=w[p + "mlp.gate_proj.weight"], up=w[p + "mlp.up_proj.weight"],
                               down=w[p + "mlp.down_proj.weight"]))
        return dict(embed=w["model.embed_tokens.weight"], layers=layers, final_norm=w["model.norm.weight"],
                    lm_head=w["lm_head.weight"])


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

    def __init__(self, runner: ModelRunner, prefix_caching: bool):
        self.model_executor = types.SimpleNamespace(driver_worker=Worker(runner))
        self.prefix_caching = prefix_caching
        self.prefix_cache: dict = {}

    def reset_prefix_cache(self) -> bool:
        self.prefix_cache.clear()
        return True

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        worker = self.model_executor.driver_worker
        fn = getattr(worker, method) if isinstance(method, str) else functools.partial(method, worker)
        return [fn(*args, **(kwargs or {}))]


class LLM:
    """Offline engine: `LLM(model=dir_with_config_json, load_format='dummy', skip_tokenizer_init=True, ...)`."""

    def __init__(self, model: str, *, tokenizer=None, skip_tokenizer_init: bool = False, dtype: str = "auto",
                 load_format: str = "auto", tensor_parallel_size: int = 1, seed: int = 0,
                 max_model_len: Optional[int] = None, enable_prefix_caching: bool = True,
                 logprobs_mode: str = "raw_logprobs", gpu_memory_utilization: float = 0.9, **kwargs):
        if load_format != "dummy":
            raise NotImplementedError("the fake engine only starts from dummy weights (load_format='dummy')")
        if not skip_tokenizer_init:
            raise NotImplementedError("the fake engine has no tokenizer: pass skip_tokenizer_init=True")
        if logprobs_mode not in LOGPROBS_MODES:
            raise ValueError(f"logprobs_mode {logprobs_mode!r}; choose one of {LOGPROBS_MODES}")
        cfg = fd.read_hf_config(model)
        dtype = cfg.get("torch_dtype", "float32") if dtype == "auto" else dtype
        self.hf_config, self.max_model_len, self.logprobs_mode = cfg, max_model_len, logprobs_mode
        self.llm_engine = LLMEngine(ModelRunner(cfg, fd.engine_dtype(dtype), tensor_parallel_size, seed),
                                    enable_prefix_caching)
        self._rng = np.random.default_rng(seed)
        self._counter = 0

    def reset_prefix_cache(self) -> bool:
        return self.llm_engine.reset_prefix_cache()

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        return self.llm_engine.collective_rpc(method, timeout, args, kwargs)

    def get_default_sampling_params(self) -> SamplingParams:
        return SamplingParams()

    def generate(self, prompts, sampling_params=None, use_tqdm: bool = True, lora_request=None, **kwargs):
        """One RequestOutput per prompt; prompts are TokensPrompt dicts {'prompt_token_ids': [...]}."""
        prompts = prompts if isinstance(prompts, list) else [prompts]
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params or SamplingParams()] * len(prompts)
        runner = self.llm_engine.model_executor.driver_worker.model_runner
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
