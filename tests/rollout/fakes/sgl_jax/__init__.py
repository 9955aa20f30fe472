"""A fake `sgl_jax` (SGLang-JAX) for tests; see sgl_jax.srt.entrypoints.engine."""
