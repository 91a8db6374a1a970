"""vLLM's own spellings of `vllm serve` values that explain and preflight take as vLLM does: the
human-readable integers of `--max-model-len` and `--max-num-batched-tokens` (`32k`, `128K`, `25.6k`),
and `--max-model-len auto` / `-1` (auto-fit). One parser for every command that reads them.

vLLM 0.34.0 vllm/utils/argparse_utils.py:30 `human_readable_int` and :77 `human_readable_int_or_auto`
(identical in 0.33.0); vllm/engine/arg_utils.py:396-408 gives `max_model_len` the second and
`max_num_batched_tokens` (with max_num_scheduled_tokens, kv_cache_memory_bytes, ...) the first.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from attnsel.errors import CheckFailed, UserInputError

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


def serve_int(flag: str, value: str | None) -> int | None:
    """A `vllm serve` integer flag's value as vLLM parses it; None stays None (the flag not given)."""
    if value is None:
        return None
    return human_readable_int_or_auto(value, flag) if SERVE_INT_FLAGS[flag] else human_readable_int(value, flag)


# --- --attention-backend auto, -ac / --attention-config JSON and its dotted form ----------------------
AUTO_BACKEND = "auto"  # vLLM 0.34.0 vllm/config/attention.py:280 validate_backend_before: "auto" -> None
# The AttentionConfig keys explain and preflight model; vLLM knows more (any other key is "not checked")
MODELLED_ATTENTION_KEYS = ("backend", "flash_attn_version", "use_trtllm_attention")
ATTENTION_CONFIG_FLAGS = ("--attention-config", "--attention_config", "-ac")
# vLLM 0.34.0 arg_utils.py:2765-2770 (create_engine_config): both spellings of the backend at once
BOTH_BACKENDS = "attention_backend and attention_config.backend are mutually exclusive"


def backend_flag(value: str | None) -> str | None:
    """--attention-backend as vLLM reads it: `auto` (any case) is vLLM's own choice, as if not given."""
    if value is not None and value.strip().lower() == AUTO_BACKEND:
        return None
    return value


def split_dotted_attention_config(args: list) -> tuple:
    """vLLM's FlexibleArgumentParser (vllm/utils/argparse_utils.py:460-487) lets `--attention-config.KEY VALUE`
    (or `=VALUE`, `-ac.KEY`) stand for a JSON object: (the other args, the merged object or None). Each
    value is JSON if it parses as JSON, else a human-readable int, else the text, as vLLM does."""
    kept: list = []
    merged: dict | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        head, dot, _ = arg.partition(".")
        if arg == "--" or not (dot and head in ATTENTION_CONFIG_FLAGS and arg.startswith("-")):
            if arg == "--":
                kept += args[i:]
                break
            kept.append(arg)
            i += 1
            continue
        name, equals, value = arg.partition("=")
        if not equals:
            if i + 1 >= len(args):
                raise UserInputError(f"{arg} needs a value (e.g. {arg} FLASHINFER)")
            value, i = args[i + 1], i + 1
        keys = name.split(".")[1:]
        if not all(keys):
            raise UserInputError(f"bad {name!r}: name a key after the dot, e.g. --attention-config.backend")
        try:
            parsed = json.loads(value)
        except ValueError:
            try:
                parsed = human_readable_int(value, name)
            except UserInputError:
                parsed = value
        merged = merged if merged is not None else {}
        node: dict = merged
        for key in keys[:-1]:  # argparse_utils.py create_nested_dict + recursive_dict_update
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        node[keys[-1]] = parsed
        i += 1
    return kept, merged


