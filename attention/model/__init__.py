"""A model's config.json as vLLM reads it: where it comes from, validation, dtype, heads, kind, per-version model rules."""
