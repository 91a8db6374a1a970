"""One place per vLLM version: a data file each (`vllm_0_X.json`), and a code module only where a
release brought new logic (`vllm_0_X.py`, its `Rules` class). README.md in this folder says how to
add a release. `registry` reads the files; `choice` picks the version that answers."""
