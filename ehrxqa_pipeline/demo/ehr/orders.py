"""prescriptions (one row per drug order), diagnoses_icd (one row per billed diagnosis of an admission) and
procedures_icd (one row per billed procedure).

Orders are proportional to length of stay x event_density and lie inside their admission; about one in five
is placed together with the admission's previous order (same starttime, as order sets are in MIMIC-IV), so
drugs prescribed "at the same time" exist. Billing uses
the admission's ICD version (ICD-9 before October 2015 in real time, ICD-10 after), so both versions, and
the codes that exist in both, appear in the billing tables.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ehrxqa_pipeline.demo.ehr import vocab_orders as V
from ehrxqa_pipeline.demo.ehr.icd import IcdDictionaries
from ehrxqa_pipeline.demo.ehr.util import (DAY, MINUTE, date_series, dt_series, expand, floor_min, lognormal_secs,
                                           stratified, table, take, uniform_int, unique_ids, weighted)
from ehrxqa_pipeline.rng import generator

RX_MEDIAN_DURATION = int(1.5 * DAY)
N_DIAGNOSES = (3, 12, 0.45)  # 3 + Binomial(12, 0.45): 3..15 per admission
N_PROCEDURES = [35, 20, 18, 12, 9, 6]  # P(0..5) per admission
SPARE_DRAWS = 4
RX_SAME_TIME_SHARE = 0.2  # orders that start with the admission's previous order (an order set)


def _order_sets(rng: np.random.Generator, parent: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Start times where a share of orders (``RX_SAME_TIME_SHARE``) takes the time of the previous order of the
    same admission (rows are grouped by admission in time order); a chain of such orders shares one time."""
    together = np.r_[False, parent[1:] == parent[:-1]] & (rng.random(len(parent)) < RX_SAME_TIME_SHARE)
    first = np.maximum.accumulate(np.where(together, 0, np.arange(len(parent))))
    return t[first]


def make_prescriptions(seed: int, density: float, adm: pl.DataFrame) -> pl.DataFrame:
    rng = generator(seed, "ehr.prescriptions")
    a = adm.filter("ok")
    start, end = a["start"].to_numpy(), a["end"].to_numpy()
    n_rx = 1 + rng.poisson((V.RX_BASE + (end - start) / DAY * V.RX_PER_DAY) * density)
    r_adm, t0 = stratified(rng, start, end, n_rx)
    n = len(r_adm)
    t0 = _order_sets(generator(seed, "ehr.prescriptions.order_sets"), r_adm, t0)
    drug = weighted(rng, [d[2] for d in V.DRUGS], n)
    col = list(zip(*V.DRUGS))
    n_dose = np.array([len(d) for d in col[3]])
    n_route = np.array([len(r) for r in col[5]])
    doses = [x for d in col[3] for x in d]
    routes = [x for r in col[5] for x in r]
    dose = (np.cumsum(n_dose) - n_dose)[drug] + np.floor(rng.random(n) * n_dose[drug]).astype(np.int64)
    route = (np.cumsum(n_route) - n_route)[drug] + np.floor(rng.random(n) * n_route[drug]).astype(np.int64)
    stop = np.minimum(t0 + np.maximum(lognormal_secs(rng, RX_MEDIAN_DURATION, 1.0, n), 10 * MINUTE),
                      end[r_adm])
    stop = np.maximum(floor_min(stop), t0)
    no_stop = rng.random(n) < V.RX_NULL_STOPTIME_SHARE
    per_day, k_day = list(V.RX_DOSES_PER_24H), weighted(rng, list(V.RX_DOSES_PER_24H.values()), n)
    prov = [f"P{v:05X}" for v in rng.choice(0xFFFFF, 300, replace=False)]
    # drug-level codes as in the real table: formulary code, GSN, NDC
    names = list(col[0])
    formulary = ["".join(ch for ch in nm.upper() if ch.isalpha())[:4] + str(i) for i, nm in enumerate(names)]
    gsn = [f"{(i * 7919 + 4021) % 1_000_000:06d}" for i in range(len(names))]
    ndc = [f"{(i * 104_729 + 904_198_861) % 10 ** 11:011d}" for i in range(len(names))]
    pdays = np.array([np.nan if x is None else x for x in per_day])
    df = pl.DataFrame({
        "subject_id": a["subject_id"].to_numpy()[r_adm], "hadm_id": a["hadm_id"].to_numpy()[r_adm],
        "pharmacy_id": unique_ids(rng, 10_000_000, 100_000_000, n),
        "order_provider_id": take(prov, rng.integers(0, len(prov), n), rng.random(n) < 0.05),
        "starttime": dt_series(t0), "stoptime": dt_series(stop, no_stop), "drug_type": take(col[1], drug),
        "drug": take(names, drug), "formulary_drug_cd": take(formulary, drug), "gsn": take(gsn, drug),
        "ndc": take(ndc, drug), "prod_strength": take(col[6], drug), "form_rx": None,
        "dose_val_rx": take(doses, dose), "dose_unit_rx": take(col[4], drug),
        "form_val_disp": take(doses, dose), "form_unit_disp": take(col[7], drug),
        "doses_per_24_hrs": pl.Series(pdays[k_day]).fill_nan(None), "route": take(routes, route),
    }).sort("subject_id", "starttime", "pharmacy_id", maintain_order=True)
    # poe_id = "<subject_id>-<order number of the subject>", as in MIMIC-IV
    df = df.with_columns(poe_seq=pl.int_range(1, pl.len() + 1).over("subject_id"))
    df = df.with_columns(poe_id=pl.concat_str(pl.col("subject_id").cast(pl.String), pl.lit("-"),
                                              pl.col("poe_seq").cast(pl.String)))
    return table("prescriptions", {c: (df[c] if c in df.columns else None) for c in (
        "subject_id", "hadm_id", "pharmacy_id", "poe_id", "poe_seq", "order_provider_id", "starttime",
        "stoptime", "drug_type", "drug", "formulary_drug_cd", "gsn", "ndc", "prod_strength", "form_rx",
        "dose_val_rx", "dose_unit_rx", "form_val_disp", "form_unit_disp", "doses_per_24_hrs", "route")})


