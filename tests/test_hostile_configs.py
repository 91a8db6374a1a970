"""Bad-input corpus, part 1: config.json files, `--model` sources and environment variables, as a
hostile user would give them to explain, preflight and tune. Each case asserts the exit code, one
line on stderr naming the class of the problem, no traceback and a time limit (tests/hostile.py).
Part 2 (flags, report inputs, output targets, NVML faults) is test_hostile_flags.py."""

from __future__ import annotations

import json
import os

import pytest
from hostile import CATALOG, Case, assert_promise, invoke, llama

BIG = 2**64
# (id, config changes, exit code, fragment of the one stderr line)
CONFIG_MUTATIONS = [
    ("architectures-number", {"architectures": 5}, 2, "architectures must be a list of names"),
    ("architectures-ints", {"architectures": [1, 2]}, 2, "architectures must be a list of names"),
    ("architectures-string", {"architectures": "LlamaForCausalLM"}, 2, "architectures must be a list"),
    ("architectures-object", {"architectures": {"a": 1}}, 2, "architectures must be a list"),
    ("model_type-list", {"model_type": ["llama"]}, 2, "model_type must be a name"),
    ("model_type-number", {"model_type": 5}, 2, "model_type must be a name"),
    ("model_type-object", {"model_type": {"x": 1}}, 2, "model_type must be a name"),
    ("model_type-missing", {"model_type": ...}, 2, "no \"model_type\""),
    ("model_type-empty", {"model_type": ""}, 2, "no \"model_type\""),
    ("model_type-unknown", {"model_type": "llamaa"}, 2, "Unknown model type 'llamaa'"),
    ("text_config-number", {"text_config": 5}, 2, "text_config must be an object"),
    ("text_config-list", {"text_config": [1]}, 2, "text_config must be an object"),
    ("text_config-model_type-list", {"text_config": {"model_type": ["x"]}}, 2, "text_config.model_type must be a name"),
    ("text_config-model_type-object", {"text_config": {"model_type": {"a": 1}}}, 2, "text_config.model_type"),
    ("text_config-hidden-string", {"text_config": {"model_type": "llama", "hidden_size": "4096"}}, 2,
     "text_config.hidden_size"),
    ("vision_config-number", {"vision_config": 5}, 2, "vision_config must be an object"),
    ("vision_config-hidden-string", {"vision_config": {"hidden_size": "x"}}, 2, "vision_config.hidden_size"),
    ("vision_config-no-heads", {"vision_config": {"hidden_size": 1024}}, 2, "vision encoder's heads"),
    ("vision_config-heads-not-dividing", {"vision_config": {"hidden_size": 1000, "num_attention_heads": 16}}, 2,
     "vision head size"),
    ("hidden-string", {"hidden_size": "4096"}, 2, "Impossible hidden_size '4096'"),
    ("hidden-float", {"hidden_size": 4096.0}, 2, "Impossible hidden_size 4096.0"),
    ("hidden-bool", {"hidden_size": True}, 2, "Impossible hidden_size True"),
    ("hidden-negative", {"hidden_size": -1}, 2, "Impossible hidden_size -1"),
    ("hidden-zero", {"hidden_size": 0}, 2, "Impossible hidden_size 0"),
    ("hidden-2^64", {"hidden_size": BIG}, 2, "larger than any model"),
    ("hidden-null", {"hidden_size": None}, 2, "hidden_size is null"),
    ("hidden-list", {"hidden_size": [4096]}, 2, "Impossible hidden_size"),
    ("hidden-not-divisible", {"hidden_size": 4097}, 2, "not divisible by num_attention_heads"),
    ("heads-null", {"num_attention_heads": None}, 2, "num_attention_heads is null"),
    ("heads-zero", {"num_attention_heads": 0}, 2, "Impossible num_attention_heads 0"),
    ("heads-missing", {"num_attention_heads": ...}, 0, None),  # transformers' LlamaConfig default (32)
    ("heads-2^64", {"num_attention_heads": BIG}, 2, "larger than any model"),
    ("heads-string", {"num_attention_heads": "32"}, 2, "Impossible num_attention_heads"),
    ("kv-heads-7-of-32", {"num_key_value_heads": 7}, 2, "num_heads (32) is not divisible by num_kv_heads (7)"),
    ("kv-heads-64-of-32", {"num_key_value_heads": 64}, 2, "num_heads (32) is not divisible by num_kv_heads (64)"),
    ("kv-heads-zero", {"num_key_value_heads": 0}, 2, "Impossible num_key_value_heads 0"),
    ("kv-heads-negative", {"num_key_value_heads": -8}, 2, "Impossible num_key_value_heads -8"),
    ("kv-heads-string", {"num_key_value_heads": "8"}, 2, "Impossible num_key_value_heads '8'"),
    ("kv-heads-float", {"num_key_value_heads": 8.5}, 2, "Impossible num_key_value_heads 8.5"),
    ("head_dim-zero", {"head_dim": 0}, 2, "Impossible head_dim 0"),
    ("head_dim-fraction", {"head_dim": 1.5}, 2, "Impossible head_dim 1.5"),
    ("head_dim-2^70", {"head_dim": 2**70}, 2, "larger than any model"),
    ("head_dim-object", {"head_dim": {"a": 1}}, 2, "Impossible head_dim"),
    ("torch_dtype-empty", {"torch_dtype": ""}, 2, "names no torch dtype"),
    ("torch_dtype-unknown", {"torch_dtype": "int33"}, 2, "names no torch dtype"),
    ("torch_dtype-number", {"torch_dtype": 5}, 2, "must be a dtype name"),
    ("torch_dtype-list", {"torch_dtype": ["bfloat16"]}, 2, "must be a dtype name"),
    ("dtype-bogus", {"dtype": "bfloat17"}, 2, "names no torch dtype"),
    ("quantization-number", {"quantization_config": 5}, 2, "quantization_config must be an object"),
    ("kv_cache_scheme-number", {"quantization_config": {"kv_cache_scheme": 5}}, 2, "kv_cache_scheme must be"),
    ("layer_types-number", {"layer_types": 5}, 2, "layer_types must be a list"),
    ("layer_types-ints", {"layer_types": [1, 2]}, 2, "layer_types must be a list"),
    ("is_mm_prefix_lm-string", {"is_mm_prefix_lm": "yes"}, 2, "is_mm_prefix_lm must be true or false"),
    ("is_causal-number", {"is_causal": 0}, 2, "is_causal must be true or false"),
    ("use_sliding_window-string", {"use_sliding_window": "no"}, 2, "use_sliding_window must be true or false"),
    ("rope_scaling-number", {"rope_scaling": 5}, 2, "rope_scaling must be an object"),
    ("layers-string", {"num_hidden_layers": "32"}, 2, "Impossible num_hidden_layers"),
]
DEEPSEEK_MUTATIONS = [
    ("mla-kv_lora_rank-string", {"kv_lora_rank": "512"}, 2, "Impossible kv_lora_rank"),
    ("mla-kv_lora_rank-zero", {"kv_lora_rank": 0}, 2, "Impossible kv_lora_rank 0"),
    ("mla-rope-negative", {"qk_rope_head_dim": -64}, 2, "Impossible qk_rope_head_dim -64"),
    ("mla-nope-float", {"qk_nope_head_dim": 128.0}, 2, "Impossible qk_nope_head_dim"),
    ("mla-index_topk-zero", {"index_topk": 0}, 2, "Impossible index_topk 0"),
]
RAW_FILES = [  # (id, exact file content, fragment)
    ("empty", "", "is empty"),
    ("whitespace", "   \n\t\n", "is empty"),
    ("invalid-json", '{"model_type": "llama",', "Invalid JSON"),
    ("array", "[1, 2]", "not a JSON object (found an array)"),
    ("string", '"llama"', "not a JSON object (found a string)"),
    ("null", "null", "not a JSON object (found null)"),
    ("nested-100000-lists", "[" * 100_000 + "]" * 100_000, "nests JSON deeper than it can be read"),
    ("nested-100000-objects", '{"a":' * 100_000 + "1" + "}" * 100_000, "nests JSON deeper than it can be read"),
    ("nested-200-objects", '{"model_type": "llama", "x": ' + '{"a":' * 200 + "1" + "}" * 200 + "}",
     "more than 64 levels deep"),
    ("int-5000-digits", '{"model_type": "llama", "hidden_size": ' + "9" * 5000 + "}", "JSON cannot read here"),
    ("nan", '{"model_type": "llama", "hidden_size": NaN, "num_attention_heads": 32}', "Impossible hidden_size nan"),
    ("infinity", '{"model_type": "llama", "hidden_size": Infinity, "num_attention_heads": 32}',
     "Impossible hidden_size inf"),
]


