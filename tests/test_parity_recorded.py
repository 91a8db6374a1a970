"""Parity with vLLM's OWN selector, replayed on CPU without vLLM.

tests/fixtures/parity/parity_*.json hold answers that a real vLLM release from PyPI gave in
bench/tools/parity_live.py (each file names the release and the rule profile it checks; adding a
release's recording adds its cases here): the priority list
of `CudaPlatformBase.get_valid_backends` for the target capability, every backend's
`validate_configuration` reasons, the explicit `--attention-backend`'s reasons, the selected backend
and (0.33) `get_preferred_block_size(16)`. Each recorded case is run through attnsel's rule profile
and must give exactly vLLM's answer -- through the library (`explain`) and, where the case's inputs
are all `attnsel explain` flags, through `explain --json`. With no recording the file fails at
collection. (How large and clean each sweep was is evidence: `python -m attnsel.bench.tools.evidence`.)
"""

import json

import pytest
from recordings import recorded_glob
from typer.testing import CliRunner

from attnsel.attention.rules import SelectionContext, SelectorInputs
from attnsel.attention.selector import explain
from attnsel.attention.versions import get_profile
from attnsel.cli.app import app

RECORDS = {path.stem.removeprefix("parity_"): json.loads(path.read_text())
           for path in recorded_glob("parity", "parity_*.json")}
PROFILES = {record: doc["profile"] for record, doc in RECORDS.items()}


def _cases(name):
    doc = RECORDS[name]
    return [pytest.param(name, case, id=f"{name}-{i}") for i, case in enumerate(doc["cases"])]


def _inputs_and_context(case):
    ctx_kw = dict(case["context"])
    ctx_kw["capability"] = tuple(ctx_kw["capability"])
    return SelectorInputs(**case["inputs"]), SelectionContext(**ctx_kw)


def test_every_release_profile_has_its_recordings():
    """The recording gate: a release added to attention/versions (its data file) is not done until
    what its wheel says is recorded (attention/versions/README.md, "Adding the next vLLM release"):
    vLLM's own selector (parity_live), its engine's arguments and log lines (engine_cpu_check, from
    0.26: 0.24 is checked from its source), its memory facts (memory_facts). The tests that replay each
    recording run for the releases that have one; this is where a missing one fails."""
    from recordings import FIXTURES

    from attnsel.attention.versions import release_profiles, resolved_data

    memory = json.loads((FIXTURES / "memory" / "wheel_facts.json").read_text())
    missing = []
    for name in release_profiles():
        release = tuple(resolved_data(name)["vllm_release"])
        version = ".".join(map(str, release))
        if name not in PROFILES.values():
            missing.append(f"{name}: parity_live --vllm-version {version} --record (tests/fixtures/parity/)")
        if release >= (0, 26, 0) and not (FIXTURES / "verify_engine" / f"{name}.json").exists():
            missing.append(f"{name}: engine_cpu_check --record (tests/fixtures/verify_engine/{name}.json)")
        if f"{release[0]}.{release[1]}.0" not in memory:
            missing.append(f"{name}: memory_facts {version} --record (tests/fixtures/memory/wheel_facts.json)")
    assert missing == []


@pytest.mark.parametrize("record", sorted(RECORDS))
def test_each_profile_states_the_sweep_that_verified_it(record):
    doc = RECORDS[record]
    profile = get_profile(PROFILES[record])
    # the recording comes from the release the profile answers for (a profile of unreleased code,
    # the seed, names the release it was checked against instead)
    release = doc["vllm_version"].split("+")[0]
    assert release in profile.data["answers_for"] or (
        not profile.is_release and f"vLLM {release} " in profile.data["verified"]["against"])
    # the profile's `verified` block (what `explain` cites) states this sweep
    verified = profile.data.get("verified", {})
    if "seed" in verified:
        assert (verified["cases"], verified["mismatches"], verified["seed"]) == (
            doc["cases_compared"], doc["mismatching_cases"], doc["seed"])
        assert verified["wheel_commit"] == doc["vllm_commit"]


@pytest.mark.parametrize("record,case", [param for record in sorted(RECORDS) for param in _cases(record)])
def test_profile_gives_vllms_recorded_answer(record, case):
    profile = get_profile(PROFILES[record])
    inputs, ctx = _inputs_and_context(case)
    ours = explain(profile, inputs, ctx)
    vllm = case["vllm"]
    assert [[b.name, b.priority, list(b.reasons)] for b in ours.backends] == vllm["backends"]
    if vllm["explicit_backend"] is not None:
        assert [ours.explicit_backend.name, list(ours.explicit_backend.reasons)] == vllm["explicit_backend"]
    assert ours.selected == vllm["selected"]
    if vllm["selected"] is not None and vllm["block_size"] is not None:
        assert ours.block_size == vllm["block_size"]
    # the AttentionSelectorConfig text vLLM puts in "No valid attention backend found ... with {cfg}"
    assert profile.block_size_flow.layer_inputs(inputs).vllm_repr(profile) == vllm["config_repr"]


