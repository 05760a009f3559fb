"""The synthetic ``mimic-cxr-2.0.0-metadata.csv``: one row per chest X-ray image (DICOM).

Each study gets a primary frontal image (PA or AP) and, as in MIMIC-CXR, often a lateral; planted on top:
non-frontal-only studies, studies with 2-3 frontal images (some at the identical StudyTime, where the
smallest dicom_id decides), rare odd views ("AP AXIAL", "PA LLD", null), laterals taken seconds BEFORE the
frontal image (so "earliest image" only works after the frontal filter), StudyTime values below 100000.

By construction the primary frontal image is the one the pipeline's one-image-per-study rule must pick:
it carries the study's earliest frontal time and, on a tie, the study's smallest frontal dicom_id. That
bookkeeping (``image_book``) is what the Chest ImaGenome generator and the expected funnels are built on.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ehrxqa_pipeline.demo.cohort import MAX_STUDY_ORDER, Cohort
from ehrxqa_pipeline.demo.scale import Scale
from ehrxqa_pipeline.rng import generator
from ehrxqa_pipeline.sources.schema import CXR_METADATA

PRIMARY, EXTRA, LATERAL, ODD = 0, 1, 2, 3  # image kinds
_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)
_VIEW_MEANING = {"PA": "postero-anterior", "AP": "antero-posterior", "LATERAL": "lateral",
                 "LL": "left lateral", "AP AXIAL": "antero-posterior", "PA LLD": "postero-anterior"}


def dicom_ids(rng: np.random.Generator, n: int) -> np.ndarray:
    """n unique ids like ``02aa804e-bde0afdd-112c0b34-7bc16630-4e384014`` (bytes array, dtype S44)."""
    chars = _HEX[rng.integers(0, 16, (n, 40), dtype=np.uint8)]
    out = np.full((n, 44), ord("-"), np.uint8)
    for g in range(5):
        out[:, g * 9: g * 9 + 8] = chars[:, g * 8: g * 8 + 8]
    ids = out.view("S44").ravel()
    if len(np.unique(ids)) != n:  # 160 random bits: never in practice, but the contract is uniqueness
        raise RuntimeError("dicom_id collision; change the seed")
    return ids


def _choose(rng: np.random.Generator, eligible: np.ndarray, k: int) -> np.ndarray:
    idx = np.flatnonzero(eligible)
    return np.sort(rng.choice(idx, min(k, len(idx)), replace=False)) if len(idx) else idx


def _studies(rng: np.random.Generator, cohort: Cohort) -> pl.DataFrame:
    """Per study: chronological position, frontal view, image counts by kind."""
    st = cohort.studies.join(cohort.patients.select("subject_id", "is_gold"), on="subject_id",
                             maintain_order="left")
    n = st.height
    subj = st["subject_id"].to_numpy()
    first = np.r_[True, subj[1:] != subj[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    pos = np.arange(n) - start
    size = np.bincount(np.cumsum(first) - 1)[np.cumsum(first) - 1]
    gold = st["is_gold"].to_numpy()
    heavy = size > MAX_STUDY_ORDER
    first_heavy = heavy & (subj == subj[heavy][0]) if heavy.any() else heavy
    # Gold patients keep frontal 1st and 2nd studies; the first heavy patient keeps its tie at 20/21.
    protected = (gold & (pos < 2)) | (first_heavy & (pos <= MAX_STUDY_ORDER))
    no_frontal = np.zeros(n, bool)
    no_frontal[_choose(rng, ~protected, max(1, round(0.03 * n)))] = True
    ap = rng.random(n) < np.where(heavy, 0.75, 0.45)  # long stays are mostly portable ICU films
    extra = np.zeros(n, np.int64)
    extra[_choose(rng, ~no_frontal & ~(gold & (pos == 0)), max(2, round(0.07 * n)))] = 1
    extra[(extra == 1) & (rng.random(n) < 0.25)] = 2
    # Some gold patients' gold image is a second frontal image of study 1, not the one R2 picks.
    gold_first = np.flatnonzero(gold & (pos == 0))
    alt = rng.choice(gold_first, max(1, round(0.2 * len(gold_first))), replace=False) if len(gold_first) else []
    extra[alt] = 1
    gold_alt = np.zeros(n, bool)
    gold_alt[alt] = True
    lateral = np.where(no_frontal, 0, rng.random(n) < np.where(ap, 0.2, 0.88)).astype(np.int64)
    odd = np.where(no_frontal, 1 + (rng.random(n) < 0.3), rng.random(n) < 0.012).astype(np.int64)
    return st.with_columns(
        pos=pl.Series(pos), heavy=pl.Series(heavy), no_frontal=pl.Series(no_frontal), ap=pl.Series(ap),
        n_primary=pl.Series((~no_frontal).astype(np.int64)), n_extra=pl.Series(extra),
        n_lateral=pl.Series(lateral), n_odd=pl.Series(odd), gold_alt=pl.Series(gold_alt),
    ).with_columns(
        # StudyOrder as the pipeline must compute it: rank among the patient's studies that have a frontal image.
        frontal_order=pl.when(~pl.col("no_frontal"))
        .then((~pl.col("no_frontal")).cast(pl.Int64).cum_sum().over("subject_id")).otherwise(None))


def _images(rng: np.random.Generator, st: pl.DataFrame) -> pl.DataFrame:
    """One row per image: kind, offsets in ms from the study datetime, dicom_id."""
    cols = ["n_primary", "n_extra", "n_lateral", "n_odd"]
    counts = st.select(cols).to_numpy()
    per_study = counts.sum(1)
    sidx = np.repeat(np.arange(st.height), per_study)
    kind = np.repeat(np.tile(np.arange(4), st.height), counts.ravel())
    n = len(sidx)
    base = rng.integers(0, 1000, st.height)  # primary frontal: within the study's first second
    whole = rng.random(st.height) < 0.3  # some scanners write whole-second times
    # Studies tied on study_datetime get identical first-image times, so that only study_id orders them.
    subj, t = st["subject_id"].to_numpy(), st["study_datetime"].to_numpy()
    tied = np.r_[False, (subj[1:] == subj[:-1]) & (t[1:] == t[:-1])]
    run = np.maximum.accumulate(np.where(tied, 0, np.arange(st.height)))
    base, whole = base[run], whole[run]
    same = rng.random(n) < 0.4
    off = np.select(
        [kind == PRIMARY, (kind == EXTRA) & same, kind == EXTRA],
        [base[sidx], base[sidx], base[sidx] + rng.integers(1000, 6000, n)],
        base[sidx] + rng.integers(-4000, 6000, n))  # laterals and odd views, sometimes before the frontal
    no_frontal = st["no_frontal"].to_numpy()[sidx]
    first_nf = no_frontal & (np.r_[True, sidx[1:] != sidx[:-1]])
    off = np.where(first_nf, base[sidx], np.where(no_frontal, base[sidx] + rng.integers(1000, 6000, n), off))
    off = np.where(whole[sidx], off // 1000 * 1000, off)
    ids = dicom_ids(rng, n)
    # The primary must win R2's tie-break: give it the smallest dicom_id among its study's frontal images.
    frontal = np.flatnonzero(kind <= EXTRA)
    order = frontal[np.lexsort((ids[frontal], sidx[frontal]))]
    lead = order[np.r_[True, sidx[order][1:] != sidx[order][:-1]]]
    prim = frontal[kind[frontal] == PRIMARY]
    prim = prim[np.argsort(sidx[prim], kind="stable")]
    ids[prim], ids[lead] = ids[lead].copy(), ids[prim].copy()
    return pl.DataFrame({"sidx": sidx, "kind": kind, "offset_ms": off, "dicom_id": ids.astype(str)})


def _views(rng: np.random.Generator, st: pl.DataFrame, im: pl.DataFrame) -> pl.Series:
    n = im.height
    ap = st["ap"].to_numpy()[im["sidx"].to_numpy()]
    kind = im["kind"].to_numpy()
    frontal = np.where(ap ^ (rng.random(n) < np.where(kind == EXTRA, 0.2, 0.0)), "AP", "PA")
    lateral = np.where(rng.random(n) < 0.85, "LATERAL", "LL")
    odd_opts = np.array(["AP AXIAL", "PA LLD", "", "LATERAL", "LL"])
    nf = st["no_frontal"].to_numpy()[im["sidx"].to_numpy()]
    odd = odd_opts[np.where(nf, rng.choice(5, n, p=[0.05, 0.05, 0.1, 0.6, 0.2]), rng.integers(0, 3, n))]
    view = np.select([kind <= EXTRA, kind == LATERAL], [frontal, lateral], odd)
    return pl.Series("ViewPosition", view).replace("", None)  # an empty tag: null ViewPosition


def image_book(seed: int, scale: Scale, cohort: Cohort) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(metadata table, bookkeeping) -- bookkeeping: one row per image with subject_id, study_id, dicom_id,
    kind, pos (0-based chronological study index), frontal_order, is_gold, gold_image, ViewPosition."""
    rng = generator(seed, "cxr.metadata")
    st = _studies(rng, cohort)
    im = _images(rng, st)
    im = im.with_columns(_views(rng, st, im))
    book = im.join(st.with_row_index("sidx").with_columns(pl.col("sidx").cast(pl.Int64)), on="sidx",
                   maintain_order="left")
    first_extra = (pl.col("kind") == EXTRA) & (pl.int_range(pl.len()).over("sidx", "kind") == 0)
    book = book.with_columns(
        gold_image=pl.col("is_gold") & (pl.col("pos") == 0)
        & pl.when(pl.col("gold_alt")).then(first_extra).otherwise(pl.col("kind") == PRIMARY),
        time_ms=pl.col("study_datetime").dt.epoch("ms") + pl.col("offset_ms"),
    )
    n = book.height
    ts = pl.from_epoch(book["time_ms"], time_unit="ms")
    hms = (ts.dt.hour().cast(pl.Int64) * 10000 + ts.dt.minute().cast(pl.Int64) * 100
           + ts.dt.second().cast(pl.Int64))
    rows = rng.integers(scale.image_min, scale.image_max + 1, n)
    cols = rng.integers(scale.image_min, rows + 1)  # portrait or square, like chest detectors
    ap_study = book["ap"].to_numpy()
    desc = pl.Series(np.where(ap_study, "CHEST (PORTABLE AP)", "CHEST (PA AND LAT)"))
    desc = desc.zip_with(pl.Series(rng.random(n) > 0.1), pl.Series(
        np.where(ap_study, "CHEST (SINGLE VIEW)", "CHEST (PRE-OP PA AND LAT)")))
    view = book["ViewPosition"]
    meta = pl.DataFrame({
        "dicom_id": book["dicom_id"], "subject_id": book["subject_id"], "study_id": book["study_id"],
        "PerformedProcedureStepDescription": desc, "ViewPosition": view,
        "Rows": rows.astype(np.int64), "Columns": cols.astype(np.int64),
        "StudyDate": ts.dt.strftime("%Y%m%d").cast(pl.Int64),
        # HHMMSS.fff from integer milliseconds, so the written float is the exact decimal (213014.531).
        "StudyTime": (hms * 1000 + (book["time_ms"] % 1000)) / 1000.0,
        "ProcedureCodeSequence_CodeMeaning": desc,
        "ViewCodeSequence_CodeMeaning": view.replace_strict(_VIEW_MEANING, default=None),
        "PatientOrientationCodeSequence_CodeMeaning": np.where(
            (view == "AP").fill_null(False).to_numpy() & (rng.random(n) < 0.6), "Recumbent", "Erect"),
    })
    blank = rng.random(n) < 0.02  # DICOM optional tags are sometimes empty
    meta = meta.with_columns(
        pl.when(pl.Series(blank)).then(None).otherwise(pl.col("PatientOrientationCodeSequence_CodeMeaning"))
        .alias("PatientOrientationCodeSequence_CodeMeaning"),
        pl.when(pl.Series(rng.random(n) < 0.03)).then(None)
        .otherwise(pl.col("PerformedProcedureStepDescription")).alias("PerformedProcedureStepDescription"))
    meta = meta.select(CXR_METADATA.header).sort("subject_id", "study_id", "dicom_id")
    book = book.select("subject_id", "study_id", "dicom_id", "kind", "pos", "frontal_order", "heavy", "is_gold",
                       "gold_image", "no_frontal", "ViewPosition", "time_ms", "study_datetime")
    return meta, book