def _billing(rng, adm: pl.DataFrame, counts: np.ndarray, kind: str, icd: IcdDictionaries) -> pl.DataFrame:
    """(adm row, icd_code, icd_version, seq_num) with codes drawn from the admission's version, no repeats."""
    version = adm["version"].to_numpy()
    rows = expand(counts + SPARE_DRAWS)  # spare draws replace repeated codes, so an admission keeps its count
    p9, p10 = icd.pools[(kind, 9)], icd.pools[(kind, 10)]
    is10 = version[rows] == 10
    code = np.where(is10, len(p9.codes) + rng.choice(len(p10.codes), size=len(rows), p=p10.p),
                    rng.choice(len(p9.codes), size=len(rows), p=p9.p))
    df = pl.DataFrame({"row": rows, "icd_code": take(list(p9.codes) + list(p10.codes), code),
                       "icd_version": version[rows]})
    df = df.unique(["row", "icd_code"], maintain_order=True)
    df = df.with_columns(seq_num=pl.int_range(1, pl.len() + 1).over("row"))
    return df.filter(pl.Series(df["seq_num"].to_numpy() <= counts[df["row"].to_numpy()]))


def make_diagnoses(seed: int, adm: pl.DataFrame, icd: IcdDictionaries) -> pl.DataFrame:
    rng = generator(seed, "ehr.diagnoses_icd")
    lo, k, p = N_DIAGNOSES
    df = _billing(rng, adm, lo + rng.binomial(k, p, adm.height), "dx", icd)
    r = df["row"].to_numpy()
    return table("diagnoses_icd", {
        "subject_id": adm["subject_id"].to_numpy()[r], "hadm_id": adm["hadm_id"].to_numpy()[r],
        "seq_num": df["seq_num"], "icd_code": df["icd_code"], "icd_version": df["icd_version"],
    }).sort("subject_id", "hadm_id", "seq_num")


def make_procedures(seed: int, adm: pl.DataFrame, icd: IcdDictionaries) -> pl.DataFrame:
    rng = generator(seed, "ehr.procedures_icd")
    a = adm.filter("ok")
    df = _billing(rng, a, weighted(rng, N_PROCEDURES, a.height), "px", icd)
    r = df["row"].to_numpy()
    start, end = a["start"].to_numpy()[r], a["end"].to_numpy()[r]
    when = uniform_int(rng, start, end, len(r))
    return table("procedures_icd", {
        "subject_id": a["subject_id"].to_numpy()[r], "hadm_id": a["hadm_id"].to_numpy()[r],
        "seq_num": df["seq_num"], "chartdate": date_series(when), "icd_code": df["icd_code"],
        "icd_version": df["icd_version"],
    }).sort("subject_id", "hadm_id", "seq_num")