def attention_config(text: str | None, dotted: dict | None) -> dict:
    """The attention config object: -ac / --attention-config JSON (vLLM expands human-readable numbers in
    it first, arg_utils.py:300), or the dotted keys' object; with both, argparse keeps the last given
    value, which is the dotted keys' object vLLM appends (argparse_utils.py:493-496)."""
    if dotted is not None:
        return dotted
    if text is None:
        return {}
    expanded = _expand_human_readable(text)
    try:
        doc = json.loads(expanded)
    except ValueError as exc:
        reason = getattr(exc, "msg", None) or str(exc).split(";")[0][:80]  # a JSONDecodeError, or int()'s digit limit
        raise UserInputError(f"bad --attention-config {_shown(text)}: not JSON ({reason}); e.g. "
                             "-ac '{\"backend\": \"FLASHINFER\"}' or --attention-config.backend FLASHINFER") from None
    if not isinstance(doc, dict):
        raise UserInputError(f"bad --attention-config {_shown(text)}: vLLM wants a JSON object, e.g. "
                             "'{\"backend\": \"FLASHINFER\"}'")
    return doc


def _expand_human_readable(text: str) -> str:
    """arg_utils.py:300 `_expand_json_human_readable_numbers`: bare 80m / 2K outside JSON strings."""
    parts = re.split(r'("(?:[^"\\]|\\.)*")', text)
    for i in range(0, len(parts), 2):
        parts[i] = re.sub(r"\b\d+(?:\.\d+)?[kKmMgGtT]\b",
                          lambda m: str(human_readable_int(m.group(), "--attention-config")), parts[i])
    return "".join(parts)


@dataclass(frozen=True)
class AttentionFlags:
    """What explain and preflight read of vLLM's attention flags, once --attention-backend, -ac /
    --attention-config (JSON or dotted) and attnsel's own --flash-attn-version / --use-trtllm-attention
    are put together."""

    backend: str | None = None  # None: vLLM's own choice (not given, or `auto`)
    flash_attn_version: int | None = None
    use_trtllm_attention: bool | None = None
    not_checked: tuple[str, ...] = ()  # attention config keys vLLM reads and attnsel does not model

    @property
    def notes(self) -> tuple[str, ...]:
        if not self.not_checked:
            return ()
        return (f"not checked: --attention-config {', '.join(self.not_checked)}: attnsel does not model "
                f"{'this key' if len(self.not_checked) == 1 else 'these keys'}",)


def attention_flags(attention_backend: str | None, config_text: str | None, dotted: dict | None,
                    flash_attn_version: int | None = None,
                    use_trtllm_attention: bool | None = None) -> AttentionFlags:
    """The attention flags as vLLM's create_engine_config puts them together (arg_utils.py:2763-2774):
    --attention-backend (a name or `auto`) and the config's backend are exclusive even when one says
    auto (vLLM raises: exit 1); attnsel's --flash-attn-version / --use-trtllm-attention are the config's
    keys by another name, so a different value under each is two answers to one question (exit 2)."""
    doc = attention_config(config_text, dotted)
    backend = doc.get("backend")
    if backend is not None and not isinstance(backend, str):
        raise UserInputError(f"bad --attention-config backend {backend!r}: a backend name, e.g. FLASHINFER")
    backend = backend_flag(backend)
    if attention_backend is not None and backend is not None:
        raise CheckFailed(f"vLLM would raise ValueError: {BOTH_BACKENDS} (--attention-backend "
                          f"{attention_backend} and --attention-config backend {backend}): pass one of them")
    version = _one_value("flash_attn_version", doc, flash_attn_version, "--flash-attn-version",
                         lambda v: isinstance(v, int) and not isinstance(v, bool), "2, 3 or 4")
    trtllm = _one_value("use_trtllm_attention", doc, use_trtllm_attention, "--use-trtllm-attention",
                        lambda v: isinstance(v, bool), "true or false")
    unchecked = tuple(sorted(k for k in doc if k not in MODELLED_ATTENTION_KEYS))
    chosen = backend_flag(attention_backend) if attention_backend is not None else backend
    return AttentionFlags(chosen, version, trtllm, unchecked)


def _one_value(key: str, doc: dict, flag_value: Any, flag: str, valid: Callable[[Any], bool], expected: str) -> Any:
    value = doc.get(key)
    if value is not None and not valid(value):
        raise UserInputError(f"bad --attention-config {key} {value!r}: {expected}")
    if value is not None and flag_value is not None and value != flag_value:
        raise UserInputError(f"{flag} {flag_value} and --attention-config {key} {value!r} contradict each other: "
                             "pass one of them")
    return flag_value if flag_value is not None else value
