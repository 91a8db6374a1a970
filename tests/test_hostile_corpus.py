"""Bad-input corpus, part 6 (issue 33: "a corpus of at least 500 hostile scenarios over the new flags and
the serve-line mode, run in CI"). Families generated from rules, each case's expected exit code and the
piece of its one `error:` line derived from the rule of its family, never written per case:

- FLAG: each memory / parallel flag of explain and preflight x malformed spellings. Rule: a value that
  Python's int()/float() (vLLM's argparse types; human_readable_int for the token counts) cannot read,
  or a count below 1, a utilization outside (0, 1]: bad input, exit 2, the line names the flag.
- SERVE: the same values inside a pasted `vllm serve` line, as `--flag value` and `--flag=value`, plus
  values vLLM takes (exit 0). Rule as FLAG.
- VERSION: every name the versions folder answers for is taken (exit 0); each with junk around it is bad
  input (exit 2).
- QUANT: the newest release's --quantization names (its data). Rule (vLLM's start-up, attention/rules/
  quantization.py): on a bf16 checkpoint a method that reads its own file beside the checkpoint finds
  none (exit 1); a deprecated method (vLLM's DEPRECATED_QUANTIZATION_METHODS) is refused first (exit 1); on
  a GPU below the method's minimum capability it is refused (exit 1); otherwise
  vLLM starts; a spelling outside the list (upper case, spaces) is an unknown method (exit 1).
- CONFIG: memory-relevant sizes of config.json (vocab_size, intermediate_size, num_experts, ...) set to
  values transformers cannot build a model from (negative, zero, a string, a fraction, a list, an
  object, null where transformers types the key `int`): bad input, exit 2. A null num_key_value_heads
  (`int | None`: the query heads' count) is taken: exit 0.
- QCONFIG: the checkpoint's quantization_config with a method vLLM does not know: exit 1 (vLLM's
  ValueError); with a method that is not a string: bad input, exit 2.
- GEMMA3: a Gemma-3 text_config without the sizes transformers defaults: exit 0 (transformers'
  defaults for gemma3_text).

`python tests/test_hostile_corpus.py` prints the totals by class (tests/hostile.py `classify`).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hostile import CATALOG, Case, classify, invoke  # noqa: E402

from attnsel.attention.versions import select_profile  # noqa: E402
from attnsel.attention.versions.registry import available_profiles, resolved_data  # noqa: E402

TMP = "{tmp}"
LLAMA = ["--model", "llama-3.1-8b", "--gpu", "H100"]
SERVE = ["--", "vllm", "serve", "llama-3.1-8b"]
# (flag, vLLM's parser): the token counts take human_readable_int (32k, auto), the rest int / float
FLAGS = (("--max-model-len", "human"), ("--max-num-batched-tokens", "human"), ("--max-num-seqs", "int"),
         ("--gpu-memory-utilization", "float"), ("--tensor-parallel-size", "int"),
         ("--pipeline-parallel-size", "int"), ("--block-size", "int"))
MALFORMED = ("", "abc", "0x10", "1,000", "4096.5", "--", "1_2_", "0", "-5", " ", "nan", "1e3")
TAKEN = {"--max-model-len": ("4096", "8k"), "--max-num-batched-tokens": ("8192",), "--max-num-seqs": ("64",),
         "--gpu-memory-utilization": ("0.8",), "--tensor-parallel-size": ("1",), "--pipeline-parallel-size": ("1",),
         "--block-size": ("64",)}


def _bad(flag: str, parser: str, value: str) -> bool:
    """The FLAG rule: can vLLM's parser read it, and is it in range?"""
    text = value.strip()
    if parser == "human" and re.fullmatch(r"[0-9]+[kKmMgGtT]|[0-9]+\.[0-9]+[kmgt]", text):
        return False  # utils/argparse_utils.py human_readable_int: 8k = 8000, 8K = 8192, 25.6k
    try:
        number = float(text) if parser == "float" else int(text)
    except ValueError:
        return True
    if parser == "float":
        return not 0 < number <= 1
    return number < 1


