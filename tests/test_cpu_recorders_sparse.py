"""The CPU check's stand-in for FlashInfer's MLA wrapper (bench/tools/cpu_recorders_sparse.py) looks
like the real class to vLLM's feature detection: vLLM 0.30+ decides whether FLASHINFER_MLA_SPARSE_SM90
is usable from the parameters of BatchMLAPagedAttentionWrapper.run (`ckv_scale_arr`,
utils/flashinfer.py has_flashinfer_sm90_nope_mla), so a stand-in with `(*args, **kwargs)` made a check
of that backend alone record its rows as refused by vLLM."""

import inspect

from attnsel.bench.tools import cpu_recorders_sparse


class _RealWrapper:  # the parameters of flashinfer 0.7.2.post1's class, as vLLM inspects them
    def __init__(self, float_workspace_buffer, use_cuda_graph=False, qo_indptr=None, kv_indptr=None,
                 kv_indices=None, kv_len_arr=None, backend="auto"):
        pass

    def plan(self, qo_indptr, kv_indptr, kv_indices, kv_len_arr, num_heads, head_dim_ckv, head_dim_kpe,
             page_size, causal, sm_scale, q_data_type, kv_data_type, use_profiler=False):
        pass

    def run(self, q_nope, q_pe, ckv_cache, kpe_cache, out=None, lse=None, return_lse=False,
            ckv_scale=None, ckv_scale_arr=None, kpe_scale=None):
        pass


def test_the_stand_in_shows_the_real_wrappers_parameters_to_vllms_feature_detection():
    stand_in = cpu_recorders_sparse._sm90_wrapper(_RealWrapper, [])
    for name in ("__init__", "plan", "run"):
        assert inspect.signature(getattr(stand_in, name)) == inspect.signature(getattr(_RealWrapper, name)), name
    assert "ckv_scale_arr" in inspect.signature(stand_in.run).parameters
