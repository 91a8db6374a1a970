"""vLLM's attention-backend selection as pure functions: the request, the selector's inputs and answers, the block-size flow."""
