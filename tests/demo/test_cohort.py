"""Synthetic cohort and MIMIC-CXR metadata: schema, determinism, plants, time consistency."""

from __future__ import annotations

import re

import polars as pl
import pytest

from ehrxqa_pipeline.demo.cohort import YEAR_GROUPS, make_cohort
from ehrxqa_pipeline.demo.cxr_metadata import make_cxr_metadata
from ehrxqa_pipeline.demo.scale import SCALES
from ehrxqa_pipeline.sources.schema import CXR_METADATA

SCALE = SCALES["demo"].with_patients(120)
DTYPES = {"int": pl.Int64, "float": pl.Float64, "str": pl.String}


@pytest.fixture(scope="module")
def built():
    cohort = make_cohort(7, SCALE)
    meta, planted = make_cxr_metadata(7, SCALE, cohort)
    return cohort, meta, planted


def image_datetime(meta: pl.DataFrame) -> pl.Expr:
    """StudyDate (YYYYMMDD int) + StudyTime (HHMMSS.fff float) -> Datetime, as the pipeline builds it."""
    ms = (pl.col("StudyTime") * 1000).round(0).cast(pl.Int64)
    return (pl.col("StudyDate").cast(pl.String).str.to_date("%Y%m%d").cast(pl.Datetime("ms"))
            + pl.duration(hours=ms // 10_000_000, minutes=ms // 100_000 % 100, seconds=ms // 1000 % 100,
                          milliseconds=ms % 1000))


def test_patients(built):
    cohort, _, _ = built
    p = cohort.patients
    assert p.schema == pl.Schema({"subject_id": pl.Int64, "gender": pl.String, "anchor_age": pl.Int64,
                                  "anchor_year": pl.Int64, "anchor_year_group": pl.String, "dod": pl.Date,
                                  "has_cxr": pl.Boolean, "is_gold": pl.Boolean})
    assert p.height == SCALE.cxr_patients + SCALE.ehr_only_patients
    assert p["has_cxr"].sum() == SCALE.cxr_patients
    assert p["subject_id"].is_unique().all() and p["subject_id"].is_between(10_000_000, 19_999_999).all()
    assert sorted((p["subject_id"] // 1_000_000).unique().to_list()) == list(range(10, 20))
    assert set(p["gender"]) == {"F", "M"} and set(p["anchor_year_group"]) <= set(YEAR_GROUPS)
    assert p["anchor_age"].is_between(18, 91).all() and p["anchor_year"].is_between(2110, 2200).all()
    gold = p.filter("is_gold")
    assert gold.height == SCALE.gold_patients and gold["has_cxr"].all()
    assert 0.02 < p["dod"].is_not_null().mean() < 0.4


def test_studies(built):
    cohort, _, _ = built
    s, p = cohort.studies, cohort.patients
    assert s.schema == pl.Schema({"subject_id": pl.Int64, "study_id": pl.Int64, "study_datetime": pl.Datetime("us")})
    assert s["study_id"].is_unique().all() and s["study_id"].is_between(50_000_000, 59_999_999).all()
    assert (s["study_datetime"].dt.microsecond() == 0).all()
    j = s.join(p, on="subject_id")
    assert j["has_cxr"].all() and j.select(pl.col("subject_id").n_unique()).item() == SCALE.cxr_patients
    year = pl.col("study_datetime").dt.year()
    assert j.filter((year < pl.col("anchor_year")) | (year >= pl.col("anchor_year") + 8)).is_empty()
    n = s.group_by("subject_id").len()
    heavy = n.filter(pl.col("len") > 20)
    assert heavy.height == SCALE.heavy_patients and heavy["len"].max() <= 40
    gold = n.join(p.filter("is_gold"), on="subject_id")
    assert gold.height == SCALE.gold_patients and (gold["len"] >= 2).all() and (gold["len"] <= 20).all()
    ties = s.filter(pl.struct("subject_id", "study_datetime").is_duplicated())
    assert ties.height >= 4
    last = s.group_by("subject_id").agg(pl.col("study_datetime").max().dt.date().alias("last"))
    dead = p.join(last, on="subject_id").filter(pl.col("dod").is_not_null())
    assert (dead["dod"] > dead["last"]).all()


def test_determinism(built):
    cohort, meta, planted = built
    again = make_cohort(7, SCALE)
    meta2, planted2 = make_cxr_metadata(7, SCALE, again)
    assert again.patients.equals(cohort.patients) and again.studies.equals(cohort.studies)
    assert meta2.equals(meta) and planted2 == planted
    assert not make_cohort(8, SCALE).studies.equals(cohort.studies)


def test_metadata_layout(built):
    cohort, meta, planted = built
    assert meta.columns == list(CXR_METADATA.header)
    assert dict(meta.schema) == {c.name: DTYPES[c.type] for c in CXR_METADATA.columns}
    assert meta["dicom_id"].is_unique().all()
    pattern = re.compile(r"^[0-9a-f]{8}(-[0-9a-f]{8}){4}$")
    assert all(pattern.match(d) for d in meta["dicom_id"])
    assert set(meta["ViewPosition"].drop_nulls()) <= {"PA", "AP", "LATERAL", "LL", "AP AXIAL", "PA LLD"}
    assert meta["Rows"].is_between(SCALE.image_min, SCALE.image_max).all()
    assert meta["Columns"].is_between(SCALE.image_min, SCALE.image_max).all()
    assert meta.join(cohort.studies, on=["subject_id", "study_id"]).height == meta.height
    assert planted["images"] == meta.height and planted["studies"] == cohort.studies.height


def test_metadata_plants(built):
    cohort, meta, planted = built
    frontal = pl.col("ViewPosition").is_in(["AP", "PA"])
    per_study = meta.group_by("study_id").agg(f=frontal.sum(), n=pl.len())
    assert per_study.filter(pl.col("f") == 0).height == planted["nonfrontal_only_studies"] >= 1
    assert per_study.filter(pl.col("f") >= 2).height == planted["studies_with_extra_frontal"] >= 2
    assert meta.filter(frontal).height == planted["frontal_images"]
    same = meta.filter(frontal).group_by("study_id", "StudyDate", "StudyTime").len().filter(pl.col("len") > 1)
    assert same.height >= 1  # frontal images at the identical time: the dicom_id decides
    assert meta["ViewPosition"].null_count() >= 1
    assert planted["study_time_below_100000"] == (meta["StudyTime"] < 100000).sum() > 0


def test_study_time_consistency(built):
    cohort, meta, _ = built
    m = meta.with_columns(dt=image_datetime(meta)).join(cohort.studies, on=["subject_id", "study_id"])
    off = (pl.col("dt") - pl.col("study_datetime").cast(pl.Datetime("ms"))).dt.total_milliseconds()
    assert m.select(off.min()).item() >= -5000 and m.select(off.max()).item() < 8000
    # The image the one-per-study rule picks (earliest frontal, then smallest dicom_id) carries the
    # study's datetime to the second.
    pick = (m.filter(pl.col("ViewPosition").is_in(["AP", "PA"])).sort("study_id", "dt", "dicom_id")
            .unique("study_id", keep="first"))
    assert (pick["dt"].dt.truncate("1s") == pick["study_datetime"].cast(pl.Datetime("ms"))).all()
    assert (m["StudyDate"] == m["study_datetime"].dt.strftime("%Y%m%d").cast(pl.Int64)).all()