def _file_cases(tmp_path) -> list[Case]:
    cases = []
    for name, changes, code, fragment in CONFIG_MUTATIONS:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(llama(**changes)))
        cases.append(Case(f"config:{name}", ["explain", "--model", str(path), "--gpu", "H100"], code, fragment))
    deepseek = json.loads((CATALOG / "deepseek-v3.2.json").read_text())
    for name, changes, code, fragment in DEEPSEEK_MUTATIONS:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps({**deepseek, **changes}))
        cases.append(Case(f"config:{name}", ["explain", "--model", str(path), "--gpu", "B200"], code, fragment))
    for name, text, fragment in RAW_FILES:
        path = tmp_path / f"raw-{name}.json"
        path.write_text(text)
        cases.append(Case(f"raw:{name}", ["explain", "--model", str(path), "--gpu", "H100"], 2, fragment))
    binary = tmp_path / "model.safetensors"
    binary.write_bytes(b"\xff\xfe\x00\x81binary")
    cases.append(Case("raw:binary", ["explain", "--model", str(binary), "--gpu", "H100"], 2, "not a UTF-8 text file"))
    huge = tmp_path / "huge.json"
    huge.write_bytes(b'{"model_type": "llama", "pad": "' + b"x" * (17 * 2**20) + b'"}')
    cases.append(Case("raw:17MiB", ["explain", "--model", str(huge), "--gpu", "H100"], 2, "larger than 16 MiB"))
    # the same classes through preflight (target machine) and tune --dry-run
    for name in ("architectures-number", "kv-heads-7-of-32", "hidden-2^64", "torch_dtype-empty", "heads-null",
                 "text_config-model_type-list"):
        path = str(tmp_path / f"{name}.json")
        cases.append(Case(f"preflight:{name}", ["preflight", "--model", path, "--gpu", "H100"], 2))
        cases.append(Case(f"tune:{name}", ["tune", "--dry-run", "--gpu", "H100", "--model", path], 2))
    for name in ("nested-100000-lists", "int-5000-digits"):
        path = str(tmp_path / f"raw-{name}.json")
        cases.append(Case(f"preflight:raw-{name}", ["preflight", "--model", path, "--gpu", "H100"], 2))
    return cases


