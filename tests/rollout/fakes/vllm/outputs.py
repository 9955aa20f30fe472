"""Fake `vllm.outputs`: RequestOutput and CompletionOutput with vLLM's field names."""
import dataclasses
from typing import Optional


@dataclasses.dataclass
class CompletionOutput:
    """One completion of a request."""

    index: int
    text: str
    token_ids: list
    cumulative_logprob: Optional[float]
    logprobs: Optional[list]  # per generated token: {token_id: Logprob}
    finish_reason: Optional[str] = None  # 'stop' or 'length'
    stop_reason: Optional[int] = None


@dataclasses.dataclass
class RequestOutput:
    """What LLM.generate returns per prompt."""

    request_id: str
    prompt: Optional[str]
    prompt_token_ids: list
    prompt_logprobs: Optional[list]
    outputs: list
    finished: bool
