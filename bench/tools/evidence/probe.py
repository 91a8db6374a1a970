"""Claims about `attnsel probe` as it ran on H200 machines (bench/tools/probe_speed.py, record_nvml)."""

from __future__ import annotations

from attnsel.bench.tools.evidence.claims import Recordings, claim, expect

PROBE_SPEED = {"probe/device_h200x1/probe_speed_x1.json": (1, 0.36), "probe/device_h200x2/probe_speed_x2.json": (2, 0.49)}


@claim("docs/evidence.md 'Measured (H200)': `attnsel probe --json` takes 0.36 s (1 x H200) and 0.49 s (2 x H200) as a "
       "subprocess, median, under the 0.5 s target, without importing torch", *PROBE_SPEED)
def probe_is_fast_and_imports_no_torch(rec: Recordings) -> None:
    for name, (gpus, stated_s) in PROBE_SPEED.items():
        doc = rec.json(name)
        run, inside = doc["subprocess"], doc["in_process"]
        expect(run["exit_code"] == 0 and inside["gpus"] == gpus and inside["source"] == "nvml", f"{name}: not {gpus} GPUs via NVML")
        expect(round(run["median_s"], 2) == stated_s, f"{name}: median {run['median_s']:.2f} s, README says {stated_s} s")
        expect(run["median_s"] < doc["target_s"] == 0.5, f"{name}: median {run['median_s']} s not under the 0.5 s target")
        expect(not run["torch_imported"] and not inside["torch_in_sys_modules"], f"{name}: torch was imported")