def _source_cases(tmp_path) -> list[Case]:
    no_config = tmp_path / "empty-folder"
    no_config.mkdir()
    fifo = tmp_path / "nobody-writes"
    os.mkfifo(fifo)
    offline = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home")}
    explain = ["explain", "--gpu", "H100", "--model"]
    return [
        Case("model:name-too-long", [*explain, "x" * 5000], 2, "longer than the file system allows"),
        Case("model:path-too-long", [*explain, "a/" * 3000 + "config.json"], 2, "longer than the file system allows"),
        Case("model:nul-byte", [*explain, "bad\0path"], 2, "NUL byte"),
        Case("model:missing-path", [*explain, "/nowhere/config.json"], 2, "Model config not found"),
        Case("model:missing-relative-json", [*explain, "cfg.json"], 2, "Model config not found"),
        Case("model:catalog-typo", [*explain, "llama-3.1-8"], 2, "Did you mean 'llama-3.1-8b'"),
        Case("model:folder-without-config", [*explain, str(no_config)], 2, "directory without config.json"),
        Case("model:root-folder", [*explain, "/"], 2, "directory without config.json"),
        Case("model:dev-null", [*explain, "/dev/null"], 2, "character device"),
        Case("model:dev-zero", [*explain, "/dev/zero"], 2, "character device"),
        Case("model:fifo-nobody-writes", [*explain, str(fifo)], 2, "is empty"),
        Case("model:empty", [*explain, ""], 2, "--model is empty"),
        Case("model:url-hf", [*explain, "https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct"], 2,
             "--model meta-llama/Llama-3.1-8B-Instruct"),
        Case("model:url-hf-file", [*explain, "https://huggingface.co/Qwen/Qwen3-8B/resolve/main/config.json"], 2,
             "--model Qwen/Qwen3-8B"),
        Case("model:url-other", [*explain, "http://example.com/config.json"], 2, "attnsel reads no URLs"),
        Case("model:hf-id-offline-not-cached", [*explain, "meta-llama/Llama-3.1-8B-Instruct"], 2,
             "not in the local Hugging Face cache", env=offline),
        Case("model:hf-id-bad-chars", [*explain, "meta llama/Llama 3"], 2, "Model config not found"),
        Case("model:stdin-empty", [*explain, "-"], 2, "standard input is empty", stdin=""),
        Case("model:stdin-garbage", [*explain, "-"], 2, "Invalid JSON in standard input", stdin="{garbage"),
        Case("model:stdin-array", [*explain, "-"], 2, "not a JSON object", stdin="[]"),
        Case("model:stdin-bad-type", [*explain, "-"], 2, "model_type must be a name", stdin='{"model_type": 5}'),
        Case("model:preflight-url", ["preflight", "--gpu", "H100", "--model", "https://hf.co/org/name"], 2, "org/name"),
        Case("model:tune-fifo", ["tune", "--dry-run", "--gpu", "H100", "--model", str(fifo)], 2, "is empty"),
    ]


