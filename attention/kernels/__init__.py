"""Adapters that run each backend's real kernel over a paged KV cache the way vLLM calls it."""