def flag_cases() -> list[Case]:
    cases = []
    for cmd in ("explain", "preflight"):
        for flag, parser in FLAGS:
            for value in MALFORMED:
                if not _bad(flag, parser, value):
                    continue
                cases.append(Case(f"flag:{cmd}:{flag}={value!r}", [cmd, *LLAMA, flag, value], 2, None))
    return cases


def serve_cases() -> list[Case]:
    cases = []
    for flag, parser in FLAGS:
        for value in (*MALFORMED, *TAKEN[flag]):
            bad = _bad(flag, parser, value)
            for form in ("space", "equals"):
                words = [flag, value] if form == "space" else [f"{flag}={value}"]
                cases.append(Case(f"serve:{flag}:{form}:{value!r}", ["preflight", "--gpu", "H100", "--json", *SERVE, *words],
                                  2 if bad else 0, None))
    return cases


def version_cases() -> list[Case]:
    names = sorted({alias for name in available_profiles() for alias in resolved_data(name).get("answers_for") or ()})
    cases = [Case(f"version:{v}", ["explain", "--gpu", "H100", "--vllm-version", v], 0) for v in names]
    for v in names[::2]:
        for junk in ("{}abc", "x{}", "{};rm", "{}..", "{} 1"):
            cases.append(Case(f"version:{junk.format(v)}", ["explain", "--gpu", "H100", "--vllm-version", junk.format(v)], 2))
    return cases


def quant_cases() -> list[Case]:
    newest = max(available_profiles(), key=lambda n: tuple(resolved_data(n).get("vllm_release") or (0,)))
    rules = select_profile(newest).profile.quantization
    cases = []
    for method in rules.methods:
        reads_a_file = method in rules.config_files and method not in rules.online
        for gpu, capability in (("H100", 90), ("V100", 70)):
            below = rules.min_capability.get(method, 0) > capability
            code, fragment = (1, "is deprecated") if method in rules.deprecated else (
                (1, "Cannot find the config file") if reads_a_file else (
                    (1, "Minimum capability") if below else (0, None)))
            cases.append(Case(f"quant:{gpu}:{method}", ["explain", "--model", "llama-3.1-8b", "--gpu", gpu,
                                                        "--max-model-len", "4096", "--quantization", method],
                              code, fragment))
        for spelling in (method.upper(), f" {method}"):
            if spelling not in rules.methods:
                cases.append(Case(f"quant:spelling:{spelling!r}", ["explain", *LLAMA, "--quantization", spelling], 1,
                                  "Unknown quantization method"))
    return cases


LLAMA_SIZES = ("vocab_size", "intermediate_size", "max_position_embeddings", "hidden_size", "num_hidden_layers",
               "num_attention_heads", "num_key_value_heads")
MOE_SIZES = ("num_local_experts", "num_experts_per_tok", "intermediate_size")
QWEN_MOE_SIZES = ("num_experts", "moe_intermediate_size", "num_experts_per_tok")
QCONFIG_METHODS = (("bogus", "bogus"), ("upper", "AWQ"), ("number", 7), ("list", ["awq"]))
BAD_SIZES = (("neg", -1), ("zero", 0), ("null", None), ("string", "4096"), ("fraction", 1.5), ("list", []), ("object", {}))


def _size_code(key: str, label: str) -> int:
    # transformers types num_key_value_heads `int | None` (null: the query heads' count); the others `int`
    return 0 if (key == "num_key_value_heads" and label == "null") else 2


