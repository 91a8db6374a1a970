"""The memory plan vLLM makes at start-up (weights, the reserve beyond them, the KV cache) and its
verdict: fits, vLLM's `max_model_len` error, or weights that do not fit, with the flag that fixes it.

- `weights.py`: weights per GPU from config.json alone (dense, MoE, MLA, hybrid, vision, quantized);
- `plan.py`: the KV cache (GiB, blocks, tokens, concurrency) and the verdict, per release
  (the version data's `memory` section);
- `cache.py`: the KV cache in vLLM's groups and blocks (full attention, sliding window, Mamba);
- `sizing.py`: the profile run's reserve and the release's sizing (profiled, or 0.34's extensible cache);
- `checks.py`: vLLM's other start-up refusals (derived max length, batching, Mamba blocks);
- `checkpoint.py`: weights from a checkpoint's safetensors headers;
- `verdict.py`: the verdict words;
- `fixes.py`: the flags that turn a refusal into a start.
"""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # the door's one listing: each name loads from its module on first use (doors.py)
    from attnsel.attention.memory.fixes import (
        memory_for,
        suggest_fixes,
        why_not_planned,
    )
    from attnsel.attention.memory.plan import (
        MemoryFlags,
        MemoryPlan,
        check_memory_flags,
        device_total_bytes,
        plan_memory,
    )
    from attnsel.attention.memory.verdict import (
        FITS,
        MAX_MODEL_LEN,
        NO_CACHE_MEMORY,
        WEIGHTS,
        Verdict,
    )
    from attnsel.attention.memory.weights import WeightBytes, weight_bytes

__getattr__ = lazy_door(__name__)
