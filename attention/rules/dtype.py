"""The model dtype a user names with `--dtype`: the one alias table and the one parser, used by
`explain` (shape flags and --model), `tune`, `preflight` and `verify`, so a spelling gets the same
answer in every command. No torch.

The accepted spellings are vLLM's own `--dtype` choices (`ModelDType`, vllm/config/model.py: auto,
half, float16, bfloat16, float, float32) and attnsel's shorthands bf16, fp16, fp32. Case and blanks
around the value do not matter. Anything else (torch.float16, f16, ...) is bad input: vLLM's CLI
refuses it too, and a spelling attnsel took that vLLM refuses would make a command line that fails.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from types import MappingProxyType

from attnsel.errors import UserInputError
from attnsel.probe import capability as capability_facts

# The dtypes the selector and the kernels run in (torch's names).
TORCH_DTYPES = ("float16", "bfloat16", "float32")

# Every accepted spelling but "auto" → its torch dtype: vLLM's `_STR_DTYPE_TO_TORCH_DTYPE` keys
# first, then attnsel's shorthands (shown as what they map to).
DTYPE_SPELLINGS: Mapping[str, str] = MappingProxyType(
    {
        "half": "float16",
        "float16": "float16",
        "float": "float32",
        "float32": "float32",
        "bfloat16": "bfloat16",
        "bf16": "bfloat16",
        "fp16": "float16",
        "fp32": "float32",
    }
)
ACCEPTED_DTYPES = ("auto", *DTYPE_SPELLINGS)


def parse_dtype(text: str) -> str:
    """A `--dtype` value → "auto" or one of TORCH_DTYPES; any other spelling is bad input (exit 2).

    >>> parse_dtype("bf16"), parse_dtype(" Half "), parse_dtype("auto")
    ('bfloat16', 'float16', 'auto')
    """
    key = text.strip().lower() if isinstance(text, str) else ""
    if key == "auto":
        return "auto"
    if key in DTYPE_SPELLINGS:
        return DTYPE_SPELLINGS[key]
    if not key:  # the words every command's empty-flag check uses (attention/model/validation.py)
        raise UserInputError("--dtype is empty: give a value or leave the flag out")
    extending = [name for name in ACCEPTED_DTYPES if name.startswith(key)]
    close = list(dict.fromkeys(extending + difflib.get_close_matches(key, ACCEPTED_DTYPES, n=3, cutoff=0.4)))[:3]
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    # vLLM's own words first (`Unknown dtype: {dtype!r}`), then our hint and what attnsel accepts.
    raise UserInputError(f"Unknown dtype: {text!r}.{hint} Valid: {', '.join(ACCEPTED_DTYPES)}")


def preferred_dtype(capability: tuple[int, int]) -> str:
    """What `--dtype auto` becomes without a model config: the platform's first supported dtype
    (`CudaPlatform.supported_dtypes`, docs/vllm-rules.md §5g/§6: bf16 from CC 8.0, fp16 on 6.x-7.x, else fp32)."""
    major, minor = capability  # a list from JSON works too
    return capability_facts.supported_dtypes((int(major), int(minor)))[0]


def shape_dtype(text: str, capability: tuple[int, int] | None) -> str:
    """The dtype of a request without a model config: `parse_dtype`, with "auto" resolved for the
    GPU (it needs one: None is bad input)."""
    dtype = parse_dtype(text)
    if dtype != "auto":
        return dtype
    if capability is None:
        raise UserInputError("--dtype auto needs a GPU capability (pass --gpu or --capability)")
    return preferred_dtype(capability)
