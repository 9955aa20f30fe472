"""A fake `vllm` for tests: the public API the rollout adapter uses, over a NumPy model of its own.

It mirrors vLLM on a JAX/TPU backend (tpu-inference): the model runner keeps its weights in `state`
under HF names, jitted code reads the cached tuple `state_leaves` (stale until someone refreshes it),
head_dim is padded to a multiple of 128 and KV heads are repeated up to the tensor-parallel size, the
LM head is its own array even for tied checkpoints. A prefix cache keeps prompt K/V computed under the
weights of the time until `reset_prefix_cache()`, and generating between `collective_rpc("delete_kv_cache")`
and `collective_rpc("reinitialize_kv_cache")` raises. It never imports tunix_lit.
"""
from .entrypoints.llm import LLM
from .logprobs import Logprob
from .outputs import CompletionOutput, RequestOutput
from .sampling_params import SamplingParams

__version__ = "0.0.0+fake"
__all__ = ["LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "Logprob"]
