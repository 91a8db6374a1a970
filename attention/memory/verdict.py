"""The memory plan's verdicts: vLLM starts, or the start-up check that stops it.

One word per check vLLM runs before it serves (docs/memory.md, "vLLM's start-up checks"). The enum is
str-valued, so a plan's JSON holds the same words it always did (`Verdict.FITS == "fits"`) and
records written before the enum existed (`attnsel-memory-record/1`) still compare equal.
"""

from __future__ import annotations

from attnsel.words import Word


class Verdict(Word):
    FITS = "fits"
    # v1/core/kv_cache_planning.py _check_enough_kv_cache_memory (0.33.0:52, 0.34.0:99)
    MAX_MODEL_LEN = "max_model_len_too_long"
    NO_CACHE_MEMORY = "no_cache_memory"
    # torch's allocator while the weights load (no text of vLLM's own)
    WEIGHTS = "weights_do_not_fit"
    # config/compilation.py resolve_cudagraph_mode_and_sizes (0.33.0:1517-1532, 0.34.0:1666-1681)
    MAMBA_BLOCKS = "max_num_seqs_over_mamba_blocks"
    # config/model.py _get_and_verify_max_len (0.33.0:2657-2683, 0.34.0:2701-2727)
    DERIVED_MAX_LEN = "max_model_len_over_derived"
    # config/scheduler.py SchedulerConfig.verify_max_model_len (0.33.0:331-336, 0.34.0:375-380)
    BATCHED_TOKENS_BELOW_SEQS = "max_num_batched_tokens_below_max_num_seqs"
    # the same, without chunked prefill (0.33.0:318-329, 0.34.0:362-373)
    BATCHED_TOKENS_BELOW_LEN = "max_num_batched_tokens_below_max_model_len"
    # v1/worker/utils.py request_memory (0.33.0:761-770, 0.34.0:783-797; not with 0.34's extensible cache)
    FREE_MEMORY = "free_memory_below_utilization"
    # --quantization (attention/rules/quantization.py): config/model.py _verify_quantization (0.34.0:1476-1489),
    # model_loader/weight_utils.py get_quant_config (0.34.0:410), config/vllm.py _get_quantization_config (0.34.0:887-898)
    QUANTIZATION = "quantization_refused"

    @property
    def starts(self) -> bool:
        return self is Verdict.FITS

    @property
    def before_weights(self) -> bool:
        """Raised while vLLM builds its config, before it loads anything (no memory figure matters)."""
        return self in (Verdict.DERIVED_MAX_LEN, Verdict.BATCHED_TOKENS_BELOW_SEQS, Verdict.BATCHED_TOKENS_BELOW_LEN,
                        Verdict.QUANTIZATION)


# the names the module exported before the enum (attention/memory/__init__.py)
FITS, MAX_MODEL_LEN, NO_CACHE_MEMORY, WEIGHTS = Verdict.FITS, Verdict.MAX_MODEL_LEN, Verdict.NO_CACHE_MEMORY, Verdict.WEIGHTS
