"""MIMIC-CXR patients withheld from MIMIC-IV (issue 15): `ehrxqa validate-source` and the build's blocking
source checks (the ingest contracts' contract, quarantine and foreign_keys checks) agree on planted sources
with 0 %, 5 % and 60 % of the CXR patients withheld, and both name the exact planted counts."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest

from ehrxqa_pipeline.cli import main
from ehrxqa_pipeline.contracts import CONTRACTS_DIR, load_contract
from ehrxqa_pipeline.ingest import ingest_table
from ehrxqa_pipeline.quality import check_foreign_keys, check_gx, check_quarantine, check_types_and_keys
from ehrxqa_pipeline.sources.report import ValidationReport
from ehrxqa_pipeline.sources.validate import validate_source

pytestmark = pytest.mark.slow  # generates and ingests a source three times: not in `make test-fast`

SHARES = (0.0, 0.05, 0.6)
# 100 CXR patients, 12 of them gold: 5 % withholds 4 silver + 1 gold patient, 60 % 53 + 7
SOURCE = dict(seed=11, patients=100, images=False, log=lambda _: None)
CONTRACTS = [load_contract(p.stem.replace(".", "/")) for p in sorted(CONTRACTS_DIR.glob("ingest.*.yaml"))]
META = "mimic-cxr-jpg/2.0.0/mimic-cxr-2.0.0-metadata.csv.gz"
GOLD_REL = "chest-imagenome/1.0.0/gold_dataset/gold_attributes_relations_500pts_500studies1st.txt"
PATIENTS = "mimiciv/2.2/hosp/patients.csv.gz"


@dataclass
class Planted:
    share: float
    root: Path
    manifest: dict
    outcomes: dict  # {contract asset: {check: outcome}} of the build's source checks
    code: int  # `ehrxqa validate-source ROOT`: its exit code and what it printed
    out: str
    report: ValidationReport  # validate_source(ROOT)


@pytest.fixture(scope="module", params=SHARES, ids=[f"withheld{s:.0%}" for s in SHARES])
def planted(request, tmp_path_factory) -> Planted:
    """A source with ``share`` of the CXR patients withheld, the build's source checks on it, and validate-source
    on it, run once for the module's tests: the command's exit code and output, and the report it printed (what
    ``validate_source`` returned to it)."""
    from ehrxqa_pipeline.demo.generate import generate_source

    base = tmp_path_factory.mktemp("withheld")
    root = base / "source"
    manifest = generate_source(root, withheld_share=request.param, **SOURCE)
    con = duckdb.connect()
    for contract in CONTRACTS:  # every table first: the foreign keys look at their parents
        ingest_table(con, root, contract, base / "stage")
    outcomes = {c.asset: {"contract": check_types_and_keys(con, c), "gx": check_gx(con, c),
                          "quarantine": check_quarantine(con, c), "foreign_keys": check_foreign_keys(con, c)}
                for c in CONTRACTS}
    con.close()
    # the command's own report, kept as it returns it (validating the source a second time for it cost a second)
    reports = []

    def kept(*args, **kwargs):
        reports.append(validate_source(*args, **kwargs))
        return reports[-1]
    with contextlib.redirect_stdout(io.StringIO()) as out, pytest.MonkeyPatch.context() as mp:
        mp.setattr("ehrxqa_pipeline.sources.validate.validate_source", kept)
        code = main(["validate-source", str(root)])
    assert len(reports) == 1
    return Planted(request.param, root, manifest, outcomes, code, out.getvalue(), reports[0])


def test_validate_source_and_build_checks_agree(planted):
    share, outcomes, report = planted.share, planted.outcomes, planted.report
    build_passes = all(o.passed for checks in outcomes.values() for o in checks.values())
    assert (planted.code == 0) == build_passes
    assert build_passes == (share < 0.5)  # the contracts' limit: half of the rows
    # check by check: a failing build check is an error of validate-source on the same file and column
    failing = {(a, n) for a, checks in outcomes.items() for n, o in checks.items() if not o.passed}
    errors = {(p.file, p.column) for p in report.errors}
    files = {"ingest/cxr_metadata": (META, "subject_id"), "ingest/gold_relations": (GOLD_REL, "patient_id")}
    assert errors == {files[a] for a, _ in failing}
    if share == 0.6:
        # 60 % of the patients: 61.9 % of the images, but the 7 of 12 gold patients hold 274 of 561 gold rows
        # (48.8 %), within the limit for both sides alike
        assert failing == {("ingest/cxr_metadata", "foreign_keys")}
        assert (GOLD_REL, "patient_id") in {(p.file, p.column) for p in report.warnings}


def test_orphan_counts_are_the_planted_counts(planted):
    share, manifest, outcomes, report = planted.share, planted.manifest, planted.outcomes, planted.report
    withheld = manifest["planted"]["withheld"]
    cxr = outcomes["ingest/cxr_metadata"]["foreign_keys"].metadata["subject_id->patients"]
    gold = outcomes["ingest/gold_relations"]["foreign_keys"].metadata["patient_id->patients"]
    n_images, n_gold_rows = manifest["rows"]["cxr_metadata"], manifest["rows"]["gold_relations"]
    assert cxr == {"rows": n_images, "orphans": sum(withheld["images"].values()),
                   "orphan_keys": sum(withheld["patients"].values()),
                   "orphan_fraction": round(sum(withheld["images"].values()) / n_images, 6),
                   "max_orphan_fraction": 0.5, "rows_with_quarantined_parent": 0}
    assert gold["orphans"] == withheld["gold_relations_rows"] and gold["orphan_keys"] == withheld["patients"]["gold"]
    assert gold["rows"] == n_gold_rows
    # validate-source measures the same thing
    stats = report.stats["foreign_keys"]
    assert stats["cxr_metadata.subject_id->patients"] == {k: v for k, v in cxr.items()
                                                          if k != "rows_with_quarantined_parent"}
    assert stats["gold_relations.patient_id->patients"] == {k: v for k, v in gold.items()
                                                            if k != "rows_with_quarantined_parent"}
    expected = {0.0: (0, 0, 0, 0), 0.05: (33, 5, 41, 1), 0.6: (351, 60, 274, 7)}[share]
    assert (cxr["orphans"], cxr["orphan_keys"], gold["orphans"], gold["orphan_keys"]) == expected


def test_messages_name_the_counts(planted):
    share, code, out = planted.share, planted.code, planted.out
    fk = planted.outcomes["ingest/cxr_metadata"]["foreign_keys"]
    n = planted.manifest["rows"]["cxr_metadata"]
    if share == 0.0:
        assert fk.passed and fk.description == "every reference resolves"
        assert code == 0 and "point at no row" not in out
    elif share == 0.05:
        counted = f"33 of {n:,} rows ({33 / n:.2%}; 5 distinct subject_id values)"
        assert fk.passed
        assert fk.description.startswith(f"subject_id->patients: {counted} point at no row of patients, within "
                                         f"the contract's 50.00% (MIMIC-IV withholds")
        assert code == 0
        warning = (f"{META}: {counted} in column 'subject_id' point at no row of {PATIENTS}, within the "
                   f"contract's 50.00% (data_contracts/ingest.cxr_metadata.yaml)")
        assert warning in out and out.count("point at no row") == 2  # metadata and gold relations
        # the 3 others: a planted admission, a gold box image, no JPEGs
        assert out.rstrip().endswith("Result: OK (0 errors, 5 warnings)")
    else:
        counted = f"351 of {n:,} rows ({351 / n:.2%}; 60 distinct subject_id values)"
        assert not fk.passed
        assert fk.description.startswith(f"subject_id->patients: {counted} point at no row of patients; the "
                                         f"contract allows 50.00%")
        assert code == 1
        assert (f"{META}: {counted} in column 'subject_id' point at no row of {PATIENTS}; the contract allows "
                f"50.00% (data_contracts/ingest.cxr_metadata.yaml)") in out
