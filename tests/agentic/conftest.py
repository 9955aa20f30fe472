"""Fixtures the agentic tests share: the tiny world's tokenizer and an episode config that stops at EOS or a newline."""
import pytest

from tunix_lit.agentic.trajectory import EpisodeConfig
from tunix_lit.models import tiny
from tunix_lit.models.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(tiny.asset_dir())


@pytest.fixture(scope="module")
def cfg(tok):
    return EpisodeConfig(max_context=64, stop_tokens=(tok.eos_id, tok.encode("\n", add_special_tokens=False)[0]))
