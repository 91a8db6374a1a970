"""bench/tools/cli_replay.py, the check a behaviour-preserving refactor runs: its grid covers every
bundled model, every release and every recorded NVML scenario, and `compare` fails on any difference."""
import json

from attnsel.attention.versions import release_profiles
from attnsel.bench.tools import cli_replay


def test_the_grid_covers_every_model_release_and_scenario():
    grid = cli_replay.commands()
    flat = [" ".join(args) for args, _ in grid]
    models = [p.stem for p in (cli_replay.ROOT / "attention" / "models").glob("*.json")]
    assert all(any(f"--model {m} " in f"{c} " for c in flat) for m in models)
    assert len({c.split("--vllm-version ")[1].split()[0] for c in flat if "--vllm-version " in c and "all" not in c}) \
        == len(release_profiles())
    scenarios = {s for _, s in grid if s}
    assert scenarios == {str(p) for p in (cli_replay.FIXTURES / "probe").glob("*.json")}


def test_compare_passes_identical_recordings_and_names_a_changed_answer(tmp_path, capsys):
    answer = {"rc": 0, "out": "vLLM selects: FLASH_ATTN\n", "err": "", "exc": None}
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    before.write_text(json.dumps({'["explain"]': answer}))
    after.write_text(json.dumps({'["explain"]': answer}))
    assert cli_replay.compare(before, after) == 0
    after.write_text(json.dumps({'["explain"]': {**answer, "out": "vLLM selects: FLASHINFER\n"}}))
    assert cli_replay.compare(before, after) == 1
    printed = capsys.readouterr().out
    assert 'differs: ["explain"]' in printed and "+vLLM selects: FLASHINFER" in printed
