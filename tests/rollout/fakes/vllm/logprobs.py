"""Fake `vllm.logprobs`: the Logprob record vLLM puts in CompletionOutput.logprobs."""
import dataclasses
from typing import Optional


@dataclasses.dataclass
class Logprob:
    """Log-probability of one id, its rank in the distribution, and its text when detokenized."""

    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None
