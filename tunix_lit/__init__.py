"""Tunix, From the Inside: LLM post-training in JAX, re-built chapter by chapter.

Submodules load when used (`import tunix_lit.models.transformer`), so `import tunix_lit` stays light.
"""
__version__ = "0.1.0"
