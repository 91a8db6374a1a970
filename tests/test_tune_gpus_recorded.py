"""`attnsel tune --gpus all` on real 2 x H200 hosts (vLLM 0.24.0's kernels, Llama-3.1-8B default
grid), recorded by bench/tools/multi_gpu_evidence.sh and kept by bench/tools/gpus_fixture.py:
today's calibration rule, given what each GPU timed for the reference row, must decide what the
run decided. (What the runs themselves showed -- lanes, rows per GPU, wall times, the same advice
-- is evidence: `python -m attnsel.bench.tools.evidence`.)"""

import json

import pytest
from recordings import recorded

from attnsel.bench.sweep.multi_gpu import calibration_verdict

# runs.json: the first 2 x H200 session; runs_prespawn.json: another 2 x H200 host (2026-11-26)
RECORDED = {name: json.loads(recorded("tune", "h200x2_gpus", f"{name}.json").read_text())["runs"]
            for name in ("runs", "runs_prespawn")}
TWO_GPU_RUNS = [(rec, run) for rec in sorted(RECORDED) for run in sorted(RECORDED[rec])
                if RECORDED[rec][run]["gpus"]]


@pytest.mark.parametrize("recording, run", TWO_GPU_RUNS)
def test_the_calibration_rule_decides_as_the_run_did_on_what_each_gpu_timed(recording, run):
    calibration = RECORDED[recording][run]["gpus"]["calibration"]
    per_gpu = calibration["per_gpu"]  # saved in the order the GPUs finished; the run asks in GPU order
    assert sorted(per_gpu) == ["0", "1"]
    agree, lines = calibration_verdict({gpu: per_gpu[gpu] for gpu in sorted(per_gpu)})
    assert agree is calibration["agree"] is True, lines
    assert lines == calibration["comparisons"]  # the second GPU against the first, as the run printed
