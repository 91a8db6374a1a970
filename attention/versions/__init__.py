"""One place per vLLM version: a data file each (`vllm_0_X.json`), and a code module only where a
release brought new logic (`vllm_0_X.py`, its `Rules` class). README.md in this folder says how to
add a release.

- `profile`: `RuleProfile`, the version object -- a release's data plus the `Rules` class it names;
- `code`: the base of every release's `Rules` (dispatch from rule names in the data to code);
- `adapter_facts`: what tune's adapters of vLLM's own classes need from a release (its KV-cache
  layout, the call signatures), and whether the CPU check drove that release through them;
- `faults`: the vLLM faults known per release (`known_faults`) and whether a configuration meets one;
- `model_rules`: a release's model-level lists (`ModelRules`), which attention/model/ applies;
- `block_size`: how a release settles the KV-cache block size around the layers' backend choice;
- `registry` reads the files; `choice` picks the version that answers.
"""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # the door's one listing: each name loads from its module on first use (doors.py)
    from attnsel.attention.versions.adapter_facts import AdapterFacts
    from attnsel.attention.versions.backend_names import close_backend_names
    from attnsel.attention.versions.choice import (
        choose_profile,
        get_profile,
        installed_adapter_facts,
        installed_vllm_version,
        load_profile,
        parse_vllm_version,
        profile_name_for,
        select_profile,
    )
    from attnsel.attention.versions.faults import (
        FaultConfig,
        FaultMatch,
        KnownFault,
        QScale,
        faults_met,
    )
    from attnsel.attention.versions.model_rules import ModelRules
    from attnsel.attention.versions.profile import RuleProfile, block_size_cli_error
    from attnsel.attention.versions.registry import (
        OWN_KEYS,
        VERSIONS_DIR,
        available_profiles,
        diff_patch,
        raw_data,
        release_profiles,
        resolved_data,
    )

__getattr__ = lazy_door(__name__)