def _env_cases(tmp_path) -> list[Case]:
    not_json = tmp_path / "scenario.txt"
    not_json.write_text("not json")
    wrong_schema = tmp_path / "wrong-schema.json"
    wrong_schema.write_text('{"schema": "other/1", "calls": {}}')
    deep = tmp_path / "deep-scenario.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    cases = []
    for name, value, fragment in [("missing", "/nowhere/scenario.json", "scenario file not found"),
                                  ("folder", str(tmp_path), "is a folder"), ("device", "/dev/zero", "character device"),
                                  ("not-json", str(not_json), "Invalid JSON"),
                                  ("wrong-schema", str(wrong_schema), "is not an attnsel-nvml-scenario/1 file"),
                                  ("deep", str(deep), "deeper than it can be read"),
                                  ("name-too-long", "s" * 5000, "longer than the file system allows")]:
        env = {"ATTNSEL_NVML_SCENARIO": value}
        cases.append(Case(f"env:scenario-{name}:probe", ["probe"], 2, fragment, env=env))
        cases.append(Case(f"env:scenario-{name}:preflight", ["preflight", "--model", "llama-3.1-8b"], 2, fragment, env=env))
    for value in ("abc", "9" * 5000, "1.0"):
        cases.append(Case(f"env:VLLM_MLA_DISABLE={value[:8]}", ["explain", "--gpu", "B200", "--model", "deepseek-v3"], 2,
                          "VLLM_MLA_DISABLE must be an integer", env={"VLLM_MLA_DISABLE": value}))
    for value in ("0," * 50_000, "GPU-", "MIG-", "-1", "GPU-zz,0", "1,0,1", "9" * 5000, "-" + "9" * 5000,
                  "MIG-GPU-x/" + "9" * 5000 + "/0"):
        cases.append(Case(f"env:CUDA_VISIBLE_DEVICES={value[:8]}", ["probe", "--json"], 0,
                          env={"CUDA_VISIBLE_DEVICES": value}))
    for name, value in (("COLUMNS", "-5"), ("COLUMNS", "abc"), ("COLUMNS", "0"), ("CUDA_DEVICE_ORDER", "NONSENSE"),
                        ("COLUMNS", "9" * 5000), ("LINES", "9" * 5000)):
        cases.append(Case(f"env:{name}={value[:8]}", ["explain", "--gpu", "H100"], 0, env={name: value}))
        cases.append(Case(f"env:{name}={value[:8]}:help", ["tune", "--help"], 0, env={name: value}))
    return cases


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Case]:
    tmp_path = tmp_path_factory.mktemp("hostile")
    cases = _file_cases(tmp_path) + _source_cases(tmp_path) + _env_cases(tmp_path)
    return {case.id: case for case in cases}


