"""Claims about the recorded parity sweeps against vLLM's own selector (one per release)."""

from __future__ import annotations

from attnsel.bench.tools.evidence.claims import Recordings, claim, expect


# --- parity with vLLM's selector (README "parity": many thousands of cases, 0 mismatches) ---------

PARITY = tuple(f"parity/parity_0{minor}.json" for minor in range(17, 34))
CAPABILITIES = ["10.0", "10.3", "11.0", "12.0", "12.1", "7.0", "7.5", "8.0", "8.6", "8.9", "9.0"]


@claim("README 'parity': each of the 17 releases swept >= 20,000 cases over every capability 7.0-12.1 "
       "with 0 mismatches; >= 150 kept; ViT answered for 11 capabilities x 3 dtypes", *PARITY)
def parity_sweeps_are_large_and_clean(rec: Recordings) -> None:
    for name in PARITY:
        doc = rec.json(name)
        expect(doc["cases_compared"] >= 20000 and doc["mismatching_cases"] == 0,
               f"{name}: {doc['cases_compared']} cases, {doc['mismatching_cases']} mismatching")
        expect(doc["coverage_values"]["capability"] == CAPABILITIES, f"{name}: capabilities {doc['coverage_values']['capability']}")
        expect(len(doc["cases"]) >= 150, f"{name}: {len(doc['cases'])} cases kept")
        expect(len(doc["vit"]["answers"]) == 33, f"{name}: {len(doc['vit']['answers'])} ViT answers")
