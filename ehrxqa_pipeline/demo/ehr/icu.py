"""ICU event tables: chartevents (one row per charted observation), inputevents (one row per input order
x item), outputevents (one row per output measurement) and the d_items dictionary (one row per item).

Vitals are charted every 1-4 hours (divided by event_density) at whole minutes inside each ICU stay;
a stay keeps its own baseline so values are coherent over time. Planted for the database build: vitals
charted without a value, text-valued items (valuenum null), minority units on weight / height / finger-stick
glucose, and inputs whose amount is not in ml (drugs in mg, mcg, units, grams, mEq, dose).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ehrxqa_pipeline.demo.ehr import vocab_icu as V
from ehrxqa_pipeline.demo.ehr.util import (HOUR, MINUTE, dt_series, floor_min, num_series, stratified, table, take,
                                           uniform_int, unique_ids, weighted)
from ehrxqa_pipeline.rng import generator

CHARTED = [220045, 220210, 220277, 220179, 220180, 220181, 220050, 220051, 220052, 223761, 223762,
           220048, 220739, 225664, 223835, 220339, 226512, 226730]


def d_items() -> pl.DataFrame:
    rows = ([(i, lab, ab, "chartevents", cat, u, pt, lo, hi) for i, lab, ab, cat, u, pt, lo, hi in V.CHART_ITEMS]
            + [(r[0], r[1], r[2], "inputevents", r[3], r[4], "Solution" if r[4] == "ml" else "Process", None, None)
               for r in V.INPUT_ITEMS]
            + [(r[0], r[1], r[2], "outputevents", r[3], "ml", "Numeric", None, None) for r in V.OUTPUT_ITEMS]
            + [(*r[:4], r[4], r[5], r[6], None, None) for r in V.OTHER_ITEMS])
    rows.sort()
    cols = list(zip(*rows))
    return table("d_items", dict(zip(("itemid", "label", "abbreviation", "linksto", "category", "unitname",
                                      "param_type", "lownormalvalue", "highnormalvalue"), cols)))


def _present(rng, n_pts, stay, first, flags):
    """Which CHARTED items each charting time records (a points x items boolean matrix)."""
    art, celsius, vent, height = (f[stay] for f in flags)
    r = lambda p: rng.random(n_pts) < p  # noqa: E731
    nbp = ~art | r(0.25)
    temp = r(0.3)
    both = r(0.05)
    cols = [r(0.99), r(0.98), r(0.97), nbp, nbp, nbp, art, art, art,
            temp & (~celsius | both), temp & (celsius | both), r(0.25), r(0.2), r(0.15), vent & r(0.3),
            vent & r(0.3), first, first & height]
    return np.column_stack(cols)


def make_chartevents(seed: int, density: float, icu: pl.DataFrame, weight: np.ndarray) -> pl.DataFrame:
    rng = generator(seed, "ehr.chartevents")
    ns = icu.height
    t_in, t_out = icu["intime"].to_numpy(), icu["outtime"].to_numpy()
    spacing = rng.uniform(*V.VITAL_HOURS, ns) * HOUR / density
    n_pts = np.maximum(1, np.round((t_out - t_in) / spacing).astype(np.int64))
    stay, t = stratified(rng, t_in, t_out, n_pts)
    npt = len(stay)
    first = np.r_[True, stay[1:] != stay[:-1]] if npt else np.zeros(0, bool)
    flags = [rng.random(ns) < s for s in (V.ARTERIAL_LINE_SHARE, V.CELSIUS_SHARE, V.VENTILATED_SHARE,
                                           V.HEIGHT_SHARE)]
    present = _present(rng, npt, stay, first, flags)

    # values of every item at every point, then picked where charted
    vals = np.full((len(CHARTED), npt), np.nan)
    for j, item in enumerate(CHARTED):  # ~20 items, each a vector over all points
        if item in V.VITAL_VALUES:
            mu, sd, dec, lo, hi = V.VITAL_VALUES[item]
            z = V.STAY_SD_SHARE * rng.standard_normal(ns)[stay] + 0.8 * rng.standard_normal(npt)
            vals[j] = np.round(np.clip(mu + sd * z, lo, hi), dec)
    col = {item: j for j, item in enumerate(CHARTED)}
    vals[col[226512]] = np.round(weight[stay], 1)
    for m, s, d in ((220181, 220179, 220180), (220052, 220050, 220051)):
        vals[col[s]] = np.maximum(vals[col[s]], vals[col[d]] + 15)
        vals[col[m]] = np.round((vals[col[s]] + 2 * vals[col[d]]) / 3)
    vals[col[223761]] = np.round(vals[col[223762]] * 1.8 + 32, 1)
    gcs_text, gcs = list(V.GCS_EYE), weighted(rng, [w for _, w in V.GCS_EYE.values()], npt)
    vals[col[220739]] = np.array([v for v, _ in V.GCS_EYE.values()])[gcs]
    rhythms, k_rh = list(V.HEART_RHYTHMS), weighted(rng, list(V.HEART_RHYTHMS.values()), npt)

    p_idx, i_idx = np.nonzero(present)
    n = len(p_idx)
    item = np.array(CHARTED)[i_idx]
    val = vals[i_idx, p_idx]
    is_rhythm, is_gcs = item == 220048, item == 220739
    units = {i: u for i, _, _, _, u, _, _, _ in V.CHART_ITEMS}
    unit_names = sorted({u for u in units.values() if u} | {u for u, _, _ in V.CHART_MINORITY_UNITS.values()})
    u_idx = np.array([unit_names.index(units[i]) if units[i] else -1 for i in CHARTED])[i_idx]
    minority = np.zeros(n, dtype=bool)
    for it, (unit, factor, share) in V.CHART_MINORITY_UNITS.items():  # three items, not rows
        m = (item == it) & (rng.random(n) < share)
        minority |= m
        val = np.where(m, np.round(val * factor, 1), val)
        u_idx = np.where(m, unit_names.index(unit), u_idx)
    once = (item == 226512) | (item == 226730)
    blank = ~is_rhythm & ~is_gcs & ~once & (rng.random(n) < V.CHART_NULL_SHARE)
    normal = {i: (lo, hi) for i, _, _, _, _, _, lo, hi in V.CHART_ITEMS}
    lo = np.array([np.nan if normal[i][0] is None else normal[i][0] for i in CHARTED])[i_idx]
    hi = np.array([np.nan if normal[i][1] is None else normal[i][1] for i in CHARTED])[i_idx]
    warning = ((val < lo) | (val > hi)) & (rng.random(n) < 0.3)
    charttime = t[p_idx]
    df = pl.DataFrame({
        "subject_id": icu["subject_id"].to_numpy()[stay[p_idx]], "hadm_id": icu["hadm_id"].to_numpy()[stay[p_idx]],
        "stay_id": icu["stay_id"].to_numpy()[stay[p_idx]],
        "caregiver_id": unique_ids(rng, 1, 100_000, 500)[rng.integers(0, 500, npt)][p_idx],
        "charttime": dt_series(charttime),
        "storetime": dt_series(charttime + floor_min(uniform_int(rng, MINUTE, HOUR, npt))[p_idx]), "itemid": item,
        "valuenum": num_series(val, pl.Float64, is_rhythm | blank),
        "valueuom": take(unit_names, np.maximum(u_idx, 0), u_idx < 0),
        "warning": num_series(warning.astype(np.int64), pl.Int64, is_rhythm),
        "rhythm": take(rhythms, k_rh[p_idx]), "gcs": take(gcs_text, gcs[p_idx]),
        "is_rhythm": is_rhythm, "is_gcs": is_gcs,
    })
    num = pl.when(pl.col("valuenum") == pl.col("valuenum").round(0)).then(
        pl.col("valuenum").cast(pl.Int64).cast(pl.String)).otherwise(pl.col("valuenum").cast(pl.String))
    df = df.with_columns(value=pl.when("is_rhythm").then("rhythm").when("is_gcs").then("gcs").otherwise(num))
    df = df.sort("subject_id", "stay_id", "charttime", "itemid", maintain_order=True)
    return table("chartevents", {c: df[c] for c in TABLE_COLS["chartevents"]})


def make_inputevents(seed: int, density: float, icu: pl.DataFrame, weight: np.ndarray) -> pl.DataFrame:
    rng = generator(seed, "ehr.inputevents")
    t_in, t_out = icu["intime"].to_numpy(), icu["outtime"].to_numpy()
    n_ord = 1 + rng.poisson((t_out - t_in) / HOUR * V.INPUT_PER_HOUR * density)
    stay, t0 = stratified(rng, t_in, t_out, n_ord)
    n = len(stay)
    col = list(zip(*V.INPUT_ITEMS))
    k = weighted(rng, col[6], n)
    cont = np.array([r is not None for r in col[9]])[k]
    dur = floor_min(np.where(cont, uniform_int(rng, HOUR, 12 * HOUR, n), uniform_int(rng, 5 * MINUTE, HOUR, n)))
    end = np.minimum(t0 + dur, t_out[stay])
    hours = np.maximum(end - t0, MINUTE) / HOUR
    lo, hi = np.array(col[7], dtype=float)[k], np.array(col[8], dtype=float)[k]
    amount = np.round(np.exp(np.log(lo) + rng.random(n) * (np.log(hi) - np.log(lo))), 2)
    rate_unit = [r or "" for r in col[9]]
    ru = np.array(rate_unit)[k]
    w = weight[stay]
    rate = np.select([ru == "mcg/kg/min"], [amount * 1000 / w / (hours * 60)], amount / hours)
    rate = np.round(rate, 4)
    cats = list(dict.fromkeys(col[5]))
    cat = np.array([cats.index(c) for c in col[5]])[k]
    desc = [V.INPUT_DESCRIPTIONS[c] for c in cats]
    is_ml = np.array(col[4])[k] == "ml"
    status, k_st = list(V.INPUT_STATUSES), weighted(rng, list(V.INPUT_STATUSES.values()), n)
    orderid = unique_ids(rng, 1_000_000, 10_000_000, n)
    cols = {
        "subject_id": icu["subject_id"].to_numpy()[stay], "hadm_id": icu["hadm_id"].to_numpy()[stay],
        "stay_id": icu["stay_id"].to_numpy()[stay],
        "caregiver_id": unique_ids(rng, 1, 100_000, 500)[rng.integers(0, 500, n)],
        "starttime": dt_series(t0), "endtime": dt_series(end),
        "storetime": dt_series(np.minimum(t0 + floor_min(uniform_int(rng, 0, 30 * MINUTE, n)), end)),
        "itemid": np.array(col[0])[k], "amount": amount, "amountuom": take(col[4], k),
        "rate": num_series(rate, pl.Float64, ~cont), "rateuom": take(rate_unit, k, ~cont),
        "orderid": orderid, "linkorderid": orderid, "ordercategoryname": take(cats, cat),
        "secondaryordercategoryname": take(["Additive (Crystalloid)"], np.zeros(n, np.int64), ~(cont & ~is_ml)),
        "ordercomponenttypedescription": take([d[1] for d in desc], cat),
        "ordercategorydescription": take([d[0] for d in desc], cat), "patientweight": np.round(w, 1),
        "totalamount": np.where(is_ml, amount, np.where(cont, 250.0, 100.0)),
        "totalamountuom": take(["ml"], np.zeros(n, np.int64)), "isopenbag": cont.astype(np.int64),
        "continueinnextdept": np.zeros(n, np.int64), "statusdescription": take(status, k_st),
        "originalamount": amount, "originalrate": num_series(rate, pl.Float64, ~cont),
    }
    return table("inputevents", cols).sort("subject_id", "starttime", "orderid", maintain_order=True)


def make_outputevents(seed: int, density: float, icu: pl.DataFrame) -> pl.DataFrame:
    rng = generator(seed, "ehr.outputevents")
    t_in, t_out = icu["intime"].to_numpy(), icu["outtime"].to_numpy()
    n_out = 1 + rng.poisson((t_out - t_in) / HOUR * V.OUTPUT_PER_HOUR * density)
    stay, t = stratified(rng, t_in, t_out, n_out)
    n = len(stay)
    col = list(zip(*V.OUTPUT_ITEMS))
    k = weighted(rng, col[4], n)
    lo, hi = np.array(col[5], dtype=float)[k], np.array(col[6], dtype=float)[k]
    return table("outputevents", {
        "subject_id": icu["subject_id"].to_numpy()[stay], "hadm_id": icu["hadm_id"].to_numpy()[stay],
        "stay_id": icu["stay_id"].to_numpy()[stay],
        "caregiver_id": unique_ids(rng, 1, 100_000, 500)[rng.integers(0, 500, n)], "charttime": dt_series(t),
        "storetime": dt_series(t + floor_min(uniform_int(rng, MINUTE, HOUR, n))), "itemid": np.array(col[0])[k],
        "value": np.round(lo + rng.random(n) * (hi - lo)), "valueuom": take(["ml"], np.zeros(n, np.int64)),
    }).sort("subject_id", "charttime", "itemid", maintain_order=True)


TABLE_COLS = {"chartevents": ("subject_id", "hadm_id", "stay_id", "caregiver_id", "charttime", "storetime",
                              "itemid", "value", "valuenum", "valueuom", "warning")}
