"""Fake sgl_jax.srt.entrypoints."""
