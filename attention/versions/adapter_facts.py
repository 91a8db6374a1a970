"""What tune's adapters that drive vLLM's own backend classes (attention/kernels/vllm/) need to know
about one vLLM release, from the `kernel_adapters` section of the release's data file:

- `kv_cache.shape_from`: how the model runner shapes a layer's cache: `get_kv_cache_shape` (the
  backend's static method plus `get_kv_cache_stride_order`, 0.24-0.28) or `kv_cache_layouts`
  (`supported_kv_cache_layouts()` / `KVCacheLayout` of vllm/v1/kv_cache_layout.py, 0.29-0.33);
- `kv_cache.kv_split`: where K and V sit in that shape: `kv_axis` (a 5-D shape with a size-2 axis,
  0.24-0.25: (num_blocks, 2, block_size, heads, head_size)) or `packed_content` (a 4-D shape whose
  last axis holds K then V, 0.26-0.33: (num_blocks, heads, block_size, 2 * head_size));
- `impl_forward`, `builder_build`, `mla_forward_mqa`, `cudagraph_support`: the keyword names the
  adapters pass AttentionImpl.forward, AttentionMetadataBuilder.build, the MLA impl's forward_mqa
  and the builder's get_cudagraph_support;
- `mla_kv_b_proj`: what MLAAttention is built with for kv_b_proj (no weights are loaded here):
  `none` (0.24-0.28 only read it in forward_mha / process_weights_after_loading) or `placeholder`
  (0.29-0.33's __init__ sets an attribute on it, _cpu_skip_gemm_dispatch; 0.30 skip_weight_relayout:
  an object that takes attributes);
- `fp8_not_timed`: per backend, why tune does not time it with an fp8 KV cache on this release although
  vLLM accepts one (0.30-0.33 FLASHINFER_MLA_SPARSE_SM90: its impl dequantizes the rope part with scale
  1.0); 0.29 and 0.24 (whose bases are 0.30 and 0.33), which have no
  such backend, set it to null;
- `checked_on`: the release whose real classes `python -m attnsel.bench.tools.vllm_cpu_check` drove
  through these facts with every row matching the reference, and `cpu_check`, its recording.

The section is inherited like every other key (registry.py), so a release nobody checked answers
with its nearest neighbour's facts and `checked` is False: tune says so before timing anything.
"""

from __future__ import annotations

from dataclasses import dataclass

SHAPES_FROM = ("get_kv_cache_shape", "kv_cache_layouts")
KV_SPLITS = ("kv_axis", "packed_content")


@dataclass(frozen=True)
class AdapterFacts:
    """One release's facts for the adapters (this module's docstring says what each means)."""

    profile: str
    vllm_version: str
    shape_from: str
    kv_split: str
    impl_forward: tuple[str, ...]
    builder_build: tuple[str, ...]
    mla_forward_mqa: tuple[str, ...]
    cudagraph_support: tuple[str, ...]
    mla_kv_b_proj: str = "none"
    checked_on: str | None = None
    cpu_check: str | None = None
    fp8_not_timed: tuple[tuple[str, str], ...] = ()  # (backend, why), from a JSON object

    def fp8_refusal(self, backend: str) -> str | None:
        """Why `backend` is not timed with an fp8 KV cache on this release; None where it is."""
        return dict(self.fp8_not_timed).get(backend)

    @classmethod
    def from_data(cls, data: dict) -> AdapterFacts | None:
        """The facts of a resolved data file; None where it has no `kernel_adapters` section."""
        section = data.get("kernel_adapters")
        if not section:
            return None
        kv = section["kv_cache"]
        if kv["shape_from"] not in SHAPES_FROM or kv["kv_split"] not in KV_SPLITS:
            raise ValueError(f"{data['name']}: unknown kernel_adapters.kv_cache {kv!r}")
        return cls(profile=data["name"], vllm_version=data["vllm_version"], shape_from=kv["shape_from"],
                   kv_split=kv["kv_split"], impl_forward=tuple(section["impl_forward"]),
                   builder_build=tuple(section["builder_build"]), mla_forward_mqa=tuple(section["mla_forward_mqa"]),
                   cudagraph_support=tuple(section["cudagraph_support"]), mla_kv_b_proj=section["mla_kv_b_proj"],
                   checked_on=section.get("checked_on"),
                   cpu_check=section.get("cpu_check"),
                   fp8_not_timed=tuple(sorted((section.get("fp8_not_timed") or {}).items())))

    @property
    def checked(self) -> bool:
        """True when the CPU check drove this very release's classes through these facts."""
        return self.checked_on == self.vllm_version

    def describe(self) -> str:
        """One line for tune's rows and documents: whose facts, and whether they were checked."""
        if self.checked:
            return f"{self.profile} (checked on vLLM {self.checked_on} by the CPU check)"
        origin = f"vLLM {self.checked_on}'s checked facts" if self.checked_on else "facts read from vLLM's source"
        return f"{self.profile} (not checked on vLLM {self.vllm_version}: {origin})"
