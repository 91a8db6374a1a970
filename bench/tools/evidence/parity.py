"""Claims about the recorded sweeps against vLLM's own selector and hybrid block sizes (one per release)."""

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


# README "hybrid models": vLLM's own block-size answers for the bundled hybrid configs, per release
HYBRID_CASES = {"018": 162, "019": 162, "020": 162, "021": 162, "022": 162, "023": 162, "024": 180, "025": 162,
                "026": 180, "027": 180, "029": 162, "030": 200, "031": 200, "032": 180, "033": 180}
HYBRID = tuple(f"hybrid/hybrid_{release}.json" for release in HYBRID_CASES)


@claim("README 'hybrid models': vLLM 0.33.0 and 0.32.0 180 cases, 0.30.0/0.31.0 200, 0.26.0/0.27.0/0.24.0 180, "
       "0.18.0-0.23.0, 0.25.0 and 0.29.0 162 each, 0 mismatches in every one; 0.28.0 not recorded", *HYBRID)
def hybrid_sweeps_have_the_stated_size_and_no_mismatch(rec: Recordings) -> None:
    for release, cases in HYBRID_CASES.items():
        doc = rec.json(f"hybrid/hybrid_{release}.json")
        expect(doc["vllm_version"] == f"0.{int(release) % 100}.0", f"hybrid_{release}: recorded on vLLM {doc['vllm_version']}")
        expect(doc["compared"] == len(doc["cases"]) == cases,
               f"hybrid_{release}: {doc['compared']} compared, {len(doc['cases'])} kept, README says {cases}")
        expect(doc["mismatches"] == 0, f"hybrid_{release}: {doc['mismatches']} mismatches when recorded")
