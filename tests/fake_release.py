"""A pytest plugin (`-p fake_release`) for tests/test_adding_a_release.py: the versions folder as it is,
plus one release more that is a data file only -- the newest release's data under the next minor
version, with no recording of it anywhere. Loaded before collection, so every test that takes its
releases from the versions folder sees the new one."""

import json
import shutil
import tempfile
from pathlib import Path


def pytest_configure(config):
    from attnsel.attention.versions import registry

    folder = Path(tempfile.mkdtemp(prefix="attnsel-versions-"))
    for path in registry.VERSIONS_DIR.glob("*.json"):
        shutil.copy(path, folder / path.name)
    newest = registry.release_profiles()[-1]
    major, minor, _ = registry.resolved_data(newest)["vllm_release"]
    name = f"vllm_{major}_{minor + 1}"
    release = {"base": newest, "name": name, "vllm_version": f"{major}.{minor + 1}.0",
               "vllm_release": [major, minor + 1, 0]}
    (folder / f"{name}.json").write_text(json.dumps(release, indent=2) + "\n", encoding="utf-8")
    registry.VERSIONS_DIR = folder
    registry.raw_data.cache_clear()
    registry.resolved_data.cache_clear()
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