def config_cases() -> list[Case]:
    cases = []
    for base, keys, cmds, gpu in (("llama", LLAMA_SIZES, ("explain", "preflight"), "H100"),
                                  ("mixtral", MOE_SIZES, ("explain",), "H200"), ("qwenmoe", QWEN_MOE_SIZES, ("explain",), "H200")):
        for key in keys:
            for label, _ in BAD_SIZES:
                for cmd in cmds:
                    cases.append(Case(f"config:{cmd}:{base}:{key}={label}",
                                      [cmd, "--model", f"{TMP}/{base}-{key}-{label}.json", "--gpu", gpu,
                                       "--max-model-len", "4096"], _size_code(key, label), None))
    for label, method in QCONFIG_METHODS:
        code = 1 if isinstance(method, str) else 2  # the QCONFIG rule: vLLM's unknown method, or no name at all
        for cmd in ("explain", "preflight"):
            cases.append(Case(f"qconfig:{cmd}:{label}", [cmd, "--model", f"{TMP}/q-{label}.json", "--gpu", "H100"], code,
                              None))
    for missing in ("max_position_embeddings", "vocab_size", "both"):
        cases.append(Case(f"gemma3:text_config-without-{missing} --json",
                          ["explain", "--model", f"{TMP}/gemma3-{missing}.json", "--gpu", "H100", "--json"], 0))
    return cases


def _catalog(name: str) -> dict:
    config = json.loads((CATALOG / f"{name}.json").read_text())
    config.pop("_attnsel_source", None)
    return config


def materialize(folder: Path) -> None:
    llama = _catalog("llama-3.1-8b")
    mixtral = dict(llama, model_type="mixtral", architectures=["MixtralForCausalLM"], num_local_experts=8,
                   num_experts_per_tok=2, intermediate_size=14336)
    qwenmoe = dict(_catalog("qwen3-8b"), model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], num_experts=128,
                   num_experts_per_tok=8, moe_intermediate_size=768, decoder_sparse_step=1, mlp_only_layers=[])
    for base, config, keys in (("llama", llama, LLAMA_SIZES), ("mixtral", mixtral, MOE_SIZES),
                               ("qwenmoe", qwenmoe, QWEN_MOE_SIZES)):
        for key in keys:
            for label, value in BAD_SIZES:
                (folder / f"{base}-{key}-{label}.json").write_text(json.dumps(dict(config, **{key: value})))
    for label, method in QCONFIG_METHODS:
        config = dict(llama, quantization_config={"quant_method": method, "bits": 4, "group_size": 128})
        (folder / f"q-{label}.json").write_text(json.dumps(config))
    gemma = _catalog("gemma-3-12b")
    for missing in ("max_position_embeddings", "vocab_size", "both"):
        text = dict(gemma["text_config"])
        for key in (("max_position_embeddings", "vocab_size") if missing == "both" else (missing,)):
            text.pop(key, None)
        (folder / f"gemma3-{missing}.json").write_text(json.dumps(dict(gemma, text_config=text)))


CASES = [*flag_cases(), *serve_cases(), *version_cases(), *quant_cases(), *config_cases()]


def run_case(case: Case, folder: Path) -> str:
    args = [arg.replace(TMP, str(folder)) for arg in case.args]
    result, elapsed = invoke(args, case.env, case.stdin)
    verdict = classify(result, elapsed, case.exit_code, case.fragment)
    if verdict == "OK" and case.id.startswith("gemma3"):
        # the GEMMA3 rule: planned as transformers builds it, i.e. as the catalog's gemma-3-12b, whose
        # text_config writes out the same values as Gemma3TextConfig's defaults
        full, _ = invoke(["explain", "--model", "gemma-3-12b", *args[3:]])
        if _plan(result.stdout) is None or _plan(result.stdout) != _plan(full.stdout):
            return "silent acceptance"  # the omitted key dropped the plan or was taken as something else
    return verdict


def _plan(stdout: str):
    memory = json.loads(stdout).get("memory")
    return memory and (memory["derived_max_model_len"], memory["weights_gib"], memory["kv_cache_tokens"])


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    made = tmp_path_factory.mktemp("corpus")
    materialize(made)
    return made


def test_the_corpus_is_large_enough():
    from test_hostile_contract import CASES as CONTRACT

    assert len(CASES) + len(CONTRACT) >= 500, len(CASES) + len(CONTRACT)
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_corpus(case: Case, folder: Path):
    assert run_case(case, folder) == "OK"


if __name__ == "__main__":
    from hostile import print_totals

    print_totals(CASES, materialize, run_case, sys.argv, by_family=True)
