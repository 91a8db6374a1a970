"""dtype resolution as vLLM does it (docs/vllm-rules.md §6 "How the dtype value is resolved", §5g)."""

import pytest

from attnsel.attention.model import derive_model_facts, load_model_config
from attnsel.attention.model.dtype import check_dtype_supported, supported_dtypes
from attnsel.attention.rules import parse_dtype
from attnsel.errors import CheckFailed, UserInputError


def resolve(name, dtype="auto", capability=(9, 0), gpu_name="NVIDIA H100 80GB HBM3"):
    return derive_model_facts(
        load_model_config(name), capability=capability, dtype=dtype, env={}, gpu_name=gpu_name
    )


def test_supported_dtypes_by_capability():
    # §5g supported_dtypes: CC>=8.0 bf16, fp16, fp32; CC>=6.0 fp16, fp32; lower fp32
    assert supported_dtypes((9, 0)) == ("bfloat16", "float16", "float32")
    assert supported_dtypes((8, 0)) == ("bfloat16", "float16", "float32")
    assert supported_dtypes((7, 5)) == ("float16", "float32")
    assert supported_dtypes((6, 0)) == ("float16", "float32")
    assert supported_dtypes((5, 2)) == ("float32",)


# (catalog model, config dtype) → --dtype auto result per capability (§6 --dtype auto)
AUTO_TABLE = [
    # bf16 checkpoint: kept where supported, else the first supported dtype
    ("llama-3.1-8b", (9, 0), "bfloat16"),
    ("llama-3.1-8b", (8, 0), "bfloat16"),
    ("llama-3.1-8b", (7, 5), "float16"),
    ("llama-3.1-8b", (6, 1), "float16"),
    ("llama-3.1-8b", (5, 2), "float32"),
    # fp16 checkpoint: kept
    ("llava-1.5-7b", (9, 0), "float16"),
    ("llava-1.5-7b", (7, 5), "float16"),
    # float32 pooling checkpoint: becomes the preferred dtype, float16 for pooling models
    ("bert-base", (9, 0), "float16"),
    ("bert-base", (7, 5), "float16"),
    ("bert-base", (5, 2), "float32"),
    # no dtype in config.json (gpt-oss): treated as float32 → preferred
    ("gpt-oss-20b", (9, 0), "bfloat16"),
    ("gpt-oss-20b", (7, 5), "float16"),
    # gemma2/gemma3 lose float16 from the supported list (_FLOAT16_NOT_SUPPORTED_MODELS)
    ("gemma-2-9b", (9, 0), "bfloat16"),
    ("gemma-2-9b", (7, 5), "float32"),
    ("gemma-3-12b", (7, 5), "float32"),
]


@pytest.mark.parametrize("name, capability, expected", AUTO_TABLE)
def test_auto_dtype_table(name, capability, expected):
    assert resolve(name, capability=capability).dtype == expected


def test_fallback_warning_is_vllms_text():
    f = resolve("llama-3.1-8b", capability=(7, 5), gpu_name="Tesla T4")
    assert f.warnings == (
        "Your device 'Tesla T4' (with compute capability 7.5) doesn't support torch.bfloat16. "
        "Falling back to torch.float16 for compatibility.",
        "Casting torch.bfloat16 to torch.float16.",
    )
    assert "fallback" in f.dtype_source


def test_kept_dtype_has_no_warning_and_says_so():
    f = resolve("llama-3.1-8b")
    assert f.warnings == () and f.infos == ()
    assert f.dtype_source == "config torch_dtype bfloat16 kept"


def test_float32_checkpoint_is_downcast_with_vllms_info_line():
    f = resolve("bert-base")
    assert f.infos == ("Downcasting torch.float32 to torch.float16.",)
    assert f.warnings == ()


def test_missing_config_dtype_is_explained_not_logged_as_a_cast():
    f = resolve("gpt-oss-20b")
    assert f.infos == () and f.warnings == ()
    assert "safetensors" in f.dtype_source


def test_no_capability_resolves_as_cc80_and_says_so():
    f = resolve("llama-3.1-8b", capability=None)
    assert f.dtype == "bfloat16"
    assert any("CC 8.0+" in note for note in f.notes)


@pytest.mark.parametrize(
    "flag, expected",
    [
        ("half", "float16"),
        ("float16", "float16"),
        ("float", "float32"),
        ("float32", "float32"),
        ("bfloat16", "bfloat16"),
        ("BFloat16", "bfloat16"),  # vLLM lower-cases the string
        ("bf16", "bfloat16"),  # attnsel aliases
        ("fp16", "float16"),
        ("fp32", "float32"),
        ("auto", "auto"),
    ],
)
def test_explicit_dtype_strings(flag, expected):
    assert parse_dtype(flag) == expected


def test_explicit_dtype_overrides_the_config_with_vllms_cast_lines():
    up = resolve("llama-3.1-8b", dtype="float32")
    assert up.dtype == "float32" and up.infos == ("Upcasting torch.bfloat16 to torch.float32.",)
    cast = resolve("llama-3.1-8b", dtype="half")
    assert cast.dtype == "float16" and cast.warnings == ("Casting torch.bfloat16 to torch.float16.",)
    assert cast.dtype_source == "--dtype half (= float16)"


def test_unknown_dtype_suggests_valid_names():
    with pytest.raises(UserInputError, match=r"Unknown dtype: 'bfloat'\. Did you mean 'bfloat16'"):
        parse_dtype("bfloat")
    with pytest.raises(UserInputError, match="Unknown dtype: 'int8'"):
        resolve("llama-3.1-8b", dtype="int8")


@pytest.mark.parametrize("name, model_type", [("gemma-2-9b", "gemma2"), ("gemma-3-12b", "gemma3")])
@pytest.mark.parametrize("flag", ["float16", "half", "fp16"])
def test_float16_refused_for_gemma(name, model_type, flag):
    expected = (
        f"The model type '{model_type}' does not support float16. "
        "Reason: Numerical instability. Please use bfloat16 or float32 instead."
    )
    with pytest.raises(CheckFailed) as excinfo:
        resolve(name, dtype=flag)
    assert excinfo.value.message == expected


BF16_ON_T4 = (
    "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. "
    "Your Tesla T4 GPU has compute capability 7.5. "
    "You can use float16 instead by explicitly setting the `dtype` flag in CLI, "
    "for example: --dtype=half."
)


def test_bfloat16_on_old_gpu_is_vllms_error_text():
    # §5g
    assert check_dtype_supported("bfloat16", (7, 5), "Tesla T4") == BF16_ON_T4
    assert check_dtype_supported("bf16", (7, 5), "Tesla T4") == BF16_ON_T4
    assert check_dtype_supported("bfloat16", (8, 0), "NVIDIA A100") is None
    assert check_dtype_supported("float16", (7, 5), "Tesla T4") is None
    assert check_dtype_supported("bfloat16", None, None) is None


def test_explicit_bfloat16_on_t4_carries_the_error():
    f = resolve("llama-3.1-8b", dtype="bfloat16", capability=(7, 5), gpu_name="Tesla T4")
    assert f.dtype == "bfloat16"
    assert f.dtype_error == BF16_ON_T4
    # --dtype auto picks float16 there, so vLLM raises nothing
    assert resolve("llama-3.1-8b", capability=(7, 5), gpu_name="Tesla T4").dtype_error is None


def test_vision_dtype_follows_the_model_dtype():
    assert resolve("qwen2.5-vl-7b", capability=(7, 5)).vision.dtype == "float16"
