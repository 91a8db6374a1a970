"""vLLM's own spellings of `vllm serve` values that explain and preflight take as vLLM does: the
human-readable integers of `--max-model-len` and `--max-num-batched-tokens` (`32k`, `128K`, `25.6k`),
and `--max-model-len auto` / `-1` (auto-fit). One parser for every command that reads them.

vLLM 0.34.0 vllm/utils/argparse_utils.py:30 `human_readable_int` and :77 `human_readable_int_or_auto`
(identical in 0.33.0); vllm/engine/arg_utils.py:396-408 gives `max_model_len` the second and
`max_num_batched_tokens` (with max_num_scheduled_tokens, kv_cache_memory_bytes, ...) the first.
"""

from __future__ import annotations

import re

from attnsel.errors import UserInputError

AUTO_MAX_MODEL_LEN = -1  # vLLM's value for `--max-model-len auto` / `-1`: fit the length to the KV cache memory
# argparse_utils.py:43: one number (decimals allowed) and one suffix letter; lower case is decimal, upper binary
_SUFFIXED = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_SPELLINGS = "a whole number, or with a suffix: 32k (32,000), 32K (32,768), 25.6k; k/m/g/t decimal, K/M/G/T binary"


def human_readable_int(value: str, flag: str) -> int:
    """vLLM's `human_readable_int`: `1k` -> 1000, `1K` -> 1024, `25.6k` -> 25600, else Python's int()
    of the stripped text (so `1_000` and `+5` too, as vLLM takes them). What vLLM refuses is bad
    input here (exit 2), with the flag named: `1.5K` (decimals with a binary suffix), `32kk`, `1e3`.

    >>> human_readable_int("25.6k", "--max-num-batched-tokens"), human_readable_int(" 128K", "--max-model-len")
    (25600, 131072)
    """
    text = str(value).strip()
    match = _SUFFIXED.fullmatch(text)
    try:
        if match:
            number, suffix = match.groups()
            if suffix in _DECIMAL:
                return int(float(number) * _DECIMAL[suffix])
            if "." in number:  # argparse_utils.py:64: "Decimals are not allowed with binary suffixes"
                raise UserInputError(f"bad {flag} {value!r}: decimals are not allowed with binary suffixes like "
                                     f"{suffix} (vLLM refuses it too); did you mean {number}{suffix.lower()}?")
            return int(number) * _BINARY[suffix]
        return int(text)
    except (ValueError, OverflowError):  # int('1e3'); a number of 4,300+ digits; float('1'*400) = inf
        raise UserInputError(f"bad {flag} {_shown(value)}: vLLM reads {_SPELLINGS}") from None


def human_readable_int_or_auto(value: str, flag: str) -> int:
    """vLLM's `human_readable_int_or_auto`: `auto` (any case) or `-1` -> AUTO_MAX_MODEL_LEN, else as above.

    >>> human_readable_int_or_auto("AUTO", "--max-model-len"), human_readable_int_or_auto("32k", "--max-model-len")
    (-1, 32000)
    """
    text = str(value).strip()
    if text == "-1" or text.lower() == "auto":
        return AUTO_MAX_MODEL_LEN
    return human_readable_int(value, flag)


def _shown(value: str, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 5] + "...'" + f" ({len(value)} characters)"


# The `vllm serve` integer flags explain and preflight take, and whether vLLM lets them be `auto` / -1
# (arg_utils.py:402-408: only max_model_len).
SERVE_INT_FLAGS = {"--max-model-len": True, "--max-num-batched-tokens": False}


def serve_int(flag: str, value: "str | None") -> "int | None":
    """A `vllm serve` integer flag's value as vLLM parses it; None stays None (the flag not given)."""
    if value is None:
        return None
    return human_readable_int_or_auto(value, flag) if SERVE_INT_FLAGS[flag] else human_readable_int(value, flag)
