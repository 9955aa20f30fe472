"""What the fakes may accept and hold: the facts tools/engine_contract.py read from the real packages' source.

The fakes take only keywords the real constructors take (an unknown one is a TypeError, as from the real
dataclass), and name their weight state with the real model classes' paths for the family.
"""
import json
from pathlib import Path

import numpy as np
from flax import nnx

CONTRACT = json.loads((Path(__file__).resolve().parents[1] / "engine_contract.json").read_text())


def check_kwargs(where: str, kwargs: dict, allowed) -> None:
    """TypeError for a keyword the real constructor does not take (the message of a dataclass's __init__)."""
    bad = sorted(set(kwargs) - set(allowed))
    if bad:
        raise TypeError(f"{where}.__init__() got an unexpected keyword argument {bad[0]!r}")


def family_of(hf_config: dict) -> str:
    """Our family name of an HF config's model_type (the contract's key)."""
    table = {"llama": "llama3", "qwen3": "qwen3"}
    if hf_config["model_type"] not in table:
        raise ValueError(f"model_type {hf_config['model_type']!r} has no JAX model in this engine "
                         f"(JAX families here: {sorted(table)})")
    return table[hf_config["model_type"]]


def state_names(engine: str, hf_config: dict) -> list:
    """The real model class's parameter paths for this config: layer templates expanded, tied or untied."""
    spec = CONTRACT[engine]["state"][family_of(hf_config)]
    tied = hf_config.get("tie_word_embeddings", False)
    out = []
    for t in spec["tied" if tied else "untied"]:
        out += [t.replace("{i}", str(i)) for i in range(hf_config["num_hidden_layers"])] if "{i}" in t else [t]
    return sorted(out)


def nested_state(flat: dict) -> nnx.State:
    """An nnx.State nested as the real model's (layer indices as ints), one nnx.Param per array."""
    path = lambda name: tuple(int(p) if p.isdigit() else p for p in name.split("."))
    return nnx.from_flat_state([(path(n), nnx.Param(np.asarray(a))) for n, a in sorted(flat.items())])
