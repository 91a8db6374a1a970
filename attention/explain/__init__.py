"""What `attnsel explain` answers: per GPU, across releases, and live against the installed vLLM."""
