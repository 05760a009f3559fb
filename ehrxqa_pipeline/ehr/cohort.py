"""Image set, admission rules, eligible patients and the patient draw of one database.

Image sets (reference 5.1): the silver database uses the MIMIC-CXR-VQA *valid* split (``splits.silver``),
the gold database every study of the gold cohort (``cxr_cohort.gold``: StudyOrder <= 20, the gold image at
StudyOrder 1). Study times are truncated to whole seconds.

Admission rules, first failing reason wins (``admission_rules``, ``los_rule``; ``<build>._admissions``):
  ``discharge_before_admission``  dischtime < admittime (or a time missing);
  ``age_outside_range``  age at admission = year(admittime) - anchor_year + anchor_age (the paper's formula,
      on the source timeline, where anchor_year lives) outside [min_age, max_age] (11-89);
  ``los_outlier``  length of stay (exact days) above the ``los_quantile`` (0.99) of the stays that passed
      the two rules above, computed over the candidate patients' admissions (the published script uses the
      whole of MIMIC-IV, defect 19; the threshold is reported).

A candidate patient (one with an image in the set) is eligible when it is in ``patients`` (else
``not_in_mimiciv``: MIMIC-IV withholds some MIMIC-CXR patients, about 5 % in 2.2) and keeps at least one
admission (else ``no_eligible_admission``; ``PATIENT_RULES``); both reasons name the patient in
``<build>.patients_rejected``.
It can be a *current* patient when its latest kept admission (by admittime) contains
an instant ``u`` whose time of day is the current time's (23:59:00) with u >= the admission's admittime,
u >= the first study, u < dischtime, the first study and the admittime no more than the time frame
(start .. current time) before u, and the patient alive after that discharge (dod null or later than
dischtime). Shifting ``u`` onto the current time then takes whole days, keeps at least one study inside
the frame, leaves that admission open and the patient alive.

The draw (``sample_patients``): one permutation of the eligible patients (sorted by subject_id) from
``rng.generator(seed, "ehr_db.<which>.patients")``; the current patients are the first
``round(ratio * n)`` current-eligible patients in that order, the others the first ``n - n_current`` of
the remaining ones. ``n`` is the configured count clamped to the eligible patients, ``n_current`` clamped
to the current-eligible ones; each clamp is reported in the messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb
import numpy as np
import polars as pl

from ehrxqa_pipeline.ehr.config import DbConfig
from ehrxqa_pipeline.filters import Rule, reason_sql
from ehrxqa_pipeline.rng import generator


def image_set_sql(which: str) -> str:
    """subject_id, study_id, image_id, viewposition, study_datetime (whole seconds), studyorder."""
    if which == "silver":
        return """
            SELECT i.subject_id, i.study_id, i.image_id, i.view_position AS viewposition,
                   date_trunc('second', c.study_datetime) AS study_datetime, c.study_order AS studyorder
            FROM splits.silver i JOIN cxr_cohort.silver c USING (image_id) WHERE i.split = 'valid'"""
    return """
        SELECT subject_id, study_id, image_id, view_position AS viewposition,
               date_trunc('second', study_datetime) AS study_datetime, study_order AS studyorder
        FROM cxr_cohort.gold"""


def admission_rules(config: DbConfig) -> tuple[Rule, ...]:
    """The first two admission rules (a, p: the source admission and its patient)."""
    age = "year(a.admittime) - p.anchor_year + p.anchor_age"
    return (
        Rule("discharge_before_admission", "a.admittime IS NULL OR a.dischtime IS NULL OR a.dischtime < a.admittime",
             "a stay needs both times, in order, to be placed on the timeline"),
        Rule("age_outside_range", f"NOT ({age} BETWEEN {config.min_age} AND {config.max_age})",
             "the published age range at admission"),
    )


def los_rule(los_max: float | None) -> Rule:
    """The third admission rule, over the stays that passed the first two (``los_max``: their quantile)."""
    return Rule("los_outlier", f"los_days > {los_max if los_max is not None else 'NULL'}",
                "very long stays are outliers (the published build drops them too)")


# A candidate patient (one with an image in the set), in ``_candidates``.
PATIENT_RULES = (
    Rule("not_in_mimiciv", "NOT in_patients", "MIMIC-IV withholds some MIMIC-CXR patients: no EHR to ask about"),
    Rule("no_eligible_admission", "n_adm = 0", "without a kept admission the patient has no EHR rows to ask about"),
)


def stage_candidates(con: duckdb.DuckDBPyConnection, which: str, config: DbConfig, build: str) -> dict:
    """Create ``<build>._images``, ``_admissions`` (with reasons) and ``_candidates``; return counts."""
    con.execute(f"CREATE OR REPLACE TABLE {build}._images AS {image_set_sql(which)} "
                f"ORDER BY subject_id, study_datetime, study_id")
    con.execute(f"""
    CREATE OR REPLACE TEMP TABLE _adm AS
    SELECT a.subject_id, a.hadm_id, a.admittime, a.dischtime,
           year(a.admittime) - p.anchor_year + p.anchor_age AS age,
           epoch(a.dischtime - a.admittime) / 86400.0 AS los_days,
           {reason_sql(admission_rules(config))} AS reason
    FROM ingest.admissions a JOIN ingest.patients p USING (subject_id)
    WHERE a.subject_id IN (SELECT subject_id FROM {build}._images)""")
    los_max = con.execute(f"SELECT quantile_cont(los_days, {config.los_quantile}) FROM _adm "
                          f"WHERE reason IS NULL").fetchone()[0]
    los_max = float(los_max) if los_max is not None else None
    con.execute(f"""
    CREATE OR REPLACE TABLE {build}._admissions AS
    SELECT subject_id, hadm_id, admittime, dischtime, age, los_days,
           coalesce(reason, {reason_sql([los_rule(los_max)])}) AS reason
    FROM _adm ORDER BY subject_id, admittime, hadm_id""")
    con.execute("DROP TABLE _adm")

    now = config.current_time
    tod_s = now.hour * 3600 + now.minute * 60 + now.second
    frame_days = (now.date() - config.start.date()).days  # u may lie this many days after the first study
    con.execute(f"""
    CREATE OR REPLACE TABLE {build}._candidates AS
    WITH first AS (SELECT subject_id, min(study_datetime) AS first_study FROM {build}._images GROUP BY 1),
    kept AS (SELECT *, row_number() OVER (PARTITION BY subject_id ORDER BY admittime DESC, hadm_id DESC) AS k
             FROM {build}._admissions WHERE reason IS NULL),
    latest AS (SELECT subject_id, count(*) AS n_adm, max(hadm_id) FILTER (k = 1) AS latest_hadm,
                      max(admittime) FILTER (k = 1) AS latest_admit,
                      max(dischtime) FILTER (k = 1) AS latest_disch
               FROM kept GROUP BY 1),
    base AS (
        SELECT f.subject_id, p.subject_id IS NOT NULL AS in_patients, coalesce(l.n_adm, 0) AS n_adm,
               f.first_study, l.latest_hadm, l.latest_admit, l.latest_disch, p.dod,
               p.anchor_year - p.anchor_age AS birth_year,
               greatest(l.latest_admit, f.first_study) - to_seconds({tod_s}) AS lo_shift,
               l.latest_disch - to_seconds({tod_s}) AS hi_shift
        FROM first f LEFT JOIN ingest.patients p USING (subject_id) LEFT JOIN latest l USING (subject_id)),
    days AS (
        SELECT *,
               CAST(lo_shift AS DATE) + CASE WHEN CAST(lo_shift AS DATE) < lo_shift THEN 1 ELSE 0 END
                   AS cur_day_first,
               least(CAST(hi_shift AS DATE) - CASE WHEN CAST(CAST(hi_shift AS DATE) AS TIMESTAMP) = hi_shift
                                                    THEN 1 ELSE 0 END,
                     CAST(first_study AS DATE) + {frame_days}, CAST(latest_admit AS DATE) + {frame_days})
                   AS cur_day_last
        FROM base)
    SELECT subject_id, in_patients, n_adm, first_study, latest_hadm, latest_admit, latest_disch, dod, birth_year,
           cur_day_first, greatest(cur_day_last - cur_day_first + 1, 0) AS cur_days,
           {reason_sql(PATIENT_RULES)} AS reason,
           in_patients AND n_adm > 0 AND cur_day_last >= cur_day_first
               AND (dod IS NULL OR CAST(dod AS TIMESTAMP) > latest_disch) AS current_ok
    FROM days ORDER BY subject_id""")
    adm_reasons = dict(con.execute(f"SELECT reason, count(*) FROM {build}._admissions WHERE reason IS NOT NULL "
                                   f"GROUP BY 1 ORDER BY 1").fetchall())
    cand = con.execute(f"SELECT count(*), count(*) FILTER (reason IS NULL), count(*) FILTER (current_ok) "
                       f"FROM {build}._candidates").fetchone()
    return {"los_max_days": los_max, "admission_reasons": adm_reasons, "candidates": int(cand[0]),
            "eligible": int(cand[1]), "current_eligible": int(cand[2])}


@dataclass
class Sampling:
    requested: int
    eligible: int
    current_eligible: int
    n_patients: int
    n_current_target: int  # round(ratio * n_patients)
    n_current: int
    messages: list[str] = field(default_factory=list)


def sample_patients(con: duckdb.DuckDBPyConnection, which: str, config: DbConfig, seed: int,
                    build: str) -> Sampling:
    """Create ``<build>._sampled`` (subject_id, is_current) from ``_candidates``; see the module docstring."""
    cand = con.execute(f"SELECT subject_id, current_ok FROM {build}._candidates WHERE reason IS NULL "
                       f"ORDER BY subject_id").fetchnumpy()
    subjects = np.asarray(cand["subject_id"], dtype=np.int64)
    current_ok = np.asarray(cand["current_ok"], dtype=bool)
    requested = config.n_patients(which)
    s = Sampling(requested, len(subjects), int(current_ok.sum()), 0, 0, 0)
    s.n_patients = min(requested, len(subjects))
    if s.n_patients < requested:
        s.messages.append(f"{which}: {requested} patients requested, only {len(subjects)} eligible; "
                          f"the database has {s.n_patients}")
    s.n_current_target = config.n_current(s.n_patients)
    s.n_current = min(s.n_current_target, s.current_eligible)
    if s.n_current < s.n_current_target:
        s.messages.append(f"{which}: {s.n_current_target} current patients wanted, only {s.current_eligible} "
                          f"patients can be current; the database has {s.n_current}")

    order = generator(seed, f"ehr_db.{which}.patients").permutation(len(subjects))
    ranked_ok = current_ok[order]
    current_idx = order[ranked_ok][: s.n_current]
    taken = np.zeros(len(subjects), dtype=bool)
    taken[current_idx] = True
    other_idx = order[~taken[order]][: s.n_patients - s.n_current]
    is_current = np.concatenate([np.ones(len(current_idx), bool), np.zeros(len(other_idx), bool)])
    picked = np.concatenate([subjects[current_idx], subjects[other_idx]])
    frame = pl.DataFrame({"subject_id": picked, "is_current": is_current},
                         schema={"subject_id": pl.Int64, "is_current": pl.Boolean})
    con.register("_sampled_frame", frame)
    try:
        con.execute(f"CREATE OR REPLACE TABLE {build}._sampled AS "
                    f"SELECT * FROM _sampled_frame ORDER BY subject_id")
    finally:
        con.unregister("_sampled_frame")
    return s
