"""vLLM attention rules as data per vLLM version, small pure functions, and kernel adapters."""