# context fields `attnsel explain` has a flag for (others: library only)
_CLI_CONTEXT = {
    "capability", "user_backend", "num_heads", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
    "has_index_topk", "flash_attn_version_override", "use_trtllm_attention", "batch_invariant",
    "has_flashinfer_cubin", "decode_context_parallel_size", "prefill_context_parallel_size",
}
_CLI_INPUTS = {
    "head_size", "dtype", "kv_cache_dtype", "block_size", "use_mla", "has_sink", "use_sparse", "use_mm_prefix",
    "attn_type", "has_sliding_window", "use_non_causal", "use_kv_connector", "use_per_head_quant_scales",
    "use_batch_invariant", "use_dcp", "use_pcp",
}


def _cli_args(record, case):
    inputs, ctx = case["inputs"], case["context"]
    if set(ctx) - _CLI_CONTEXT or {k for k, v in inputs.items() if v} - _CLI_INPUTS:
        return None
    if ctx.get("has_index_topk") is False or ctx.get("index_topk") not in (None, 2048):
        return None
    choices = get_profile(PROFILES[record]).block_sizes
    if inputs.get("block_size") is not None and choices and inputs["block_size"] not in choices:
        return None  # the CLI stops first at vLLM's argparse choices (BlockSize), which the recorded calls skip
    major, minor = ctx["capability"]
    args = ["explain", "--json", "--vllm-version", PROFILES[record], "--capability", f"{major}.{minor}",
            "--head-size", str(inputs["head_size"]), "--dtype", inputs["dtype"],
            "--kv-cache-dtype", inputs["kv_cache_dtype"], "--attn-type", inputs.get("attn_type", "decoder")]
    if inputs.get("block_size") is not None:
        args += ["--block-size", str(inputs["block_size"])]
    for key, flag in (("use_mla", "--use-mla"), ("has_sink", "--has-sink"), ("use_sparse", "--use-sparse"),
                      ("use_mm_prefix", "--use-mm-prefix"), ("has_sliding_window", "--sliding-window"),
                      ("use_non_causal", "--non-causal"), ("use_kv_connector", "--kv-connector"),
                      ("use_per_head_quant_scales", "--per-head-quant-scales")):
        if inputs.get(key):
            args.append(flag)
    args.append("--index-topk" if ctx.get("has_index_topk") else "--no-index-topk")
    for key, flag in (("user_backend", "--attention-backend"), ("num_heads", "--num-heads"),
                      ("qk_nope_head_dim", "--qk-nope-head-dim"), ("qk_rope_head_dim", "--qk-rope-head-dim"),
                      ("v_head_dim", "--v-head-dim"), ("flash_attn_version_override", "--flash-attn-version"),
                      ("decode_context_parallel_size", "--dcp"), ("prefill_context_parallel_size", "--pcp")):
        if ctx.get(key) is not None:
            args += [flag, str(ctx[key])]
    if ctx.get("use_trtllm_attention") is not None:
        args.append("--use-trtllm-attention" if ctx["use_trtllm_attention"] else "--no-use-trtllm-attention")
    if ctx.get("batch_invariant"):
        args.append("--batch-invariant")
    if ctx.get("has_flashinfer_cubin") is False:
        args.append("--no-flashinfer-cubin")
    return args


def _cli_cases():
    params = []
    for record in sorted(RECORDS):
        for i, case in enumerate(RECORDS[record]["cases"]):
            args = _cli_args(record, case)
            if args is not None:
                params.append(pytest.param(record, case, args, id=f"{record}-{i}"))
    return params[::3]  # a third of them keeps the CLI part fast


@pytest.mark.parametrize("record,case,args", _cli_cases())
def test_explain_json_gives_vllms_recorded_answer(record, case, args):
    result = CliRunner().invoke(app, args)
    assert result.exit_code in (0, 1), result.output
    doc = json.loads(result.stdout)
    vllm = case["vllm"]
    assert [[b["name"], b["priority"], b["reasons"]] for b in doc["backends"]] == vllm["backends"]
    assert doc["selected"] == vllm["selected"]
    if vllm["explicit_backend"] is not None:
        assert [doc["explicit_backend"]["name"], doc["explicit_backend"]["reasons"]] == vllm["explicit_backend"]


@pytest.mark.parametrize("record", sorted(RECORDS))
def test_vit_backend_is_vllms_recorded_choice(record):
    # CudaPlatformBase.get_vit_attn_backend(head_size, dtype) without an override (docs/vllm-rules.md §8,
    # §9 ViT), recorded for every capability x dtype x head size
    from attnsel.attention.selector import vit_backend

    profile = get_profile(PROFILES[record])
    vit = RECORDS[record]["vit"]
    for key, row in vit["answers"].items():
        capability, dtype = key.split("/")
        cc = tuple(int(part) for part in capability.split("."))
        ours = [vit_backend(profile, head, dtype, cc).backend for head in vit["heads"]]
        assert ours == row, key
