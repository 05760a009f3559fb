"""The MIMIC-IV 2.2 part of the synthetic PhysioNet source: all 16 hosp / icu tables.

Grains (as in the real release):
  patients            one row per patient (the cohort's patients, unchanged)
  admissions          one row per hospital admission (hadm_id)
  transfers           one row per ward event: ED, admit, transfer, discharge (transfer_id)
  icustays            one row per ICU stay (stay_id)
  diagnoses_icd       one row per billed diagnosis of an admission (hadm_id, seq_num)
  procedures_icd      one row per billed procedure of an admission (hadm_id, seq_num)
  d_icd_diagnoses     one row per (icd_code, icd_version)
  d_icd_procedures    one row per (icd_code, icd_version)
  labevents           one row per laboratory result (labevent_id)
  d_labitems          one row per laboratory item (itemid)
  prescriptions       one row per drug order (pharmacy_id)
  microbiologyevents  one row per specimen x test x organism x antibiotic (microevent_id)
  chartevents         one row per charted ICU observation (stay_id, charttime, itemid)
  inputevents         one row per ICU input order x item (orderid, itemid)
  outputevents        one row per ICU output measurement (stay_id, charttime, itemid)
  d_items             one row per ICU item (itemid)

Admissions are built around the X-ray studies (ehr.stays), so the transfers-based study -> admission link
of the database build finds one admission for most studies, none for ED-only and outpatient studies, and
two overlapping rows for a planted few. Each random step draws from its own generator
``rng.generator(seed, "ehr.<step>")``.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ehrxqa_pipeline.demo.ehr import vocab as V
from ehrxqa_pipeline.demo.ehr.admissions import make_stays
from ehrxqa_pipeline.demo.ehr.icd import make_icd_dictionaries
from ehrxqa_pipeline.demo.ehr.icu import d_items, make_chartevents, make_inputevents, make_outputevents
from ehrxqa_pipeline.demo.ehr.labs import d_labitems, make_labevents, outpatient_slots
from ehrxqa_pipeline.demo.ehr.micro import make_microbiologyevents
from ehrxqa_pipeline.demo.ehr.orders import make_diagnoses, make_prescriptions, make_procedures
from ehrxqa_pipeline.demo.ehr.planted import planted_counts
from ehrxqa_pipeline.demo.ehr.stays import build_timeline
from ehrxqa_pipeline.demo.ehr.util import DAY, table
from ehrxqa_pipeline.demo.scale import Scale
from ehrxqa_pipeline.demo.withheld import withhold
from ehrxqa_pipeline.rng import generator

TABLE_ORDER = ("patients", "admissions", "transfers", "diagnoses_icd", "procedures_icd", "d_icd_diagnoses",
               "d_icd_procedures", "labevents", "d_labitems", "prescriptions", "microbiologyevents",
               "icustays", "chartevents", "inputevents", "outputevents", "d_items")


def _bad_admissions(n_patients: int) -> int:
    """Admissions discharged before admittime: 3 at demo size, about one per 7,000 patients beyond
    (build_timeline lowers it to 0.5 % of the admissions for tiny cohorts)."""
    return max(3, round(n_patients / 7_000))


def _icd_tail(scale: Scale) -> int:
    """Generated codes per ICD version: a few hundred at demo size, thousands at full size."""
    return int(min(2_000, max(150, scale.cxr_patients // 30)))


def make_ehr(seed: int, scale: Scale, patients: pl.DataFrame, studies: pl.DataFrame,
             withheld: pl.Series | None = None) -> tuple[dict[str, pl.DataFrame], dict]:
    """All 16 MIMIC-IV tables (exact real columns and types) and the planted counts measured on them.

    ``patients``: subject_id, gender, anchor_age, anchor_year, anchor_year_group, dod, has_cxr, is_gold;
    ``studies``: subject_id, study_id, study_datetime (every subject_id present in ``patients``).
    ``withheld``: subject_ids whose rows are removed from every table after generation (``demo.withheld``);
    the planted counts are measured on what remains, over the studies of the remaining patients.
    """
    density = scale.event_density
    patients = patients.sort("subject_id")
    tl = build_timeline(seed, patients, studies, _bad_admissions(patients.height))
    st = make_stays(seed, patients, tl)
    icd = make_icd_dictionaries(generator(seed, "ehr.icd_dictionaries"), _icd_tail(scale))
    subject_ids = patients["subject_id"].to_numpy()

    # outpatient lab draws (hadm_id null): V.LAB_OUTPATIENT_SHARE of all draws, in the free time
    rng = generator(seed, "ehr.outpatient_labs")
    ok = st.adm.filter("ok")
    inpatient = ((ok["end"] - ok["start"]) / DAY * V.LAB_DRAWS_PER_DAY * density + 1).sum()
    mean = inpatient * V.LAB_OUTPATIENT_SHARE / (1 - V.LAB_OUTPATIENT_SHARE) / patients.height
    out_p, out_t = outpatient_slots(rng, st.adm, tl.ed_visits, tl.win_lo, tl.win_hi,
                                    rng.poisson(mean, patients.height))

    # one body weight per patient, a little different at each ICU stay (charted and used by inputs)
    rng = generator(seed, "ehr.weights")
    w_patient = np.clip(rng.normal(81, 20, patients.height), 40, 180)
    weight = w_patient[st.icu["p"].to_numpy()] + rng.normal(0, 2, st.icu.height)

    tables = {
        "patients": table("patients", {c: patients[c] for c in ("subject_id", "gender", "anchor_age",
                                                                "anchor_year", "anchor_year_group", "dod")}),
        "admissions": st.admissions,
        "transfers": st.transfers,
        "diagnoses_icd": make_diagnoses(seed, st.adm, icd),
        "procedures_icd": make_procedures(seed, st.adm, icd),
        "d_icd_diagnoses": icd.diagnoses,
        "d_icd_procedures": icd.procedures,
        "labevents": make_labevents(seed, density, st.adm, subject_ids, out_p, out_t),
        "d_labitems": d_labitems(),
        "prescriptions": make_prescriptions(seed, density, st.adm),
        "microbiologyevents": make_microbiologyevents(seed, density, st.adm),
        "icustays": st.icustays,
        "chartevents": make_chartevents(seed, density, st.icu, weight),
        "inputevents": make_inputevents(seed, density, st.icu, weight),
        "outputevents": make_outputevents(seed, density, st.icu),
        "d_items": d_items(),
    }
    tables = {name: tables[name] for name in TABLE_ORDER}
    if withheld is not None and not withheld.is_empty():
        tables = withhold(tables, withheld)
        kept = ~pl.col("subject_id").is_in(withheld.implode())
        patients, studies = patients.filter(kept), studies.filter(kept)
    return tables, planted_counts(tables, patients, studies)
