"""admissions (one row per hospital admission), transfers (one row per ward event) and icustays (one row
per ICU stay) from the timeline of ehr.stays.

Each admission gets a contiguous transfer chain: an ``ED`` row when it came through the emergency
department, an ``admit`` row, 0-3 ``transfer`` rows and a ``discharge`` row (careunit and outtime null,
as in MIMIC-IV). Every ICU-unit row is one ICU stay with the same times. ED-only visits are ``ED`` rows
with a null hadm_id.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from ehrxqa_pipeline.demo.ehr import vocab as V
from ehrxqa_pipeline.demo.ehr.stays import Timeline
from ehrxqa_pipeline.demo.ehr.util import (DAY, HOUR, dt_series, expand, floor_min, num_series, rank_in_group,
                                           table, take, unique_ids, weighted, year_of, year_start)
from ehrxqa_pipeline.rng import generator

ICU_SHARE = 0.35  # of admissions long enough for a transfer (overall about 35 % have ICU time)
ICD10_FROM = 2015.75  # real-time year (October 2015) from which MIMIC bills ICD-10
EVENTTYPES = ["ED", "admit", "transfer", "discharge"]


@dataclass(frozen=True)
class Stays:
    admissions: pl.DataFrame
    transfers: pl.DataFrame
    icustays: pl.DataFrame
    adm: pl.DataFrame  # internal: hadm_id, subject_id, p, start, end (true window, s), busy_lo (ED arrival),
    #                    ok (times consistent), version (ICD), severity
    icu: pl.DataFrame  # internal: stay_id, hadm_id, subject_id, p, intime, outtime (s)


def _vocab(d: dict) -> tuple[list, np.ndarray]:
    return list(d), np.array(list(d.values()), dtype=float)


def _draw(rng, d: dict, n: int) -> tuple[list, np.ndarray]:
    keys, w = _vocab(d)
    return keys, weighted(rng, w, n)


def make_stays(seed: int, patients: pl.DataFrame, tl: Timeline) -> Stays:
    a = tl.admissions
    n = a.height
    p = a["p"].to_numpy()
    admit, disch = a["admittime"].to_numpy(), a["dischtime"].to_numpy()
    rep = a["reported_disch"].to_numpy()
    edreg, edout = a["edregtime"].to_numpy(), a["edouttime"].to_numpy()
    ed_o, died, bad = a["ed_origin"].to_numpy(), a["died"].to_numpy(), a["bad"].to_numpy()
    subj = patients["subject_id"].to_numpy()
    anchor = patients["anchor_year"].to_numpy()
    age = year_of(admit) - anchor[p] + patients["anchor_age"].to_numpy()[p]

    rng = generator(seed, "ehr.admission_attrs")
    hadm = unique_ids(rng, 20_000_000, 30_000_000, n)
    t_ed, i_ed = _draw(rng, V.ADMISSION_TYPES_ED, n)
    t_dir, i_dir = _draw(rng, V.ADMISSION_TYPES_DIRECT, n)
    l_ed, j_ed = _draw(rng, V.ADMISSION_LOCATIONS_ED, n)
    l_dir, j_dir = _draw(rng, V.ADMISSION_LOCATIONS_DIRECT, n)
    types = t_ed + t_dir
    locs = l_ed + l_dir
    d_loc, k_loc = _draw(rng, V.DISCHARGE_LOCATIONS, n)
    d_loc = d_loc + ["DIED"]
    k_loc = np.where(died, len(d_loc) - 1, k_loc)
    ins_old, k_old = _draw(rng, V.INSURANCE_65_PLUS, n)
    ins_young, k_young = _draw(rng, V.INSURANCE_UNDER_65, n)
    # language, marital status and race belong to the patient, not to one admission
    langs, k_lang = _draw(rng, V.LANGUAGES, len(subj))
    marital, k_mar = _draw(rng, V.MARITAL_STATUSES, len(subj))
    races, k_race = _draw(rng, V.RACES, len(subj))
    providers = [f"P{v:05X}" for v in rng.choice(0xFFFFF, 400, replace=False)]
    k_prov = rng.integers(0, len(providers), n)
    none_mar = np.array([m is None for m in marital])
    none_loc = np.array([x is None for x in d_loc])
    admissions = table("admissions", {
        "subject_id": subj[p], "hadm_id": hadm, "admittime": dt_series(admit), "dischtime": dt_series(rep),
        "deathtime": dt_series(rep, ~died), "admission_type": take(types, np.where(ed_o, i_ed, len(t_ed) + i_dir)),
        "admit_provider_id": take(providers, k_prov, rng.random(n) < 0.02),
        "admission_location": take(locs, np.where(ed_o, j_ed, len(l_ed) + j_dir)),
        "discharge_location": take([x or "" for x in d_loc], k_loc, none_loc[k_loc]),
        "insurance": take(ins_old + ins_young, np.where(age >= 65, k_old, len(ins_old) + k_young)),
        "language": take(langs, k_lang[p]),
        "marital_status": take([m or "" for m in marital], k_mar[p], none_mar[k_mar[p]]),
        "race": take(races, k_race[p]), "edregtime": dt_series(edreg, ~ed_o), "edouttime": dt_series(edout, ~ed_o),
        "hospital_expire_flag": died.astype(np.int64),
    })

    # ICD version by the real (un-shifted) year: anchor_year maps to a random year of anchor_year_group
    grp_start = patients["anchor_year_group"].str.slice(0, 4).cast(pl.Int64).to_numpy()
    real_off = grp_start + rng.random(len(subj)) * 3
    real_year = real_off[p] + (admit - year_start(anchor[p])) / (365.25 * DAY)
    version = np.where(real_year >= ICD10_FROM, 10, 9)
    adm = pl.DataFrame({"hadm_id": hadm, "subject_id": subj[p], "p": p, "start": admit, "end": disch,
                        "busy_lo": np.where(ed_o, edreg, admit),
                        "ok": ~bad, "version": version, "severity": rng.standard_normal(n)})

    # ---- transfers ----------------------------------------------------------------------------------
    rng = generator(seed, "ehr.transfers")
    w0 = np.where(ed_o, edout, admit)
    dur = disch - w0
    long = (dur >= 12 * HOUR) & ~bad
    icu = long & (rng.random(n) < ICU_SHARE)
    n_tr = np.where(icu, rng.choice([1, 2, 3], n, p=[0.3, 0.5, 0.2]),
                    rng.choice([0, 1, 2, 3], n, p=[0.45, 0.35, 0.15, 0.05]))
    segs = np.where(long, n_tr, 0) + 1
    r = rng.random(n)
    pos = np.select([segs == 2, segs == 3], [(r >= 0.5).astype(int), np.where(r < 0.75, 1, 0)],
                    np.where(r < 0.6, 1, np.where(r < 0.8, 0, 2)))
    pos2 = np.where((segs == 4) & (pos <= 1) & (rng.random(n) < 0.25), pos + 2, -1)  # ICU readmission
    sa = expand(segs)
    sk = rank_in_group(segs)
    s_icu = icu[sa] & ((sk == pos[sa]) | (sk == pos2[sa]))
    w = (0.1 + rng.exponential(1.0, len(sa))) * np.where(s_icu, 1.5, 1.0)
    cw = np.cumsum(w) - w
    g_start = np.cumsum(segs) - segs
    tot = np.add.reduceat(w, g_start) if n else w
    s_in = floor_min(w0[sa] + np.floor((cw - cw[g_start][sa]) / tot[sa] * dur[sa]).astype(np.int64))
    is_last = sk == segs[sa] - 1
    s_out = np.r_[s_in[1:], 0] if len(s_in) else s_in
    s_out = np.where(is_last, disch[sa], s_out)
    wards, icus = list(V.WARD_UNITS), list(V.ICU_UNITS)
    base = weighted(rng, list(V.WARD_UNITS.values()), n)
    step = rng.integers(1, len(wards), n)
    unit = np.where(s_icu, len(wards) + weighted(rng, list(V.ICU_UNITS.values()), len(sa)),
                    (base[sa] + sk * step[sa]) % len(wards))
    units = wards + icus + [V.ED_UNIT]
    ed_i = np.flatnonzero(ed_o)
    v = tl.ed_visits
    n_v = v.height
    rows = pl.DataFrame({
        "p": np.r_[p[ed_i], p[sa], p, v["p"].to_numpy()],
        "hadm": np.r_[hadm[ed_i], hadm[sa], hadm, np.full(n_v, -1)],
        "ev": np.r_[np.zeros(len(ed_i), int), np.where(sk == 0, 1, 2), np.full(n, 3), np.zeros(n_v, int)],
        "unit": np.r_[np.full(len(ed_i), len(units) - 1), unit, np.full(n, -1), np.full(n_v, len(units) - 1)],
        "intime": np.r_[edreg[ed_i], s_in, disch, v["intime"].to_numpy()],
        "outtime": np.r_[edout[ed_i], s_out, np.full(n, -1), v["outtime"].to_numpy()],
    }).sort("p", "intime", "ev", maintain_order=True)
    tp, th, tu = rows["p"].to_numpy(), rows["hadm"].to_numpy(), rows["unit"].to_numpy()
    t_out = rows["outtime"].to_numpy()
    transfer_id = unique_ids(rng, 30_000_000, 40_000_000, rows.height)
    transfers = table("transfers", {
        "subject_id": subj[tp], "hadm_id": num_series(th, pl.Int64, th < 0),
        "transfer_id": transfer_id, "eventtype": take(EVENTTYPES, rows["ev"].to_numpy()),
        "careunit": take(units, np.maximum(tu, 0), tu < 0), "intime": dt_series(rows["intime"].to_numpy()),
        "outtime": dt_series(np.maximum(t_out, 0), t_out < 0),
    })

    # ---- icustays: one per ICU transfer row ---------------------------------------------------------
    ii = np.flatnonzero(s_icu)
    stay_id = unique_ids(rng, 30_000_000, 40_000_000, len(ii))
    cu = take(units, unit[ii])
    icustays = table("icustays", {
        "subject_id": subj[p[sa[ii]]], "hadm_id": hadm[sa[ii]], "stay_id": stay_id, "first_careunit": cu,
        "last_careunit": cu, "intime": dt_series(s_in[ii]), "outtime": dt_series(s_out[ii]),
        "los": (s_out[ii] - s_in[ii]) / DAY,
    }).sort("subject_id", "intime", maintain_order=True)
    icu_frame = pl.DataFrame({"stay_id": stay_id, "hadm_id": hadm[sa[ii]], "subject_id": subj[p[sa[ii]]],
                              "p": p[sa[ii]],
                              "intime": s_in[ii], "outtime": s_out[ii]})
    return Stays(admissions.sort("subject_id", "admittime", maintain_order=True), transfers, icustays, adm, icu_frame)
