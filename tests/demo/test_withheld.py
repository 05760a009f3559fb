"""Withheld patients of the synthetic source: CXR patients absent from every MIMIC-IV table, with their
CXR metadata and Chest ImaGenome labels kept; exact counts in the manifest; nothing else moves."""

from __future__ import annotations

import polars as pl
import pytest

from ehrxqa_pipeline.demo.generate import generate_source
from ehrxqa_pipeline.sources.readers import resolve
from ehrxqa_pipeline.sources.schema import TABLES

SOURCE = dict(seed=11, patients=100, images=False, log=lambda _: None)
MIMICIV = [n for n, sf in TABLES.items() if sf.dataset == "mimiciv"]


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """{share: (root, manifest)} for 0 % and the default 5 %."""
    base = tmp_path_factory.mktemp("withheld")
    return {share: (base / str(share), generate_source(base / str(share), withheld_share=share, **SOURCE))
            for share in (0.0, None)}


def _read(root, name: str) -> pl.DataFrame:
    sf = TABLES[name]
    return pl.read_csv(resolve(root, name), separator=sf.sep, infer_schema=False)


def test_planted_counts_are_exact(sources):
    root, manifest = sources[None]
    planted = manifest["planted"]["withheld"]
    assert manifest["generator_version"] == "4" and manifest["scale"]["withheld_share"] == 0.05
    # 100 CXR patients, 12 of them gold: round(5 % x 100) withheld, round(5 % x 12) of them gold
    assert planted == {"share": 0.05, "patients": {"silver": 4, "gold": 1}, "images": {"silver": 28, "gold": 5},
                       "gold_relations_rows": 41}
    meta = _read(root, "cxr_metadata")
    patients = set(_read(root, "patients")["subject_id"])
    absent = meta.filter(~pl.col("subject_id").is_in(list(patients)))
    gold_ids = set(_read(root, "gold_relations")["patient_id"])
    withheld = set(absent["subject_id"])
    assert len(withheld & gold_ids) == planted["patients"]["gold"]
    assert len(withheld - gold_ids) == planted["patients"]["silver"]
    assert absent.height == sum(planted["images"].values())
    assert absent.filter(pl.col("subject_id").is_in(list(gold_ids))).height == planted["images"]["gold"]
    gold = _read(root, "gold_relations")
    assert gold.filter(~pl.col("patient_id").is_in(list(patients))).height == planted["gold_relations_rows"]
    # absent from every MIMIC-IV table that names a patient
    for name in MIMICIV:
        df = _read(root, name)
        if "subject_id" in df.columns:
            assert not set(df["subject_id"]) & withheld, name


def test_nothing_else_moves(sources):
    """CXR and Chest ImaGenome files are byte-identical to a source without withheld patients, and every
    MIMIC-IV table holds exactly that source's rows minus the withheld patients' rows."""
    (full, full_manifest), (part, manifest) = sources[0.0], sources[None]
    assert full_manifest["planted"]["withheld"]["patients"] == {"silver": 0, "gold": 0}
    for name, sf in TABLES.items():
        if sf.dataset != "mimiciv":
            assert resolve(full, name).read_bytes() == resolve(part, name).read_bytes(), name
    withheld = set(_read(full, "patients")["subject_id"]) - set(_read(part, "patients")["subject_id"])
    assert len(withheld) == sum(manifest["planted"]["withheld"]["patients"].values())
    for name in MIMICIV:
        a, b = _read(full, name), _read(part, name)
        if "subject_id" in a.columns:
            a = a.filter(~pl.col("subject_id").is_in(list(withheld)))
        assert a.equals(b), name
        assert manifest["rows"][name] == b.height
    # the other plants are measured on the remaining rows
    assert manifest["planted"]["cxr"] == full_manifest["planted"]["cxr"]
    assert manifest["planted"]["imagenome"] == full_manifest["planted"]["imagenome"]
