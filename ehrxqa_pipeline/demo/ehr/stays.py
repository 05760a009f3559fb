"""The hospital timeline of every patient: admissions and ED-only visits, built around the X-ray studies.

A CXR patient's studies are clustered into care episodes (studies less than GAP apart); each episode
becomes an admission that brackets its studies, an ED-only visit, or an outpatient study with no
transfer at all, in shares chosen so that about 80 % of all studies fall inside an admission, 5 % in the
emergency-department stay just before one, 8 % in ED-only visits and 7 % nowhere. In-hospital deaths end
on the patient's dod. Admissions without studies then fill the free time up to each patient's drawn count.
Everything is vectorised over episodes / patients; times are epoch seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from ehrxqa_pipeline.demo.ehr.util import (DAY, HOUR, MINUTE, ceil_min, floor_min, free_gaps, group_rank,
                                           lognormal_secs, place_in_gaps, uniform_int, weighted, year_start)
from ehrxqa_pipeline.rng import generator

GAP = 5 * DAY  # studies closer than this belong to one care episode
SMALL_SPAN = 6 * HOUR  # episodes this short may be ED visits or outpatient studies
SHARE_ED_ONLY, SHARE_OUTPATIENT, SHARE_ED_PORTION = 0.08, 0.07, 0.05  # of all studies
ED_ORIGIN_SHARE = 0.55  # admissions that come through the emergency department
LOS_MEDIAN, LOS_SIGMA = 4 * DAY, 0.9  # lognormal: P(LOS > 30 d) ~ 1.3 %, so a 99th-percentile cut bites
ED_MEDIAN = 5 * HOUR
N_ADM_CXR = [35, 25, 15, 10, 8, 7]  # P(1..6 admissions) of a CXR patient
N_ADM_EHR = [45, 30, 15, 10]  # P(1..4) of an EHR-only patient
DIED_SHARE = 0.5  # patients with a dod who die in hospital
MERGE_DEATH_WITHIN = 10 * DAY  # a death this soon after an episode's last study ends that admission
EXTRA_ED_VISITS = 0.25  # mean ED-only visits without a study per patient
OVERLAP_SHARE = 0.001  # studies covered by a second, overlapping ED row (at least 3)
BIG = np.int64(1) << np.int64(60)
IN, ED, OUT = 0, 1, 2


@dataclass(frozen=True)
class Timeline:
    admissions: pl.DataFrame  # p, admittime, dischtime, reported_disch, edregtime, edouttime (s; -1 none),
    #                           ed_origin, died, bad, source (0 studies, 1 death, 2 extra)
    ed_visits: pl.DataFrame  # p, intime, outtime: ED rows without an admission
    win_lo: np.ndarray  # per patient: anchor_year-01-01
    win_hi: np.ndarray  # per patient: end of anchor_year+9, or dod


def build_timeline(seed: int, patients: pl.DataFrame, studies: pl.DataFrame, n_bad: int) -> Timeline:
    n_p = patients.height
    anchor = patients["anchor_year"].to_numpy()
    has_cxr = patients["has_cxr"].to_numpy()
    dod_days = patients["dod"].cast(pl.Int64).fill_null(-1).to_numpy()
    has_dod = dod_days >= 0
    dod = np.where(has_dod, dod_days * DAY, BIG)
    win_lo = year_start(anchor)
    win_hi_year = year_start(anchor + 10) - DAY
    win_hi = np.minimum(win_hi_year, dod)
    cap = np.where(has_cxr, len(N_ADM_CXR), len(N_ADM_EHR))

    st = (studies.join(patients.select("subject_id").with_row_index("p"), on="subject_id")
          .sort("p", "study_datetime", "study_id"))
    t = st["study_datetime"].dt.epoch("s").to_numpy()
    sp = st["p"].to_numpy().astype(np.int64)
    n_s = len(t)

    # ---- care episodes ----------------------------------------------------------------------------
    new = np.ones(n_s, dtype=bool)
    new[1:] = (sp[1:] != sp[:-1]) | (np.diff(t) > GAP)
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], n_s)[:len(starts)]
    ep_of = np.cumsum(new) - 1
    e_p, first, last, e_n = sp[starts], t[starts], t[ends - 1], ends - starts
    n_e = len(starts)
    first_of_p = np.r_[True, e_p[1:] != e_p[:-1]] if n_e else np.zeros(0, bool)
    last_of_p = np.r_[e_p[1:] != e_p[:-1], True] if n_e else np.zeros(0, bool)
    n_first = np.bincount(ep_of, weights=(t == first[ep_of]), minlength=n_e).astype(np.int64)
    second = np.minimum.reduceat(np.where(t > first[ep_of], t, BIG), starts) if n_e else first

    rng = generator(seed, "ehr.episodes")
    # at most `cap` admissions per patient: the episodes with the most studies stay admissions
    order = np.lexsort((rng.random(n_e), -e_n, e_p))
    rank = np.empty(n_e, dtype=np.int64)
    rank[order] = group_rank(e_p[order])
    excess = rank >= cap[e_p]
    small = (last - first) <= SMALL_SPAN
    kind = np.full(n_e, IN)
    kind[excess & ~small] = OUT
    # short episodes become ED-only visits / outpatient studies until their study budgets are used up
    forced = e_n[excess & ~small].sum()
    idx = np.flatnonzero(small)
    idx = idx[np.lexsort((rng.random(len(idx)), ~excess[idx]))]
    cum = np.cumsum(e_n[idx])
    b_ed = SHARE_ED_ONLY * n_s
    kind[idx[cum <= b_ed]] = ED
    kind[idx[(cum > b_ed) & (cum <= b_ed + max(SHARE_OUTPATIENT * n_s - forced, 0))]] = OUT
    kind[excess & (kind == IN)] = OUT

    # deaths: in the admission of a recent last episode, else in a final admission of their own
    n_in = np.bincount(e_p[kind == IN], minlength=n_p)
    last_ep = np.full(n_p, -1)
    last_ep[e_p[last_of_p]] = np.flatnonzero(last_of_p)
    le = np.maximum(last_ep, 0)
    died = has_dod & (dod < win_hi_year) & (rng.random(n_p) < DIED_SHARE)
    merge = died & (last_ep >= 0) & (kind[le] == IN) & (dod - last[le] <= MERGE_DEATH_WITHIN) if n_e else died & False
    death_adm = died & ~merge & (n_in < cap)

    room_before = np.maximum(np.where(first_of_p, first - win_lo[e_p], (first - np.r_[0, last[:-1]]) // 2)
                             - HOUR, 0)
    tail = np.where(death_adm[e_p], (dod[e_p] - last) // 2, win_hi[e_p] - last)
    room_after = np.maximum(np.where(last_of_p, tail, (np.r_[first[1:], 0] - last) // 2) - HOUR, 0)

    # the first study of some admissions happens in the ED, before admittime
    gap2 = second - first
    cand = np.flatnonzero((kind == IN) & (room_before > 3 * HOUR) & (room_after > 12 * HOUR) & (gap2 > HOUR))
    cand = cand[rng.permutation(len(cand))]
    ed_portion = np.zeros(n_e, dtype=bool)
    ed_portion[cand[np.cumsum(n_first[cand]) <= SHARE_ED_PORTION * n_s]] = True
    ed_origin = ed_portion | (rng.random(n_e) < ED_ORIGIN_SHARE)

    # ---- bracket the episodes ---------------------------------------------------------------------
    rng = generator(seed, "ehr.brackets")
    los = lognormal_secs(rng, LOS_MEDIAN, LOS_SIGMA, n_e)
    ed_dur = np.clip(lognormal_secs(rng, ED_MEDIAN, 0.6, n_e), 30 * MINUTE, DAY)
    extra = np.maximum(los - (last - first), 0)
    f = rng.beta(1.3, 3.0, n_e)  # admission X-rays come early in a stay
    ed = np.where(ed_origin, np.minimum(ed_dur, room_before // 2), 0)
    admit = first - np.minimum(30 * MINUTE + (f * extra).astype(np.int64), room_before - ed)
    disch = last + np.minimum(30 * MINUTE + ((1 - f) * extra).astype(np.int64), room_after)
    edreg = admit - ed
    a_off = uniform_int(rng, 20 * MINUTE, np.minimum(6 * HOUR, (gap2 * 0.8).astype(np.int64)), n_e)
    ed_before = np.minimum(uniform_int(rng, 20 * MINUTE, 4 * HOUR, n_e), room_before // 2)
    admit = np.where(ed_portion, first + a_off, admit)
    edreg = np.where(ed_portion, first - ed_before, edreg)
    disch = np.where(ed_portion, np.minimum(np.maximum(admit + los, last + 30 * MINUTE), last + room_after),
                     disch)
    dies_here = last_of_p & merge[e_p]
    disch = np.where(dies_here, dod[e_p] + uniform_int(rng, 0, DAY - 1, n_e), disch)
    edout = admit + np.minimum(uniform_int(rng, 0, 3 * HOUR, n_e), (disch - admit) * 3 // 10)
    v_in = first - np.minimum(uniform_int(rng, 20 * MINUTE, 4 * HOUR, n_e), room_before // 2)
    v_out = last + np.minimum(uniform_int(rng, 20 * MINUTE, 6 * HOUR, n_e), room_after // 2)
    busy_lo = np.select([kind == IN, kind == ED], [edreg, v_in], first)
    busy_hi = np.select([kind == IN, kind == ED], [disch, v_out], last)

    # final death admissions, in the time between the last episode and the death
    prev_end = np.where(last_ep >= 0, busy_hi[le] if n_e else win_lo, win_lo)
    d_p = np.flatnonzero(death_adm)
    d_dis = dod[d_p] + uniform_int(rng, 0, DAY - 1, len(d_p))
    ok = d_dis - prev_end[d_p] > 6 * HOUR
    died[d_p[~ok]] = False
    d_p, d_dis = d_p[ok], d_dis[ok]
    room = d_dis - prev_end[d_p]
    d_adm = np.maximum(d_dis - lognormal_secs(rng, LOS_MEDIAN, LOS_SIGMA, len(d_p)), prev_end[d_p] + room * 3 // 10)
    d_edo = rng.random(len(d_p)) < 0.7
    d_edreg = d_adm - np.where(d_edo, np.minimum(lognormal_secs(rng, ED_MEDIAN, 0.6, len(d_p)),
                                                 (d_adm - prev_end[d_p]) // 2), 0)
    d_edout = d_adm + np.minimum(uniform_int(rng, 0, 3 * HOUR, len(d_p)), (d_dis - d_adm) * 3 // 10)

    # ---- admissions and ED visits without studies, in the free time --------------------------------
    rng = generator(seed, "ehr.extra_stays")
    target = np.where(has_cxr, 1 + weighted(rng, N_ADM_CXR, n_p), 1 + weighted(rng, N_ADM_EHR, n_p))
    n_now = n_in + np.isin(np.arange(n_p), d_p)
    n_extra = np.clip(target - n_now, 0, cap - n_now)
    n_extra = np.where(n_now == 0, np.maximum(n_extra, 1), n_extra)
    n_visits = rng.poisson(EXTRA_ED_VISITS, n_p)
    gaps = free_gaps(np.r_[e_p, d_p], np.r_[busy_lo, d_edreg], np.r_[busy_hi, d_dis], win_lo, win_hi)
    x_p, s_lo, s_hi = place_in_gaps(rng, gaps, n_extra + n_visits, DAY)
    o2 = np.lexsort((rng.random(len(x_p)), x_p))
    is_adm = np.empty(len(x_p), dtype=bool)
    is_adm[o2] = group_rank(x_p[o2]) < n_extra[x_p[o2]]
    slot = s_hi - s_lo
    x_los = np.minimum(lognormal_secs(rng, LOS_MEDIAN, LOS_SIGMA, len(x_p)), slot * 6 // 10)
    x_edo = rng.random(len(x_p)) < ED_ORIGIN_SHARE
    x_ed = np.where(x_edo, np.minimum(lognormal_secs(rng, ED_MEDIAN, 0.6, len(x_p)), slot * 15 // 100), 0)
    x_adm = s_lo + x_ed + (rng.random(len(x_p)) * (slot - x_ed - x_los)).astype(np.int64)
    x_dis = x_adm + x_los
    x_edout = x_adm + np.minimum(uniform_int(rng, 0, 3 * HOUR, len(x_p)), x_los * 3 // 10)
    v_dur = np.minimum(uniform_int(rng, HOUR, 8 * HOUR, len(x_p)), slot // 2)
    xv_in = s_lo + (rng.random(len(x_p)) * (slot - v_dur)).astype(np.int64)

    # ---- planted: a few admissions discharged before they were admitted (as in MIMIC-IV) ------------
    rng = generator(seed, "ehr.violations")
    cand = np.flatnonzero(is_adm & ~x_edo & (x_adm - s_lo >= 2 * HOUR) & (x_los >= 6 * HOUR))
    # never more than 0.5 % of all admissions: the ingest contract tolerates 1 % rejected rows
    n_adm = int((kind == IN).sum()) + len(d_p) + int(is_adm.sum())
    n_bad = min(n_bad, max(1, n_adm // 200))
    cand = cand[np.lexsort((rng.random(len(cand)), has_cxr[x_p[cand]]))][:n_bad]
    bad = np.zeros(len(x_p), dtype=bool)
    bad[cand] = True
    x_rep = np.where(bad, x_adm - uniform_int(rng, HOUR, np.minimum(10 * HOUR, (x_adm - s_lo) // 2), len(x_p)), x_dis)

    # ---- planted: studies covered by two overlapping transfer rows ------------------------------------
    rng = generator(seed, "ehr.overlaps")
    inside = (kind[ep_of] == IN) & (t >= admit[ep_of]) & (t <= disch[ep_of]) if n_s else np.zeros(0, bool)
    pool = np.flatnonzero(inside)
    n_ov = min(len(pool), max(3, round(OVERLAP_SHARE * n_s)))
    ov = np.sort(rng.choice(pool, size=n_ov, replace=False)) if n_ov else pool[:0]
    ov_in = t[ov] - uniform_int(rng, 5 * MINUTE, 90 * MINUTE, n_ov)
    ov_out = t[ov] + uniform_int(rng, 5 * MINUTE, 90 * MINUTE, n_ov)

    # MIMIC records admission and ward times in whole minutes: round outwards so brackets stay brackets
    # (a death time down, so that it stays on the dod)
    admit, edreg, d_adm, d_edreg, x_adm = (floor_min(x) for x in (admit, edreg, d_adm, d_edreg, x_adm))
    disch = np.where(dies_here, floor_min(disch), ceil_min(disch))
    edout, d_edout, x_dis, x_edout = (ceil_min(x) for x in (edout, d_edout, x_dis, x_edout))
    d_dis, x_rep, x_ed = floor_min(d_dis), np.where(bad, floor_min(x_rep), ceil_min(x_rep)), ceil_min(x_ed)
    v_in, xv_in, ov_in = floor_min(v_in), floor_min(xv_in), floor_min(ov_in)
    v_out, v_dur, ov_out = ceil_min(v_out), ceil_min(v_dur), ceil_min(ov_out)

    adm_ep = np.flatnonzero(kind == IN)
    xa = np.flatnonzero(is_adm)
    none = np.full(len(d_p), -1)
    admissions = pl.DataFrame({
        "p": np.r_[e_p[adm_ep], d_p, x_p[xa]],
        "admittime": np.r_[admit[adm_ep], d_adm, x_adm[xa]],
        "dischtime": np.r_[disch[adm_ep], d_dis, x_dis[xa]],
        "reported_disch": np.r_[disch[adm_ep], d_dis, x_rep[xa]],
        "edregtime": np.r_[np.where(ed_origin, edreg, -1)[adm_ep], np.where(d_edo, d_edreg, none),
                           np.where(x_edo, x_adm - x_ed, -1)[xa]],
        "edouttime": np.r_[np.where(ed_origin, edout, -1)[adm_ep], np.where(d_edo, d_edout, none),
                           np.where(x_edo, x_edout, -1)[xa]],
        "died": np.r_[dies_here[adm_ep], np.ones(len(d_p), bool), np.zeros(len(xa), bool)],
        "bad": np.r_[np.zeros(len(adm_ep) + len(d_p), bool), bad[xa]],
        "source": np.r_[np.zeros(len(adm_ep), np.int8), np.ones(len(d_p), np.int8), np.full(len(xa), 2, np.int8)],
    }).with_columns(ed_origin=pl.col("edregtime") >= 0).sort("p", "admittime", maintain_order=True)
    ev = np.flatnonzero(kind == ED)
    xv = np.flatnonzero(~is_adm)
    ed_visits = pl.DataFrame({
        "p": np.r_[e_p[ev], x_p[xv], sp[ov]],
        "intime": np.r_[v_in[ev], xv_in[xv], ov_in],
        "outtime": np.r_[v_out[ev], xv_in[xv] + v_dur[xv], ov_out],
    }).sort("p", "intime", maintain_order=True)
    return Timeline(admissions, ed_visits, win_lo, win_hi)
