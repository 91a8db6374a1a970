"""The bytes of a checkpoint's weights from its *.safetensors headers alone.

A safetensors file starts with an 8-byte little-endian header length and a JSON header naming every
tensor's dtype and shape (https://github.com/huggingface/safetensors, "Format"); the weights are read
without touching the data. vLLM casts floating-point tensors to the model's dtype while loading
(model_executor/model_loader/weight_utils.py `default_weight_loader` copies into parameters of the
model dtype) and keeps integer / fp8 tensors (quantized weights, packed int4, their scales) as stored.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

from attnsel.errors import UserInputError

# bytes per element of the safetensors dtypes
STORED_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "U64": 8, "I32": 4, "U32": 4, "I16": 2,
                "U16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "F4": 0.5}
FLOATS = ("F64", "F32", "F16", "BF16")
MAX_HEADER = 100 * 2**20  # safetensors' own limit on the header


@dataclass(frozen=True)
class CheckpointBytes:
    total: float  # bytes once loaded (floats in the model dtype)
    tensors: int
    files: int


def read_header(path: Path) -> dict:
    """The JSON header of one .safetensors file (only its first 8 + N bytes are read)."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(8)
            if len(raw) != 8:
                raise UserInputError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
            (length,) = struct.unpack("<Q", raw)
            if length > MAX_HEADER:
                raise UserInputError(f"{path}: not a safetensors file (header length {length})")
            header = handle.read(length)
    except OSError as exc:
        raise UserInputError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        doc = json.loads(header.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise UserInputError(f"{path}: not a safetensors file (its header is not JSON)") from None
    if not isinstance(doc, dict):
        raise UserInputError(f"{path}: not a safetensors file (its header is not a JSON object)")
    return doc


def checkpoint_folder(model: str | None) -> str | None:
    """The folder a --model argument names, as `vllm serve` takes one; None for a config.json file (it
    stands for the model, not its checkpoint), a catalog name, a Hugging Face id or standard input."""
    if not model or model == "-":
        return None
    try:
        return str(model) if Path(model).is_dir() else None
    except OSError:
        return None


def checkpoint_bytes(folder: str | None, model_dtype_bytes: float) -> CheckpointBytes | None:
    """The weights of every *.safetensors file in `folder`; None without a folder or such files."""
    if not folder:
        return None
    root = Path(folder)
    files = sorted(root.glob("*.safetensors")) if root.is_dir() else []
    if not files:
        return None
    total, count = 0.0, 0
    for path in files:
        for name, entry in read_header(path).items():
            if name == "__metadata__" or not isinstance(entry, dict):
                continue
            dtype, shape = str(entry.get("dtype")), entry.get("shape")
            if dtype not in STORED_BYTES or not isinstance(shape, list):
                raise UserInputError(f"{path}: tensor {name!r} has an unknown dtype {dtype!r} or no shape")
            size = model_dtype_bytes if dtype in FLOATS else STORED_BYTES[dtype]
            total += math.prod(int(d) for d in shape) * size
            count += 1
    return CheckpointBytes(total, count, len(files))