def metadata_planted(book: pl.DataFrame, meta: pl.DataFrame) -> dict:
    """Exact counts of what the metadata plants, from the bookkeeping."""
    k = book["kind"]
    studies = book.select("study_id", "no_frontal", "frontal_order").unique("study_id")
    lat_first = (book.filter(pl.col("kind") >= LATERAL).group_by("study_id").agg(pl.col("time_ms").min())
                 .join(book.filter(pl.col("kind") == PRIMARY).select("study_id", t0="time_ms"), on="study_id")
                 .filter(pl.col("time_ms") < pl.col("t0")).height)
    return {
        "images": book.height, "studies": studies.height,
        "frontal_images": int((k <= EXTRA).sum()),
        "nonfrontal_only_studies": int(studies["no_frontal"].sum()),
        "extra_frontal_images": int((k == EXTRA).sum()),
        "studies_with_extra_frontal": book.filter(pl.col("kind") == EXTRA)["study_id"].n_unique(),
        "studies_with_earlier_nonfrontal_image": lat_first,
        "studies_beyond_order_20": int((studies["frontal_order"] > MAX_STUDY_ORDER).sum()),
        "view_counts": {str(r[0]): r[1] for r in meta["ViewPosition"].value_counts().sort("ViewPosition").rows()},
        "study_time_below_100000": int((meta["StudyTime"] < 100000).sum()),
    }


def make_cxr_metadata(seed: int, scale: Scale, cohort: Cohort) -> tuple[pl.DataFrame, dict]:
    """The metadata table in its release layout plus the exact counts of what it plants."""
    meta, book = image_book(seed, scale, cohort)
    return meta, metadata_planted(book, meta)
