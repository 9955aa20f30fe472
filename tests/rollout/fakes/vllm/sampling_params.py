"""Fake `vllm.sampling_params`: SamplingParams with vLLM's field names and defaults (the ones the adapter touches)."""
import dataclasses
from typing import Optional


@dataclasses.dataclass
class SamplingParams:
    """Per-request sampling settings, spelled as vLLM spells them."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1: off
    min_p: float = 0.0
    seed: Optional[int] = None
    stop_token_ids: Optional[list] = None
    ignore_eos: bool = False
    max_tokens: Optional[int] = 16
    min_tokens: int = 0
    logprobs: Optional[int] = None  # None: no log-probs; k: the sampled id plus the top k
    prompt_logprobs: Optional[int] = None
    detokenize: bool = True
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False

    def __post_init__(self):
        if self.temperature < 0:
            raise ValueError(f"temperature must be non-negative, got {self.temperature}.")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}.")
        if self.top_k < -1:
            raise ValueError(f"top_k must be -1 (disable), 0 (disable), or at least 1, got {self.top_k}.")
        if self.n != 1:
            raise NotImplementedError("the fake engine samples n=1 per request")
