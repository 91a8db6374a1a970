"""Developer script: the installed vLLM's own `vllm serve` parser on a set of pasted lines, recorded for
tests/test_serve_parser.py, through attnsel's own path (attention/versions/serve_parser.py).

    python -m attnsel.bench.tools.release_env run 0.34.0 -- -m attnsel.bench.tools.serve_parser_answers OUT.json

`--cpu-platform` lets the parser build on a machine without a GPU: vLLM's serve parser asks the current
platform while it is built (RuntimeError "Failed to infer device type" without one), so its CPU platform
stands in; the option strings, choices and value types the answers come from do not depend on it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from attnsel.attention.versions.serve_parser import installed_parser_answer
from attnsel.bench.tools.serve_flags import cpu_platform_stands_in

LINES = [
    "vllm serve m --max-model-len 32k --port 8000",
    "vllm serve m --max-model-lenn 8192",
    "vllm serve m --kv-cache-dtype fp9",
    "vllm serve m --tensor-parallel 2 --max-model 8192",
    "vllm serve m -tp 2 -q fp8 --enforce-eager",
    "vllm serve m --enable-extensible-kv-cache --no-enable-prefix-caching",
    "vllm serve m --attention-config.backend FLASH_ATTN",
    "vllm serve m --swap-space 4",
    "vllm serve m --num-gpus 2",
    "vllm serve m --max-num-seqs many",
    "vllm serve m -O3 --disable-log-requests",
]


def main(argv: list[str]) -> int:
    if "--cpu-platform" in argv:
        argv = [a for a in argv if a != "--cpu-platform"]
        cpu_platform_stands_in()
    answers = []
    version = None
    for text in LINES:
        answer = installed_parser_answer(text.split())
        if answer is None:
            print("the installed vLLM's parser cannot be built here", file=sys.stderr)
            return 1
        version = answer.vllm_version
        answers.append({"tokens": text.split(), "error": answer.error})
        print(f"{text}\n  -> {answer.error or 'taken'}")
    Path(argv[0]).write_text(json.dumps({"vllm_version": version, "source": "bench/tools/serve_parser_answers.py",
                                         "answers": answers}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
