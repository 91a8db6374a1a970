"""`attnsel verify`: vLLM's own engine per candidate pair, its log read back, and the verdict."""
