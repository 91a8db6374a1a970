"""The installed vLLM's own backend classes, driven the way its model runner drives them."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # the door's one listing: each name loads from its module on first use (doors.py)
    from attnsel.attention.kernels.vllm.backend import STANDINS_ENV, VllmBackendAdapter
    from attnsel.attention.kernels.vllm.calls import call_accepting
    from attnsel.attention.kernels.vllm.mla import VllmMlaAdapter
    from attnsel.attention.kernels.vllm.sparse_mla import VllmSparseMlaAdapter
    from attnsel.attention.kernels.vllm.stack import (
        MlaDims,
        StackBuilder,
        StackSpec,
        backend_class,
    )

__getattr__ = lazy_door(__name__)
