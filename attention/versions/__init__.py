"""One place per vLLM version: a data file each (`vllm_0_X.json`), and a code module only where a
release brought new logic (`vllm_0_X.py`, its `Rules` class). README.md in this folder says how to
add a release.

- `profile`: `RuleProfile`, the version object -- a release's data plus the `Rules` class it names;
- `code`: the base of every release's `Rules` (dispatch from rule names in the data to code);
- `adapter_facts`: what tune's adapters of vLLM's own classes need from a release (its KV-cache
  layout, the call signatures), and whether the CPU check drove that release through them;
- `faults`: the vLLM faults known per release (`known_faults`) and whether a configuration meets one;
- `block_size`: how a release settles the KV-cache block size around the layers' backend choice;
- `registry` reads the files; `choice` picks the version that answers.
"""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # where each name is defined; at run time it is imported on first use
    from attnsel.attention.versions.adapter_facts import (
        AdapterFacts,
        installed_adapter_facts,
    )
    from attnsel.attention.versions.backend_names import close_backend_names
    from attnsel.attention.versions.choice import (
        choose_profile,
        get_profile,
        installed_vllm_version,
        load_profile,
        parse_vllm_version,
        profile_name_for,
        release_profiles,
        select_profile,
    )
    from attnsel.attention.versions.faults import (
        FaultConfig,
        FaultMatch,
        KnownFault,
        QScale,
        faults_met,
    )
    from attnsel.attention.versions.profile import RuleProfile, block_size_cli_error
    from attnsel.attention.versions.registry import (
        OWN_KEYS,
        VERSIONS_DIR,
        available_profiles,
        diff_patch,
        raw_data,
        resolved_data,
    )

__all__ = [
    "OWN_KEYS",
    "VERSIONS_DIR",
    "AdapterFacts",
    "FaultConfig",
    "FaultMatch",
    "KnownFault",
    "QScale",
    "RuleProfile",
    "available_profiles",
    "block_size_cli_error",
    "choose_profile",
    "close_backend_names",
    "diff_patch",
    "faults_met",
    "get_profile",
    "installed_adapter_facts",
    "installed_vllm_version",
    "load_profile",
    "parse_vllm_version",
    "profile_name_for",
    "raw_data",
    "release_profiles",
    "resolved_data",
    "select_profile",
]
__getattr__ = lazy_door(__name__, {
    "AdapterFacts": "adapter_facts",
    "FaultConfig": "faults",
    "FaultMatch": "faults",
    "KnownFault": "faults",
    "QScale": "faults",
    "faults_met": "faults",
    "OWN_KEYS": "registry",
    "RuleProfile": "profile",
    "VERSIONS_DIR": "registry",
    "available_profiles": "registry",
    "block_size_cli_error": "profile",
    "close_backend_names": "backend_names",
    "choose_profile": "choice",
    "diff_patch": "registry",
    "get_profile": "choice",
    "installed_adapter_facts": "adapter_facts",
    "installed_vllm_version": "choice",
    "load_profile": "choice",
    "parse_vllm_version": "choice",
    "profile_name_for": "choice",
    "raw_data": "registry",
    "release_profiles": "choice",
    "resolved_data": "registry",
    "select_profile": "choice",
})
