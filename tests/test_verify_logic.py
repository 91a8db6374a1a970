"""`attnsel verify`'s decisions without any engine: candidate choice, refusals, shapes, memory,
how decode is timed from an engine's calls, the noise rule and the verdict words."""

import ast
import doctest
import json
from pathlib import Path

import pytest

from attnsel.attention import versions
from attnsel.attention.model import attention_layer_count
from attnsel.attention.model import config as MC
from attnsel.attention.model import kind as model_kind
from attnsel.attention.selector import cudagraph as CG
from attnsel.bench.verify import compare as EC
from attnsel.bench.verify import engine_log, engine_worker
from attnsel.bench.verify import plan as VP
from attnsel.bench.verify import verdict as VV
from attnsel.errors import UserInputError

ROOT = Path(__file__).parent
H200_TUNE = ROOT / "fixtures" / "tune" / "h200_llama8b_default" / "tune.json"


@pytest.fixture(scope="module")
def h200_tune():
    return json.loads(H200_TUNE.read_text())


@pytest.mark.parametrize("module", [engine_log, engine_worker, EC, VP, model_kind, CG])
def test_docstring_examples_run(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


# --- candidates ------------------------------------------------------------------------------


def test_candidates_from_a_real_tune_result_are_default_pick_and_a_runner_up_of_another_backend(h200_tune):
    cands = VP.choose_candidates(h200_tune["recommendation"], ("FLASH_ATTN", 16))
    assert [c.roles for c in cands] == [["vllm-default"], ["tune-pick"], ["runner-up"]]
    default, pick, runner_up = cands
    # the default runs without flags: vLLM chooses, and what it chose is read back
    assert (default.backend, default.block_size, default.flags) == (None, None, "")
    assert default.config == ("FLASH_ATTN", 16)
    assert pick.config == ("FLASHINFER", 64) and pick.flags == "--attention-backend FLASHINFER --block-size 64"
    # FLASHINFER 32/256/128/16 rank 2-5 but tie with the pick: the runner-up is another backend
    assert runner_up.config == ("FLASH_ATTN", 128)


def test_a_fastest_pair_tune_did_not_advise_runs_under_its_own_name_and_is_judged_as_a_kept_default():
    # H100 Qwen3-0.6B: FLASH_ATTN/128 ranked first at +0.6%, within noise: tune advised no flags
    tune = json.loads((ROOT / "fixtures" / "verify" / "h100_qwen06" / "tune.json").read_text())
    cands = VP.choose_candidates(tune["recommendation"], ("FLASH_ATTN", 16))
    assert [c.roles for c in cands] == [["vllm-default"], ["tune-fastest"], ["runner-up"]]
    assert cands[1].name == "FLASH_ATTN --block-size 128 (tune's fastest, not advised)"
    doc = _keep_default_doc([shape(17.3, 5.6)])
    doc["candidates"][1]["roles"] = ["tune-fastest"]
    v = _verdict(doc)
    assert v["verdict"] == "holds" and v["flags"] == "" and v["compared"] == "FLASHINFER/64 pick"


def test_a_pick_equal_to_the_default_is_one_engine_and_the_runner_up_is_compared():
    rec = {"overall": {"ranking": [{"backend": "FLASH_ATTN", "block_size": 16}, {"backend": "FLASH_ATTN", "block_size": 32},
                                   {"backend": "TRITON_ATTN", "block_size": 64}]}}
    cands = VP.choose_candidates(rec, ("FLASH_ATTN", 16))
    assert [c.roles for c in cands] == [["vllm-default", "tune-pick"], ["runner-up"]]
    assert cands[1].config == ("TRITON_ATTN", 64)


def test_named_candidates_replace_tune_s_and_the_default_is_always_there(h200_tune):
    cands = VP.choose_candidates(h200_tune["recommendation"], ("FLASH_ATTN", 16),
                                 VP.parse_candidates("TRITON_ATTN:64,flash_attn:16"))
    assert [(c.roles, c.config) for c in cands] == [(["vllm-default", "named"], ("FLASH_ATTN", 16)),
                                                    (["named"], ("TRITON_ATTN", 64))]


@pytest.mark.parametrize("text", ["FLASH_ATTN", "FLASH_ATTN:0", "FLASH_ATTN:x", "NOPE:16", ","])
def test_bad_candidates_are_bad_input(text):
    with pytest.raises(UserInputError):
        VP.parse_candidates(text)


@pytest.mark.parametrize("text", ["64*4096", "0x16", "x16", "16x", ","])
def test_bad_shapes_are_bad_input(text):
    with pytest.raises(UserInputError):
        VP.parse_shapes(text)


def test_a_pair_vllm_refuses_keeps_explain_s_reason(h200_tune):
    cands = VP.choose_candidates(None, ("FLASH_ATTN", 16), [("FLEX_ATTENTION", 8), ("TRITON_ATTN", 64)])
    VP.check_refusals(cands, VP.shape_from_document(h200_tune["plan"]), (9, 0), vllm_version="0.33.0")
    assert cands[0].reasons == [] and cands[2].reasons == []
    assert cands[1].reasons == ["block_size not supported"]


# --- shapes, memory, estimates ---------------------------------------------------------------


def test_default_shapes_are_the_preferred_ones_tune_timed(h200_tune):
    assert VP.default_shapes(VP.decode_shapes_of(h200_tune["plan"]), 131072) == [(1, 16384), (64, 4096)]


def test_default_shapes_follow_tune_s_grid_and_the_model_s_length():
    timed = [(1, 4096), (16, 4096), (64, 32768), (4, 32768), (1, 32768)]
    assert VP.default_shapes(timed, 40960) == [(1, 32768), (4, 32768)]
    assert VP.default_shapes(timed, 8192) == [(1, 4096), (16, 4096)]  # 32k does not fit a 8k model
    assert VP.default_shapes([], 2048) == [(1, 1024)]


def test_max_model_len_leaves_room_for_the_generated_tokens_within_the_model():
    assert VP.max_model_len_for([(64, 4096)], 128, 131072) == 4608
    assert VP.max_model_len_for([(1, 32768)], 128, 40960) == 33024
    assert VP.max_model_len_for([(1, 40960)], 128, 40960) == 40960


@pytest.mark.parametrize("release", ["0.17", "0.24", "0.33"])
def test_graphs_are_captured_only_for_the_sizes_the_verified_decode_batches_replay(release):
    # A default deployment pads a decode batch to the next of its ~51 capture sizes; verify captures
    # just those padded sizes, so each timed step replays the same graph (docs/verify.md, "Speed").
    facts = versions.get_profile(release).cudagraph
    overrides = VP.graph_overrides(facts, [(1, 32768), (3, 16384), (64, 4096), (100, 2048), (2048, 1024)])
    assert overrides == {"compilation_config": {"cudagraph_capture_sizes": [1, 4, 64, 104]}}
    kwargs = engine_worker.engine_kwargs({"model_dir": "m", "engine_overrides": overrides})
    assert kwargs["compilation_config"] == {"cudagraph_capture_sizes": [1, 4, 64, 104]}


def test_batches_beyond_every_graph_keep_vllms_default_capture_list():
    assert VP.graph_overrides(versions.get_profile("0.24").cudagraph, [(1024, 2048)]) == {}
    assert "compilation_config" not in engine_worker.engine_kwargs({"model_dir": "m", "engine_overrides": {}})


def test_memory_held_by_another_process_lowers_the_engines_share_and_says_how_much():
    total = 80 * VP.GIB
    assert VP.memory_budget(total, total - VP.GIB // 2, 0.92) == (0.92, None)
    util, note = VP.memory_budget(total, 50 * VP.GIB, 0.92)
    assert util == 0.61  # (50 - 0.5) / 80, rounded down
    assert "30.0 GiB of the GPU's 80.0 GiB are already in use" in note and "0.61 instead of 0.92" in note


def test_without_the_flag_each_release_starts_with_its_own_utilization():
    """0.33's default (0.92) is passed as nothing, and lowered only when other processes hold memory; 0.34's
    extensible KV cache (1.0, sized from measured memory, no free-memory check) always gets nothing."""
    total = 80 * VP.GIB
    v033, v034 = versions.get_profile("0.33").memory, versions.get_profile("0.34").memory
    assert VP.memory_budget(total, total - VP.GIB // 2, None, v033) == (None, None)
    util, note = VP.memory_budget(total, 50 * VP.GIB, None, v033)
    assert util == 0.61 and "0.61 instead of 0.92" in note
    util, note = VP.memory_budget(total, 50 * VP.GIB, None, v034)
    assert util is None and "30.0 GiB of the GPU's 80.0 GiB are already in use" in note
    assert VP.memory_budget(total, total - VP.GIB // 2, None, v034) == (None, None)
    assert "gpu_memory_utilization" not in engine_worker.engine_kwargs({"model_dir": "m", "gpu_memory_utilization": None})


def test_estimates_use_what_earlier_engines_took():
    cand = VP.Candidate(["tune-pick"], "FLASHINFER", 64)
    assert VP.start_estimate(cand, [], cache_warm=False, flashinfer_cubin=True) == VP.COLD_START_S
    assert VP.start_estimate(cand, [45.0, 50.0], cache_warm=False, flashinfer_cubin=False) == 45.0 + VP.FLASHINFER_JIT_S
    assert VP.measure_estimate([(64, 4096)], 2, 128, measured=[30.0, 41.0]) == 41.0


# --- the engine worker's plan ----------------------------------------------------------------


def test_n1_covers_the_whole_batch_s_chunked_prefill():
    n1, n2 = engine_worker.step_counts(256, 16384, 16384, 128)
    assert n1 == 256 + engine_worker.SETTLE_STEPS and n2 == n1 + 128
    assert engine_worker.step_counts(1, 512, 8192, 64) == (1 + engine_worker.SETTLE_STEPS, 9 + 64)


def test_prompt_is_shortened_only_when_the_generated_tokens_would_not_fit():
    assert engine_worker.prompt_length(4096, 152, 8192) == 4096
    assert engine_worker.prompt_length(40960, 137, 40960) == 40960 - 137


def test_requests_fit_counts_whole_blocks_and_uses_vllm_s_capacity_for_hybrids():
    facts = {"num_gpu_blocks": 52144, "block_size": 16, "kv_cache_tokens": 834304}
    assert engine_worker.requests_fit(facts, 4096 + 152) == 52144 // 266
    hybrid = {"num_gpu_blocks": 1000, "block_size": 528, "kv_cache_tokens": 400000, "is_hybrid": True}
    assert engine_worker.requests_fit(hybrid, 10000) == 40


def test_prompts_are_the_same_for_every_candidate_and_differ_between_requests():
    a = engine_worker.make_prompts(3, 50, 128256, seed=0)
    assert a == engine_worker.make_prompts(3, 50, 128256, seed=0)
    assert a[0] != a[1] and all(0 < t < 128256 for p in a for t in p)


def test_backends_are_read_from_vllm_s_model_inspection():
    # Attention.extra_repr (vllm/model_executor/layers/attention/attention.py:556-561) in vLLM's
    # model inspection, hybrid model: Mamba layers print no backend
    text = """GraniteMoeHybridForCausalLM(
  (model): GraniteMoeHybridModel(
    (layers): ModuleList(
      (0-9, 11-12, 14-16, 18-26, 28-31): 28 x GraniteMoeHybridMambaDecoderLayer(
        (mamba): MambaMixer2(...)
      )
      (10, 13, 17, 27): 4 x GraniteMoeHybridAttentionDecoderLayer(
        (self_attn): GraniteMoeHybridAttention(
          (attn): Attention(head_size=64, num_heads=12, num_kv_heads=4, scale=0.015625, backend=FlashInferImpl)
        )
      )"""
    assert engine_worker.backends_in_inspection(text) == ["FLASHINFER"]
    assert engine_worker.backends_in_inspection("backend=SomeNewImpl, backend=TritonAttentionImpl") == ["SomeNewImpl", "TRITON_ATTN"]


VERIFY_RUNS = ("h100_llama8b", "h100_qwen06", "h100_nemotron_h", "h100_llama8b_fp8")


def _logged_engine_runs():
    """(run, candidate, the engine arguments vLLM 0.24.0 logged) for every engine log kept from the
    H100 verify runs (tests/fixtures/verify/<run>/verify/engine-*.log)."""
    found = []
    for run in VERIFY_RUNS:
        folder = ROOT / "fixtures" / "verify" / run
        doc = json.loads((folder / "verify.json").read_text())
        for candidate in doc["candidates"]:
            log = folder / candidate["log"]
            if log.is_file():
                line = next(text for text in log.read_text().splitlines() if "non-default args: " in text)
                found.append((doc, candidate, ast.literal_eval(line.split("non-default args: ", 1)[1])))
    return found


def test_engine_arguments_are_the_ones_vllms_engine_ran_with_on_the_h100():
    # vLLM logs the EngineArgs that differ from its defaults; for each recorded engine, the job
    # verify built (backend and block size only where the candidate names them, dummy weights, no
    # tokenizer, prefix caching off, tune's dtypes) must give exactly those, plus the ones vLLM
    # read back otherwise (gpu_memory_utilization) or left at its default (seed 0, TP 1)
    runs = _logged_engine_runs()
    assert runs and any(c["backend"] is None for _, c, _ in runs)  # vLLM's default engines included
    for doc, candidate, logged in runs:
        job = {"model_dir": logged["model"], "backend": candidate["backend"], "block_size": candidate["block_size"],
               "tensor_parallel_size": doc["model"]["tensor_parallel_size"], "dtype": doc["model"]["dtype"],
               "kv_cache_dtype": doc["model"]["kv_cache_dtype"], "max_model_len": doc["options"]["max_model_len"],
               "gpu_memory_utilization": candidate["gpu_memory_utilization"], "seed": 0}
        kwargs = engine_worker.engine_kwargs(job)
        logged.pop("disable_log_stats")  # vLLM's LLM class sets it
        assert {k: kwargs.get(k) for k in logged} == logged, candidate["name"]
        rest = {k: v for k, v in kwargs.items() if k not in logged}
        assert rest == {"seed": 0, "tensor_parallel_size": 1,
                        "gpu_memory_utilization": candidate["engine"]["gpu_memory_utilization"]}, candidate["name"]


@pytest.mark.parametrize("exc,oom", [
    (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
    (ValueError("No available memory for the cache blocks. Try increasing `gpu_memory_utilization`"), True),
    (ValueError("Free memory on device cuda:0 (30.0/79.2 GiB) on startup is less than desired GPU memory utilization (0.92, 72.9 GiB)"), True),
    (ValueError("Selected backend AttentionBackendEnum.FLEX_ATTENTION is not valid"), False),
])
def test_out_of_memory_is_told_apart_from_other_errors(exc, oom):
    assert engine_worker.is_out_of_memory(exc) is oom


# --- vLLM's log lines ------------------------------------------------------------------------

# One engine start, in the formats of vLLM 0.24.0's log calls (file:line in bench/verify/engine_log.py)
LOG = """\
(EngineCore_DP0 pid=2211) INFO 11-24 10:00:01 [cuda.py:481] Using TRITON_ATTN attention backend out of potential backends: ['FLASH_ATTN', 'FLASHINFER', 'TRITON_ATTN', 'FLEX_ATTENTION'].
(EngineCore_DP0 pid=2211) INFO 11-24 10:00:02 [gpu_model_runner.py:5256] Model loading took 14.99 GiB memory and 3.412001 seconds
(EngineCore_DP0 pid=2211) INFO 11-24 10:00:09 [backends.py:1148] Dynamo bytecode transform time: 6.21 s
(EngineCore_DP0 pid=2211) INFO 11-24 10:00:10 [backends.py:292] Directly load the compiled graph(s) for compile range (1, 16384) from the cache, took 1.052 s
(EngineCore_DP0 pid=2211) INFO 11-24 10:00:11 [monitor.py:53] torch.compile took 8.03 s in total
(EngineCore_DP0 pid=2211) INFO 11-24 10:00:14 [gpu_worker.py:509] Available KV cache memory: 57.1 GiB
(EngineCore_DP0 pid=2211) INFO 11-24 10:00:14 [kv_cache_utils.py:2146] GPU KV cache size: 467,776 tokens
(EngineCore_DP0 pid=2211) INFO 11-24 10:00:14 [kv_cache_utils.py:2148] Maximum concurrency for 4,608 tokens per request: 101.51x
(EngineCore_DP0 pid=2211) WARNING 11-24 10:00:14 [compilation.py:1405] CUDAGraphMode.FULL_AND_PIECEWISE is not supported with spec-decode for attention backend X (support: Y); setting cudagraph_mode=PIECEWISE
Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|##########| 67/67 [00:04<00:00, 15.1it/s]\rCapturing CUDA graphs (decode, FULL): 100%|##########| 67/67 [00:03<00:00]
(EngineCore_DP0 pid=2211) INFO 11-24 10:00:22 [gpu_model_runner.py:6657] Graph capturing finished in 8 secs, took 0.53 GiB
(EngineCore_DP0 pid=2211) INFO 11-24 10:00:22 [core.py:338] init engine (profile, create kv cache, warmup model) took 19.87 s (compilation: 8.03 s)
"""


def test_the_engine_log_gives_backend_kv_cache_compile_and_graph_facts():
    facts = engine_log.parse_engine_log(LOG)
    assert facts["backend_selected"] == "TRITON_ATTN"
    assert facts["kv_cache_tokens"] == 467776
    assert facts["max_concurrency"] == {"tokens": 4608, "requests": 101.51}
    assert (facts["torch_compile_s"], facts["dynamo_s"], facts["compilation_s"]) == (8.03, 6.21, 8.03)
    assert facts["compile_cache"] == "hit"
    assert (facts["graph_capture_s"], facts["graph_memory_gib"], facts["init_engine_s"]) == (8.0, 0.53, 19.87)
    assert facts["cudagraph_mode_set"] == "PIECEWISE"
    assert facts["cudagraph_captures"] == ["mixed prefill-decode: PIECEWISE", "decode: FULL"]
    assert (facts["model_load_s"], facts["model_memory_gib"], facts["kv_cache_memory_gib"]) == (3.412001, 14.99, 57.1)


def test_flashinfer_s_autotuning_is_read_from_real_engine_logs_and_shown_in_the_start_column():
    # vLLM 0.24 on an H100: FlashInfer's autotuner is most of what a FLASHINFER engine adds to its start
    logs = ROOT / "fixtures" / "verify"
    tuned = engine_log.parse_engine_log((logs / "h100_qwen06" / "verify" / "engine-FLASHINFER-128.log").read_text())
    plain = engine_log.parse_engine_log((logs / "h100_qwen06" / "verify" / "engine-FLASH_ATTN-128.log").read_text())
    assert tuned["flashinfer_autotune_s"] > 60 > 1 > plain["flashinfer_autotune_s"]
    from attnsel.reports import verify_report

    row = {"short": "FLASHINFER/128 runner-up", "status": "ok", "start_s": 139.7,
           "engine": {"backend_used": "FLASHINFER", "block_size_used": 128, "flashinfer_autotune_s": 73.3}}
    assert verify_report.engine_rows({"candidates": [row]})[0][3] == "139.7 (autotune 73)"


def test_a_named_backend_is_read_from_its_own_log_line_and_errors_from_the_log_tail():
    text = "INFO [cuda.py:419] Using AttentionBackendEnum.FLASHINFER backend.\nValueError: boom\nRuntimeError: Engine core initialization failed"
    assert engine_log.parse_engine_log(text)["backend_selected"] == "FLASHINFER"
    assert engine_log.last_error(text) == "RuntimeError: Engine core initialization failed"
    assert engine_log.last_error(text, besides="RuntimeError: Engine core initialization failed. See root cause") == "ValueError: boom"
    assert engine_log.parse_engine_log("nothing useful\n") == {}


# --- timing from calls, noise, verdicts ------------------------------------------------------


def calls(n1, n2, step_s, prefill_s, jitter=()):
    """ABBA timed calls of an ideal engine: T(N) = prefill + (N - 1) x step (x 1 + jitter)."""
    order = engine_worker.call_order(n1, n2, 2)
    jitter = list(jitter) or [0.0] * len(order)
    out = [{"phase": "warmup", "max_tokens": n1, "seconds": 99.0}]  # first use compiles: never timed
    for n, j in zip(order, jitter):
        out.append({"phase": "measure", "max_tokens": n, "seconds": (prefill_s + (n - 1) * step_s) * (1 + j)})
    return out


def shape(step_ms, prefill_s, jitter=(), batch=64, prompt=4096, n1=24, n2=152):
    result = {"batch": batch, "context": prompt, "prompt_tokens": prompt, "n1": n1, "n2": n2, "status": "ok",
              "calls": calls(n1, n2, step_ms / 1e3, prefill_s, jitter)}
    result["figures"] = EC.shape_figures(result)
    return result


def test_decode_step_and_prefill_come_back_exactly_from_an_ideal_engine_and_ignore_the_warm_up():
    f = shape(18.1, 5.8)["figures"]
    assert f["decode_step_ms"]["median"] == pytest.approx(18.1)
    assert f["decode_step_ms"]["spread"] == pytest.approx(0.0, abs=1e-9)
    assert f["prefill_s"]["median"] == pytest.approx(5.8)
    assert f["prefill_tokens_per_s"]["median"] == pytest.approx(64 * 4096 / 5.8)
    assert f["output_tokens_per_s"]["median"] == pytest.approx(64 * 152 / (5.8 + 151 * 0.0181))
    assert f["pairs"] == 2


def test_the_spread_of_the_pairs_is_the_noise():
    noisy = shape(18.1, 5.8, jitter=(0.004, -0.004, 0.0, 0.0))["figures"]["decode_step_ms"]
    # +-0.4% on a 6.2 s and an 8.5 s call moves one pair's slope over 128 steps by 59 ms / 128 = 2.5%
    assert noisy["spread"] == pytest.approx(0.0258, abs=5e-4)
    assert EC.noise_bar(noisy, None) == pytest.approx(noisy["spread"])
    assert EC.noise_bar({"spread": 0.001}, {"spread": 0.003}) == EC.T.RELATIVE_NOISE_THRESHOLD


def test_no_complete_pair_gives_no_figures():
    result = {"batch": 1, "prompt_tokens": 10, "n1": 9, "n2": 137, "calls": [{"phase": "warmup", "max_tokens": 9, "seconds": 1}]}
    assert EC.shape_figures(result) is None


@pytest.mark.parametrize("pick_step,pick_prefill,decode,e2e", [
    (16.0, 5.0, "faster", "faster"),
    # a 6% faster decode step is 2% of calls that are mostly prefill (4096-token prompts, 152 generated)
    (17.0, 5.8, "faster", "within noise"),
    (18.2, 5.8, "within noise", "within noise"),
    (18.3, 8.3, "within noise", "slower"),  # the case: same decode step, slower prefill
])
def test_compare_shape_judges_decode_and_end_to_end_apart(pick_step, pick_prefill, decode, e2e):
    verdict = EC.compare_shape(shape(pick_step, pick_prefill)["figures"], shape(18.1, 5.8)["figures"])
    assert verdict["decode"]["result"] == decode
    assert verdict["end_to_end"]["result"] == e2e


def test_recommendation_words_and_the_overall_rule():
    assert EC.recommendation_verdict("faster", pick_is_default=False) == "holds"
    assert EC.recommendation_verdict("slower", pick_is_default=False) == "reversed"
    assert EC.recommendation_verdict("within noise", pick_is_default=False) == "within noise"
    assert EC.recommendation_verdict("faster", pick_is_default=True) == "reversed"  # the runner-up beat tune's default pick
    assert EC.recommendation_verdict("within noise", pick_is_default=True) == "holds"
    assert EC.overall_verdict(["holds", "within noise"]) == "holds"
    assert EC.overall_verdict(["holds", "reversed"]) == "reversed"
    assert EC.overall_verdict(["within noise", None]) == "within noise"
    assert EC.overall_verdict([None]) is None


def _doc(pick_shapes, default_shapes, runner_shapes=None, layers=32, pick_roles=("tune-pick",)):
    def row(name, roles, backend, size, shapes, flags):
        return {"name": name, "short": name, "roles": list(roles), "backend": backend, "block_size": size,
                "predicted": ["FLASH_ATTN", 16] if backend is None else None, "flags": flags, "status": "ok",
                "engine": {"backend_used": backend or "FLASH_ATTN", "block_size_used": size or 16}, "shapes": shapes}
    rows = [row("FLASH_ATTN/16 default", ["vllm-default"], None, None, default_shapes, "")]
    if pick_shapes is not None:
        rows.append(row("FLASHINFER/64 pick", pick_roles, "FLASHINFER", 64, pick_shapes,
                        "--attention-backend FLASHINFER --block-size 64"))
    if runner_shapes is not None:
        rows.append(row("TRITON_ATTN/64 runner-up", ["runner-up"], "TRITON_ATTN", 64, runner_shapes,
                        "--attention-backend TRITON_ATTN --block-size 64"))
    return {"model": {"attention_layers": layers}, "options": {"shapes": [[64, 4096]]}, "candidates": rows}


def _verdict(doc, tune=None):
    doc["comparisons"] = VV.build_comparisons(doc, tune)
    return VV.summarize(doc)


def test_verdict_holds_with_the_pick_s_flags():
    v = _verdict(_doc([shape(16.0, 5.6)], [shape(18.1, 5.8)]))
    assert v["verdict"] == "holds" and v["flags"] == "--attention-backend FLASHINFER --block-size 64"
    assert "holds end to end" in v["text"] and "pass --attention-backend FLASHINFER --block-size 64" in v["text"]


def test_verdict_within_noise_keeps_vllm_s_default_without_flags():
    v = _verdict(_doc([shape(18.2, 5.82)], [shape(18.1, 5.8)]))
    assert v["verdict"] == "within noise" and v["flags"] == ""
    assert "keep vLLM's default" in v["text"]


def test_verdict_reversed_names_the_best_end_to_end_pair():
    v = _verdict(_doc([shape(18.3, 8.3)], [shape(18.1, 5.8)], runner_shapes=[shape(17.0, 5.2)]))
    assert v["verdict"] == "reversed"
    assert v["best_end_to_end"]["name"] == "TRITON_ATTN/64 runner-up"
    assert v["flags"] == "--attention-backend TRITON_ATTN --block-size 64"
    v = _verdict(_doc([shape(18.3, 8.3)], [shape(18.1, 5.8)]))
    assert v["flags"] == "" and "no flags needed" in v["text"]


def test_when_tune_picked_the_default_the_runner_up_decides():
    doc = _doc(None, [shape(18.1, 5.8)], runner_shapes=[shape(18.2, 5.8)])
    doc["candidates"][0]["roles"].append("tune-pick")
    holds = _verdict(doc)
    assert (holds["verdict"], holds["pick_is_default"], holds["flags"]) == ("holds", True, "")
    assert holds["compared"] == "TRITON_ATTN/64 runner-up"
    doc = _doc(None, [shape(18.1, 5.8)], runner_shapes=[shape(16.0, 5.0)])
    doc["candidates"][0]["roles"].append("tune-pick")
    v = _verdict(doc)
    assert v["verdict"] == "reversed" and v["flags"] == "--attention-backend TRITON_ATTN --block-size 64"


def test_no_verdict_when_the_default_could_not_be_measured():
    doc = _doc([shape(16.0, 5.6)], [{"status": "oom", "error": "CUDA out of memory", "batch": 64, "context": 4096}])
    v = _verdict(doc)
    assert v["verdict"] == "not measured" and v["flags"] is None
    assert "vLLM's default: oom" in v["text"]


def test_kernel_margin_attention_share_and_the_step_gain_the_kernels_predict(h200_tune):
    doc = _doc([shape(17.0, 5.8)], [shape(18.1, 5.8)])
    doc["comparisons"] = VV.build_comparisons(doc, h200_tune)
    entry = doc["comparisons"][0]
    kernels = VV.kernel_times(h200_tune)
    k_default, k_pick = kernels[("FLASH_ATTN", 16, 64, 4096)], kernels[("FLASHINFER", 64, 64, 4096)]
    assert entry["predicted_kernel_margin_pct"] == pytest.approx((k_default / k_pick - 1) * 100)
    assert entry["predicted_source"] == "this shape"
    saved = (k_default - k_pick) * 32
    assert entry["expected_step_margin_pct"] == pytest.approx((18.1 / (18.1 - saved) - 1) * 100)
    default_shape = doc["candidates"][0]["shapes"][0]
    assert default_shape["attention_share"] == pytest.approx(k_default * 32 / 18.1)


def test_attention_layers_of_hybrid_and_plain_configs():
    assert attention_layer_count(MC.load_model_config("llama-3.1-8b")) == 32
    assert attention_layer_count(MC.load_model_config("granite-4.0-h-350m")) == 4
    assert attention_layer_count(MC.load_model_config("jamba-1.5-mini")) == 4
    assert attention_layer_count(MC.load_model_config("nemotron-h-8b")) == 4
    # transformers 5 rewrites Granite's layer_types as full_attention / linear_attention
    assert attention_layer_count({"num_hidden_layers": 3, "layer_types": ["linear_attention", "full_attention", "linear_attention"]}) == 1
    assert attention_layer_count(MC.load_model_config("mamba-130m")) == 0
    assert attention_layer_count({"num_hidden_layers": 4, "hybrid_override_pattern": "M-M*-M*"}) == 2


def _keep_default_doc(pick_shapes, runner_shapes=None):
    """tune ranked FLASHINFER/64 first but within noise: its advice was to keep vLLM's default."""
    doc = _doc(pick_shapes, [shape(18.1, 5.8)], runner_shapes=runner_shapes)
    doc["tune"] = {"verdict": "noisy", "advised_flags": None, "min_gain_pct": 5.0,
                   "flags": "--attention-backend FLASHINFER --block-size 64"}
    return doc


def test_a_kept_default_holds_when_the_fastest_pair_gains_less_than_min_gain_end_to_end():
    # +3% tokens/s is above the 2% noise but below --min-gain 5%: no flags, as tune said
    v = _verdict(_keep_default_doc([shape(17.3, 5.6)]))
    assert v["verdict"] == "holds" and v["flags"] == "" and v["tune_advised_flags"] is False
    assert "keeping vLLM's default, as tune advised" in v["text"] and "no flags needed" in v["text"]
    assert v["shapes"][0]["end_to_end"] == "holds"


def test_a_kept_default_is_reversed_when_a_pair_wins_by_min_gain_and_loses_nowhere():
    v = _verdict(_keep_default_doc([shape(18.1, 5.8)], runner_shapes=[shape(15.0, 4.6)]))
    assert v["verdict"] == "reversed" and v["flags"] == "--attention-backend TRITON_ATTN --block-size 64"
    assert v["best_end_to_end"]["gain_pct"] >= 5.0 and "pass --attention-backend TRITON_ATTN" in v["text"]


def test_advised_flags_are_judged_by_noise_alone():
    # tune advised FLASHINFER/64 (verdict faster): a 3% end-to-end gain beyond noise confirms it
    doc = _keep_default_doc([shape(17.3, 5.6)])
    doc["tune"].update(verdict="faster", advised_flags="--attention-backend FLASHINFER --block-size 64")
    v = _verdict(doc)
    assert v["verdict"] == "holds" and v["flags"] == "--attention-backend FLASHINFER --block-size 64"
    assert v["tune_advised_flags"] is True


def test_when_tune_picked_the_default_a_runner_up_below_min_gain_does_not_reverse_it():
    doc = _doc(None, [shape(18.1, 5.8)], runner_shapes=[shape(17.3, 5.6)])
    doc["candidates"][0]["roles"].append("tune-pick")
    v = _verdict(doc)
    assert (v["verdict"], v["flags"]) == ("holds", "")


def test_a_verify_run_that_passed_no_utilization_reports_vllms_default(tmp_path):
    """Without --gpu-memory-utilization, verify passes none (0.34's extensible KV cache runs at 1.0): the
    document holds null there, and `report` reads it as the release's own default, not as damage."""
    from typer.testing import CliRunner

    from attnsel.cli.app import app

    source = Path(__file__).parent / "fixtures" / "verify" / "h100_vllm034_llama8b"
    doc = json.loads((source / "verify.json").read_text())
    doc["options"]["gpu_memory_utilization"] = doc["options"]["gpu_memory_utilization_requested"] = None
    for row in doc["candidates"]:
        row["gpu_memory_utilization"] = None
    (tmp_path / "verify.json").write_text(json.dumps(doc))
    (tmp_path / "tune.json").write_text((source / "tune.json").read_text())
    result = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "gpu_memory_utilization vLLM's default" in result.stdout
