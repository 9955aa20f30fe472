"""Fake sgl_jax.srt."""
