"""vLLM's model-level facts for one vLLM version: `ModelRules` (attention/versions/model_rules.py, parsed
once per release from the version's data and held by the version object), chosen by version name here.

Everything `attention/model/config.py` needs to turn a Hugging Face `config.json` into the
selector inputs vLLM derives (docs/vllm-rules.md §6, §7, §9). The lists themselves (use_mla model types,
mm-prefix list, float16 list, head_dim rules, ...) are data: the `models` section of each version
file in attention/versions/ (a release lists only what it changed, as `$add` / `$remove`).

Nothing here executes model code; the lists mirror vLLM's own lists and model-class flags.
"""

from __future__ import annotations

from attnsel.attention.versions import (
    ModelRules,
    available_profiles,
    choose_profile,
    profile_name_for,
)
from attnsel.errors import UserInputError

# Config keys that hold the text (language-model) sub-config, in the order transformers'
# `PretrainedConfig.get_text_config()` / vLLM's `get_hf_text_config()` look for them.
TEXT_CONFIG_KEYS = ("text_config", "language_config", "llm_config", "thinker_config")

# Architecture suffixes → runner, in vLLM's priority order (`_SUFFIX_TO_DEFAULTS`,
# vllm/config/model.py). "pooling" models prefer float16 under --dtype auto (§6).
ARCHITECTURE_SUFFIX_RUNNERS = (
    ("ForCausalLM", "generate"),
    ("ForConditionalGeneration", "generate"),
    ("ChatModel", "generate"),
    ("LMHeadModel", "generate"),
    ("ForTextEncoding", "pooling"),
    ("EmbeddingModel", "pooling"),
    ("ForSequenceClassification", "pooling"),
    ("ForTokenClassification", "pooling"),
    ("ForAudioClassification", "pooling"),
    ("ForImageClassification", "pooling"),
    ("ForVideoClassification", "pooling"),
    ("ClassificationModel", "pooling"),
    ("ForRewardModeling", "pooling"),
    ("RewardModel", "pooling"),
    ("Model", "pooling"),
)


def rules_for(profile: str | ModelRules | None = None) -> ModelRules:
    """The model rules of one vLLM version (a version name or alias: "seed_0_17", "0.33"; None: the
    library default); unknown names are bad input."""
    if isinstance(profile, ModelRules):
        return profile

    if profile is None:
        return choose_profile(None).profile.model_rules
    name = profile_name_for(profile)
    if name is None:
        valid = ", ".join(available_profiles())
        raise UserInputError(f"Unknown vLLM profile {profile!r}. Valid profiles: {valid}")
    return choose_profile(name).profile.model_rules
