"""The synthetic patient and study cohort that every other generator builds on.

Grain: ``patients`` one row per MIMIC-IV patient (CXR patients and EHR-only patients); ``studies`` one row
per chest X-ray study of a CXR patient. The EHR generator wraps admissions around the study datetimes and
the CXR generators attach images, boxes and labels to the studies, so this schema is a contract.

Planted here: exactly ``scale.heavy_patients`` patients with 21-40 studies (the StudyOrder <= 20 rule),
exactly ``scale.gold_patients`` gold patients (never heavy, always >= 2 studies so that the gold box file
has a 1st and a 2nd study image), and a few subjects with two studies at the identical datetime so that
the (datetime, study_id) tie-break of StudyOrder matters -- one of them, in the first heavy patient, sits
exactly on the 20th/21st boundary.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from ehrxqa_pipeline.demo.scale import Scale
from ehrxqa_pipeline.rng import generator

YEAR_GROUPS = ("2008 - 2010", "2011 - 2013", "2014 - 2016", "2017 - 2019")
MAX_STUDY_ORDER = 20
WINDOW_DAYS = 8 * 365  # studies fall in [anchor_year-01-01, anchor_year + 8 years)
DAY = 86_400


@dataclass(frozen=True)
class Cohort:
    """``patients``: subject_id, gender, anchor_age, anchor_year, anchor_year_group, dod, has_cxr, is_gold.
    ``studies``: subject_id, study_id, study_datetime (whole seconds), sorted by (subject, datetime, study_id)."""

    patients: pl.DataFrame
    studies: pl.DataFrame


def year_start_seconds(year: np.ndarray) -> np.ndarray:
    """Epoch seconds of YEAR-01-01 00:00:00 (vectorised)."""
    return (np.asarray(year) - 1970).astype("datetime64[Y]").astype("datetime64[s]").astype(np.int64)


def _geometric_p(mean: float, cap: int) -> float:
    """p of a geometric distribution on 1.. whose mean after capping at ``cap`` equals ``mean``."""
    lo, hi = 1e-6, 1.0
    for _ in range(60):  # E[min(G, cap)] = (1 - (1 - p)^cap) / p falls with p
        p = (lo + hi) / 2
        lo, hi = (p, hi) if (1 - (1 - p) ** cap) / p > mean else (lo, p)
    return (lo + hi) / 2


def _patients(rng: np.random.Generator, scale: Scale) -> pl.DataFrame:
    n = scale.cxr_patients + scale.ehr_only_patients
    # Unique offsets within the million, a shuffled prefix digit: ids spread over all p10..p19 folders.
    offsets = rng.choice(1_000_000, n, replace=False)
    prefix = rng.permutation(np.arange(n) % 10)
    subject = 10_000_000 + prefix * 1_000_000 + offsets
    has_cxr = np.zeros(n, bool)
    has_cxr[rng.permutation(n)[: scale.cxr_patients]] = True
    order = np.argsort(subject)
    subject, has_cxr = subject[order], has_cxr[order]
    # MIMIC-IV shifts every age above 89 to 91; a normal(60, 17) puts a few percent there.
    age = np.clip(np.rint(rng.normal(60, 17, n)), 18, 91).astype(np.int64)
    return pl.DataFrame({
        "subject_id": subject.astype(np.int64),
        "gender": np.where(rng.random(n) < 0.48, "M", "F"),
        "anchor_age": age,
        "anchor_year": rng.integers(2110, 2201, n),
        "anchor_year_group": np.asarray(YEAR_GROUPS)[rng.integers(0, 4, n)],
        "has_cxr": has_cxr,
    })


def _study_counts(rng: np.random.Generator, scale: Scale, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Studies per CXR patient and the gold / heavy flags (disjoint, exact counts)."""
    pick = rng.permutation(n)
    gold = np.zeros(n, bool)
    heavy = np.zeros(n, bool)
    gold[pick[: scale.gold_patients]] = True
    heavy[pick[scale.gold_patients: scale.gold_patients + scale.heavy_patients]] = True
    heavy_n = rng.integers(21, 41, n)
    # Non-heavy mean chosen so that the overall mean lands on scale.mean_studies.
    rest = max(1, n - scale.heavy_patients)
    target = max(1.05, (scale.mean_studies * n - 30.5 * scale.heavy_patients) / rest)
    counts = np.minimum(rng.geometric(_geometric_p(target, MAX_STUDY_ORDER), n), MAX_STUDY_ORDER)
    counts = np.where(heavy, heavy_n, np.where(gold, np.maximum(counts, 2), counts))
    return counts, gold, heavy


