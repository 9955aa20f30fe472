"""Fake vllm.entrypoints."""
