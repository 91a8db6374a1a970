"""attnsel: which vLLM attention backend will run, why, and which is really fastest."""

__version__ = "0.1.0"
