"""Counts of the planted properties of the synthetic MIMIC-IV tables, measured on the generated frames.

Later tests compare the pipeline's funnels (age filter, unit filters, study -> admission link, ICD
de-duplication, ...) against these numbers, so each is computed from the output itself by the rule the
pipeline is expected to apply, never copied from the generator's intentions.
"""

from __future__ import annotations

import polars as pl

from ehrxqa_pipeline.demo.ehr.icd import shared_titles, version_collisions


def minority_unit_rows(df: pl.DataFrame, unit: str) -> int:
    """Rows whose non-null unit is not their item's most frequent unit (ties: alphabetical first)."""
    d = df.filter(pl.col(unit).is_not_null()).group_by("itemid", unit).len()
    top = d.sort(["itemid", "len", unit], descending=[False, True, False]).group_by("itemid").first()
    return int(d["len"].sum() - top["len"].sum())


def study_transfer_matches(studies: pl.DataFrame, transfers: pl.DataFrame) -> dict:
    """How many transfer rows cover each study (intime <= study_datetime <= outtime, same subject)."""
    m = (studies.select("subject_id", "study_id", "study_datetime")
         .join(transfers.select("subject_id", "hadm_id", "intime", "outtime"), on="subject_id")
         .filter(pl.col("study_datetime").is_between(pl.col("intime"), pl.col("outtime")))
         .group_by("study_id").agg(n=pl.len(), with_hadm=pl.col("hadm_id").is_not_null().any()))
    one = m.filter(pl.col("n") == 1)
    return {"none": int(studies.height - m.height), "one_with_hadm": int(one["with_hadm"].sum()),
            "one_without_hadm": int((~one["with_hadm"]).sum()), "several": int((m["n"] > 1).sum())}


def planted_counts(t: dict[str, pl.DataFrame], patients: pl.DataFrame, studies: pl.DataFrame) -> dict:
    adm = t["admissions"]
    age = adm.join(patients.select("subject_id", "anchor_age", "anchor_year"), on="subject_id").select(
        pl.col("admittime").dt.year() - pl.col("anchor_year") + pl.col("anchor_age"))
    los = (adm["dischtime"] - adm["admittime"]).dt.total_seconds() / 86_400
    inside = (studies.select("subject_id", "study_id", "study_datetime")
              .join(adm.select("subject_id", "admittime", "dischtime"), on="subject_id")
              .filter(pl.col("study_datetime").is_between(pl.col("admittime"), pl.col("dischtime")))
              ["study_id"].n_unique())
    dose = t["prescriptions"]["dose_val_rx"].str.replace_all(",", "")
    lab = t["labevents"]
    return {
        "rows": {name: int(df.height) for name, df in t.items()},
        "admissions_dischtime_before_admittime": int((adm["dischtime"] < adm["admittime"]).sum()),
        "admissions_age_over_89": int((age.to_series() > 89).sum()),
        "admissions_died": int(adm["hospital_expire_flag"].sum()),
        "admissions_los_over_30_days": int((los > 30).sum()),
        "admissions_with_icu": int(t["icustays"]["hadm_id"].n_unique()),
        "studies_inside_admission": int(inside),
        "study_transfer_matches": study_transfer_matches(studies, t["transfers"]),
        "icd_code_version_collisions": {"diagnoses": version_collisions(t["d_icd_diagnoses"]),
                                        "procedures": version_collisions(t["d_icd_procedures"])},
        "icd_shared_long_titles": {"diagnoses": shared_titles(t["d_icd_diagnoses"]),
                                   "procedures": shared_titles(t["d_icd_procedures"])},
        "labevents_minority_unit_rows": minority_unit_rows(lab, "valueuom"),
        "labevents_null_hadm_rows": int(lab["hadm_id"].null_count()),
        "labevents_null_valuenum_rows": int(lab["valuenum"].null_count()),
        "prescriptions_non_integer_dose_rows": int((~dose.str.contains(r"^\d+$")).sum()),
        "prescriptions_null_stoptime_rows": int(t["prescriptions"]["stoptime"].null_count()),
        "chartevents_minority_unit_rows": minority_unit_rows(t["chartevents"], "valueuom"),
        "chartevents_null_valuenum_rows": int(t["chartevents"]["valuenum"].null_count()),
        "inputevents_non_ml_rows": int((t["inputevents"]["amountuom"] != "ml").sum()),
        "microbiologyevents_null_charttime_rows": int(t["microbiologyevents"]["charttime"].null_count()),
    }
