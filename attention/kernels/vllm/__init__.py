"""The installed vLLM's own backend classes, driven the way its model runner drives them."""

from typing import TYPE_CHECKING

from attnsel.doors import lazy_door

if TYPE_CHECKING:  # where each name is defined; at run time it is imported on first use
    from attnsel.attention.kernels.vllm.backend import STANDINS_ENV, VllmBackendAdapter
    from attnsel.attention.kernels.vllm.mla import VllmMlaAdapter
    from attnsel.attention.kernels.vllm.sparse_mla import VllmSparseMlaAdapter
    from attnsel.attention.kernels.vllm.stack import (
        MlaDims,
        StackBuilder,
        StackSpec,
        backend_class,
        call_accepting,
    )

__all__ = [
    "STANDINS_ENV",
    "MlaDims",
    "StackBuilder",
    "StackSpec",
    "VllmBackendAdapter",
    "VllmMlaAdapter",
    "VllmSparseMlaAdapter",
    "backend_class",
    "call_accepting",
]
__getattr__ = lazy_door(__name__, {
    "MlaDims": "stack",
    "STANDINS_ENV": "backend",
    "StackBuilder": "stack",
    "StackSpec": "stack",
    "VllmBackendAdapter": "backend",
    "VllmMlaAdapter": "mla",
    "VllmSparseMlaAdapter": "sparse_mla",
    "backend_class": "stack",
    "call_accepting": "stack",
})
