"""bench/tools/peak_share.py: the line the GPU evidence quotes per run (recommendation, and the
share of HBM peak of the best decode row and of the recommended config's best row)."""

import json

from attnsel.bench.tools import peak_share


def _row(backend, block_size, label, pct, median_ms=0.1, kind="decode"):
    return {"status": "ok", "kind": kind, "backend": backend, "block_size": block_size, "workload_label": label,
            "pct_of_peak_bandwidth": pct, "bandwidth_bytes_per_s": pct / 100 * 3.35e12, "launch": "graph",
            "timing": {"median_ms": median_ms, "mode": "graph"}}


DOC = {
    "plan": {"shape": {"model": "deepseek-v3", "tensor_parallel_size": 8, "num_q_heads": 16, "kv_cache_dtype": "auto"},
             "vllm_default": {"backend": "FLASH_ATTN_MLA", "block_size": 16}},
    "environment": {"gpu": {"peak_memory_bandwidth_bytes_per_s": 3.35e12}},
    "rows": [_row("FLASHMLA", 64, "decode b=256 ctx=4096", 81.0), _row("FLASHMLA", 64, "decode b=1 ctx=1024", 9.0),
             _row("TRITON_MLA", 16, "decode b=256 ctx=4096", 84.5), _row("TRITON_MLA", 16, "prefill", 99.0, kind="prefill"),
             {"status": "skipped", "kind": "decode", "backend": "FLASHINFER_MLA", "block_size": 64}],
    "recommendation": {"workloads": {"decode": {"best": {"backend": "FLASHMLA", "block_size": 64},
                                                "advice": "FLASHMLA with --block-size 64 is 12.0% faster"}}},
}


def test_best_decode_row_and_the_recommended_configs_best_row():
    rows = peak_share.best_rows(DOC)
    assert (rows["best"]["backend"], rows["best"]["pct_of_peak_bandwidth"]) == ("TRITON_MLA", 84.5)  # prefill ignored
    assert (rows["recommended"]["backend"], rows["recommended"]["pct_of_peak_bandwidth"]) == ("FLASHMLA", 81.0)


def test_the_summary_quotes_shape_default_advice_and_shares(tmp_path, capsys):
    (tmp_path / "tune.json").write_text(json.dumps(DOC))
    assert peak_share.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "deepseek-v3 TP=8, 16 query heads/GPU" in out and "vLLM's default FLASH_ATTN_MLA --block-size 16" in out
    assert "decode: FLASHMLA with --block-size 64 is 12.0% faster" in out
    assert "best decode row: TRITON_MLA --block-size 16 decode b=256 ctx=4096: 100.0 us, 2.83 TB/s = 84.5% of peak (graph)" in out
