"""The rollout layer: the engine interface (`base`, chapter 20b) and the engines behind it (chapters 40-42).

Importing the package loads the engines' modules, and each registers its engine in `base.ENGINES`, so
`RolloutConfig(engine="hf")` finds it by name. None of them imports torch, transformers or vLLM until an
engine is built.
"""
from . import base, engines, sync, external  # noqa: F401  (engines: vanilla; sync: hf)

# chapter 42's engines, registered here until its module registers them itself
base.register_engine("vllm", external.VllmEngine)
base.register_engine("sglang_jax", external.SglangJaxEngine)
