"""labevents (one row per laboratory result) and d_labitems (one row per laboratory item).

Results come in panels: one specimen drawn at one time yields every item of its panel (chem-7, CBC, ...),
like real lab orders. Inpatient draws are proportional to length of stay x event_density and fall inside
their admission; about 10 % of draws are outpatient (hadm_id null) in the patient's free time. Planted for
the database build: text results and failed results with a null valuenum, and a minority unit on several
items (glucose in mmol/L, ...), which a per-item unit filter must remove.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ehrxqa_pipeline.demo.ehr import vocab as V
from ehrxqa_pipeline.demo.ehr.util import (DAY, HOUR, MINUTE, dt_series, expand, floor_min, free_gaps, num_series,
                                           place_in_gaps, rank_in_group, stratified, table, take,
                                           uniform_int, unique_ids, weighted)
from ehrxqa_pipeline.rng import generator


def d_labitems() -> pl.DataFrame:
    items = V.LAB_ITEMS
    return table("d_labitems", {"itemid": [r[0] for r in items], "label": [r[1] for r in items],
                                "fluid": [r[2] for r in items], "category": [r[3] for r in items]})


def outpatient_slots(rng, adm: pl.DataFrame, ed_visits: pl.DataFrame, win_lo, win_hi, n_items) -> tuple:
    """Times outside every admission and ED visit (owner patient index, time)."""
    gaps = free_gaps(np.r_[adm["p"].to_numpy(), ed_visits["p"].to_numpy()],
                     np.r_[adm["busy_lo"].to_numpy(), ed_visits["intime"].to_numpy()],
                     np.r_[adm["end"].to_numpy(), ed_visits["outtime"].to_numpy()], win_lo, win_hi)
    owner, lo, hi = place_in_gaps(rng, gaps, n_items, HOUR)
    return owner, floor_min(lo + (rng.random(len(owner)) * (hi - lo)).astype(np.int64))


def make_labevents(seed: int, density: float, adm: pl.DataFrame, subject_ids: np.ndarray, out_p: np.ndarray,
                   out_t: np.ndarray) -> pl.DataFrame:
    """``adm``: internal admissions (hadm_id, p, start, end, ok, severity); out_*: outpatient draw slots."""
    rng = generator(seed, "ehr.labevents")
    a = adm.filter("ok")
    start, end = a["start"].to_numpy(), a["end"].to_numpy()
    n_draw = 1 + rng.poisson((end - start) / DAY * V.LAB_DRAWS_PER_DAY * density)
    d_adm, d_t = stratified(rng, start, end, n_draw)
    draw_p = np.r_[a["p"].to_numpy()[d_adm], out_p]
    draw_t = np.r_[d_t, out_t]
    draw_hadm = np.r_[a["hadm_id"].to_numpy()[d_adm], np.full(len(out_p), -1)]
    draw_sev = np.r_[a["severity"].to_numpy()[d_adm], rng.standard_normal(len(out_p)) * 0.5 - 0.5]
    n_draws = len(draw_t)

    names = list(V.LAB_PANELS)
    panel = weighted(rng, [V.LAB_PANELS[k][1] for k in names], n_draws)
    size = np.array([len(V.LAB_PANELS[k][0]) for k in names])
    flat = np.concatenate([V.LAB_PANELS[k][0] for k in names])
    offset = np.cumsum(size) - size
    row_draw = expand(size[panel])
    itemid = flat[offset[panel[row_draw]] + rank_in_group(size[panel])]
    keep = rng.random(len(itemid)) < V.LAB_PANEL_ITEM_KEEP
    row_draw, itemid = row_draw[keep], itemid[keep]
    n = len(itemid)

    ids = np.array([r[0] for r in V.LAB_ITEMS])
    pos = np.searchsorted(ids, itemid, sorter=np.argsort(ids))
    ii = np.argsort(ids)[pos]  # row of LAB_ITEMS for every result
    col = list(zip(*V.LAB_ITEMS))
    mean = np.array([np.nan if m is None else m for m in col[5]], dtype=float)[ii]
    sd = np.array([np.nan if m is None else m for m in col[6]], dtype=float)[ii]
    dec = np.array(col[7])[ii]
    ref_lo = np.array([np.nan if m is None else m for m in col[8]], dtype=float)[ii]
    ref_hi = np.array([np.nan if m is None else m for m in col[9]], dtype=float)[ii]
    units = [u or "" for u in col[4]]
    no_unit = np.array([u is None for u in col[4]])[ii]
    text = np.isnan(mean)

    # sicker admissions move every item the way illness moves it (creatinine up, albumin down)
    direction = np.where(mean < (ref_lo + ref_hi) / 2, -1.0, 1.0)
    z = 0.6 * draw_sev[row_draw] * direction + 0.8 * rng.standard_normal(n)
    cv = np.divide(sd, mean, out=np.zeros(n), where=mean > 0)
    skewed = cv > 0.5  # enzymes, troponin, BNP: lognormal
    sig = np.sqrt(np.log1p(np.where(skewed, cv ** 2, 0)))
    val = np.where(skewed, mean * np.exp(sig * z - sig ** 2 / 2), mean + sd * z)
    val = np.clip(val, np.where(ref_lo < 0, mean - 4 * sd, 0), mean + 8 * sd)
    scale = 10.0 ** dec
    val = np.round(val * scale) / scale
    flag_ab = (val < ref_lo) | (val > ref_hi)

    unit_idx = ii.copy()
    alt_units = list(dict.fromkeys(u for u, _, _ in V.LAB_MINORITY_UNITS.values()))
    minority = np.zeros(n, dtype=bool)
    for item, (unit, factor, share) in V.LAB_MINORITY_UNITS.items():  # a handful of items, not rows
        m = (itemid == item) & (rng.random(n) < share)
        minority |= m
        val = np.where(m, np.round(val * factor, 2), val)
        ref_lo = np.where(m, np.round(ref_lo * factor, 2), ref_lo)
        ref_hi = np.where(m, np.round(ref_hi * factor, 2), ref_hi)
        unit_idx = np.where(m, len(units) + alt_units.index(unit), unit_idx)
        dec = np.where(m, 2, dec)
    failed = ~text & (rng.random(n) < V.LAB_FAILED_SHARE)
    text_vals = sorted({v for vs in V.LAB_TEXT_VALUES.values() for v in vs})
    t_idx = np.zeros(n, dtype=np.int64)
    for item, vals in V.LAB_TEXT_VALUES.items():
        t_idx = np.where(itemid == item, np.array([text_vals.index(v) for v in vals])[
            rng.integers(0, len(vals), n)], t_idx)
    f_idx = rng.integers(0, len(V.LAB_FAILED_VALUES), n)
    null_num = text | failed

    charttime = draw_t[row_draw]
    prov = [f"P{v:05X}" for v in rng.choice(0xFFFFF, 300, replace=False)]
    prio, k_prio = list(V.LAB_PRIORITIES), weighted(rng, list(V.LAB_PRIORITIES.values()), n_draws)
    specimen = unique_ids(rng, 10_000_000, 100_000_000, n_draws)
    hadm = draw_hadm[row_draw]
    df = pl.DataFrame({
        "subject_id": subject_ids[draw_p[row_draw]], "hadm_id": num_series(hadm, pl.Int64, hadm < 0),
        "specimen_id": specimen[row_draw], "itemid": itemid,
        "order_provider_id": take(prov, rng.integers(0, len(prov), n_draws)[row_draw],
                                  (rng.random(n_draws) < 0.4)[row_draw]),
        "charttime": dt_series(charttime),
        "storetime": dt_series(charttime + floor_min(uniform_int(rng, 15 * MINUTE, 4 * HOUR, n_draws))[row_draw]),
        "valuenum": num_series(val, pl.Float64, null_num), "dec": dec,
        "text": take(text_vals, t_idx), "failed": take(V.LAB_FAILED_VALUES, f_idx),
        "is_text": text, "is_failed": failed,
        "valueuom": take(units + alt_units, unit_idx, no_unit & ~minority),
        "ref_range_lower": num_series(ref_lo, pl.Float64, np.isnan(ref_lo) | text),
        "ref_range_upper": num_series(ref_hi, pl.Float64, np.isnan(ref_hi) | text),
        "flag": take(["abnormal"], np.zeros(n, np.int64), ~flag_ab | null_num),
        "priority": take([x or "" for x in prio], k_prio[row_draw],
                         np.array([x is None for x in prio])[k_prio][row_draw]),
        "comments": take(["___"], np.zeros(n, np.int64), ~failed),
    })
    number = (pl.when(pl.col("dec") == 0).then(pl.col("valuenum").round(0).cast(pl.Int64).cast(pl.String))
              .otherwise(pl.col("valuenum").cast(pl.String)))
    df = df.with_columns(value=pl.when("is_text").then("text").when("is_failed").then("failed").otherwise(number))
    df = df.sort("subject_id", "charttime", "itemid", maintain_order=True)
    df = df.with_columns(labevent_id=pl.int_range(1, pl.len() + 1))
    return table("labevents", {c: df[c] for c in (
        "labevent_id", "subject_id", "hadm_id", "specimen_id", "itemid", "order_provider_id", "charttime",
        "storetime", "value", "valuenum", "valueuom", "ref_range_lower", "ref_range_upper", "flag",
        "priority", "comments")})
