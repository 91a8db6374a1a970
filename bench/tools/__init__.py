"""Developer tools, apart from what `tune` runs: parity runs against a real vLLM, release
environments, deriving a release's profile (README.md in attention/versions/ says how to use them)."""