CASE_IDS = (
    [f"config:{c[0]}" for c in CONFIG_MUTATIONS] + [f"config:{c[0]}" for c in DEEPSEEK_MUTATIONS]
    + [f"raw:{c[0]}" for c in RAW_FILES] + ["raw:binary", "raw:17MiB"]
    + [f"{cmd}:{n}" for n in ("architectures-number", "kv-heads-7-of-32", "hidden-2^64", "torch_dtype-empty",
                              "heads-null", "text_config-model_type-list") for cmd in ("preflight", "tune")]
    + ["preflight:raw-nested-100000-lists", "preflight:raw-int-5000-digits"]
)


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_bad_config_files(corpus, case_id):
    case = corpus[case_id]
    result, elapsed = invoke(case.args, case.env, case.stdin)
    assert_promise(result, elapsed, case.exit_code, case.fragment)


SOURCE_IDS = ["model:name-too-long", "model:path-too-long", "model:nul-byte", "model:missing-path",
              "model:missing-relative-json", "model:catalog-typo", "model:folder-without-config", "model:root-folder",
              "model:dev-null", "model:dev-zero", "model:fifo-nobody-writes", "model:empty", "model:url-hf",
              "model:url-hf-file", "model:url-other", "model:hf-id-offline-not-cached", "model:hf-id-bad-chars",
              "model:stdin-empty", "model:stdin-garbage", "model:stdin-array", "model:stdin-bad-type",
              "model:preflight-url", "model:tune-fifo"]


@pytest.mark.parametrize("case_id", SOURCE_IDS)
def test_bad_model_sources(corpus, case_id):
    case = corpus[case_id]
    result, elapsed = invoke(case.args, case.env, case.stdin)
    assert_promise(result, elapsed, case.exit_code, case.fragment)


def test_bad_environment_variables(corpus):
    env_cases = [case for case in corpus.values() if case.id.startswith("env:")]
    for case in env_cases:
        result, elapsed = invoke(case.args, case.env, case.stdin)
        try:
            assert_promise(result, elapsed, case.exit_code, case.fragment)
        except AssertionError as exc:
            raise AssertionError(f"{case.id}: {exc}") from None


# transformers fills an empty (or null) text_config / vision_config of a composite config from the
# defaults of the type it builds it as (LlavaConfig: LlamaConfig, CLIPVisionConfig; Gemma3Config:
# Gemma3TextConfig, SiglipVisionConfig); vLLM serves that model. (bundled model, changes, head size,
# vision head size)
EMPTY_SUB_CONFIGS = [
    ("llava-1.5-7b", {"text_config": {}}, 128, 64),
    ("llava-1.5-7b", {"text_config": None}, 128, 64),
    ("llava-1.5-7b", {"vision_config": {}}, 128, 64),  # CLIPVisionConfig(): 768 / 12 heads
    ("llava-1.5-7b", {"text_config": {}, "vision_config": {}}, 128, 64),
    ("gemma-3-12b", {"text_config": {}}, 256, 72),  # Gemma3TextConfig(): head_dim 256
    ("gemma-3-12b", {"text_config": None}, 256, 72),
    ("gemma-3-12b", {"vision_config": {}}, 256, 64),  # SiglipVisionConfig(): 768 / 12 heads
    ("gemma-3-12b", {"vision_config": None}, 256, 64),
]


@pytest.mark.parametrize("model,changes,head_size,vision_head_size", EMPTY_SUB_CONFIGS)
def test_an_empty_sub_config_is_filled_with_transformers_defaults(tmp_path, model, changes, head_size,
                                                                   vision_head_size):
    config = {**json.loads((CATALOG / f"{model}.json").read_text()), **changes}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result, elapsed = invoke(["explain", "--json", "--gpu", "H100", "--model", str(path)])
    assert_promise(result, elapsed, 0)
    answer = json.loads(result.stdout)
    assert answer["inputs"]["head_size"] == head_size
    assert f"head_size {vision_head_size}," in " ".join(answer["model"]["notes"])