def _times(rng: np.random.Generator, counts: np.ndarray, year0: np.ndarray) -> np.ndarray:
    """Whole-second study datetimes (epoch s), one block per patient, within the 8-year window."""
    owner = np.repeat(np.arange(len(counts)), counts)
    first = np.repeat(np.cumsum(counts) - counts, counts)
    # Gaps: about half within one admission (hours to days), the rest months apart.
    short = rng.random(len(owner)) < 0.45
    gap = np.where(short, rng.uniform(2 / 24, 5, len(owner)), rng.exponential(200, len(owner)))
    gap[first == np.arange(len(owner))] = 0.0
    cum = np.cumsum(gap)
    cum -= np.repeat(cum[np.cumsum(counts) - counts], counts)
    span = np.repeat(np.maximum.reduceat(cum, np.cumsum(counts) - counts), counts)
    limit = WINDOW_DAYS - 2.0
    cum = np.where(span > limit, cum * limit / np.maximum(span, 1e-9), cum)
    span = np.minimum(span, limit)
    start = np.repeat(rng.uniform(0, 1, len(counts)), counts) * (limit - span)
    t = (start + cum) * DAY
    # Keep time of day inside [00:00:10, 23:59:00) so that per-image offsets of a few seconds never cross
    # midnight (the metadata writes StudyDate and StudyTime separately).
    day, tod = np.divmod(t, DAY)
    tod = np.clip(tod, 10, DAY - 60)
    return np.repeat(year0, counts) + (day * DAY + np.floor(tod)).astype(np.int64)


def make_cohort(seed: int, scale: Scale) -> Cohort:
    """Patients (CXR + EHR-only) and the CXR patients' studies, deterministic in (seed, scale)."""
    patients = _patients(generator(seed, "cxr.patients"), scale)
    rng = generator(seed, "cxr.studies")
    cxr_idx = np.flatnonzero(patients["has_cxr"].to_numpy())
    counts, gold, heavy = _study_counts(rng, scale, len(cxr_idx))
    subj = patients["subject_id"].to_numpy()[cxr_idx]
    year0 = year_start_seconds(patients["anchor_year"].to_numpy()[cxr_idx])
    t = _times(rng, counts, year0)
    owner = np.repeat(np.arange(len(cxr_idx)), counts)
    study_id = 50_000_000 + rng.choice(10_000_000, len(t), replace=False)
    # Planted ties: a few non-gold patients get two studies at one datetime; the first heavy patient gets
    # its 20th and 21st study tied, right on the StudyOrder boundary.
    order = np.lexsort((t, owner))
    t, owner_s = t[order], owner[order]
    pos = np.arange(len(t)) - np.repeat(np.cumsum(counts) - counts, counts)
    multi = np.flatnonzero((pos >= 1) & ~gold[owner_s] & ~heavy[owner_s])
    n_ties = min(len(multi), max(2, round(0.002 * len(cxr_idx))))
    tie_rows = rng.choice(multi, n_ties, replace=False) if n_ties else np.zeros(0, np.int64)
    if heavy.any():
        h = np.flatnonzero(heavy)[0]
        tie_rows = np.append(tie_rows, np.flatnonzero((owner_s == h) & (pos == MAX_STUDY_ORDER)))
    t[tie_rows] = t[tie_rows - 1]
    studies = pl.DataFrame({
        "subject_id": subj[owner_s].astype(np.int64),
        "study_id": study_id.astype(np.int64),
        "study_datetime": t * 1_000_000,
    }).with_columns(pl.col("study_datetime").cast(pl.Datetime("us")))
    studies = studies.sort("subject_id", "study_datetime", "study_id")

    is_gold = np.zeros(patients.height, bool)
    is_gold[cxr_idx[gold]] = True
    last = studies.group_by("subject_id").agg(pl.col("study_datetime").max().dt.date().alias("last"))
    n = patients.height
    dies = rng.random(n) < 0.15
    after_last = rng.exponential(400, n).astype(np.int64) + 1
    any_day = rng.integers(0, WINDOW_DAYS, n)
    patients = (
        patients.with_columns(is_gold=pl.Series(is_gold), _dies=pl.Series(dies),
                              _after=pl.Series(after_last), _any=pl.Series(any_day))
        .join(last, on="subject_id", how="left", maintain_order="left")
        .with_columns(
            pl.when(~pl.col("_dies")).then(None)
            .when(pl.col("last").is_not_null()).then(pl.col("last") + pl.duration(days=pl.col("_after")))
            .otherwise(pl.date(pl.col("anchor_year"), 1, 1) + pl.duration(days=pl.col("_any")))
            .alias("dod"))
        .select("subject_id", "gender", "anchor_age", "anchor_year", "anchor_year_group", "dod", "has_cxr",
                "is_gold")
    )
    return Cohort(patients=patients, studies=studies)
