"""microbiologyevents: one row per specimen x test x isolated organism x antibiotic.

A negative culture is one row with null org_name (about 70 % of tests); a positive one has a row per
reported antibiotic of each isolate (dilution, S/I/R interpretation), or a single row when the organism is
not susceptibility-tested (yeast, MRSA screen). Gram stains and PCR tests report in comments only.
chartdate is the midnight of charttime; a few specimens carry only the date (charttime null), which the
database build fills from chartdate.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ehrxqa_pipeline.demo.ehr import vocab_orders as V
from ehrxqa_pipeline.demo.ehr.util import (DAY, dt_series, expand, floor_min, num_series, rank_in_group, stratified,
                                           table, take, uniform_int, unique_ids, weighted)
from ehrxqa_pipeline.rng import generator

REPORT_ONLY = {"GRAM STAIN", "C. difficile PCR"}  # tests without organism rows
GRAM_COMMENT = "1+ (<1 per 1000X FIELD):   POLYMORPHONUCLEAR LEUKOCYTES."


def make_microbiologyevents(seed: int, density: float, adm: pl.DataFrame) -> pl.DataFrame:
    rng = generator(seed, "ehr.microbiologyevents")
    a = adm.filter("ok")
    start, end = a["start"].to_numpy(), a["end"].to_numpy()
    n_spec = rng.poisson((V.MICRO_BASE + V.MICRO_PER_DAY * (end - start) / DAY) * density)
    s_adm, s_time = stratified(rng, start, end, n_spec)
    ns = len(s_adm)
    spec = weighted(rng, [s[2] for s in V.SPECIMENS], ns)
    no_time = rng.random(ns) < V.MICRO_NULL_CHARTTIME_SHARE

    # tests of each specimen
    n_tests = np.array([len(s[3]) for s in V.SPECIMENS])
    t_spec = expand(n_tests[spec])
    t_seq = rank_in_group(n_tests[spec])
    tests = [t for s in V.SPECIMENS for t in s[3]]
    t_off = np.cumsum(n_tests) - n_tests
    t_idx = t_off[spec[t_spec]] + t_seq
    report_only = np.array([t[1] in REPORT_ONLY for t in tests])[t_idx]
    p_pos = np.array([s[4] for s in V.SPECIMENS])[spec[t_spec]]
    positive = ~report_only & (rng.random(len(t_spec)) < p_pos)

    # isolates of positive tests: organism drawn from the specimen type's flora
    orgs = list(V.ORGANISMS)
    probs = np.zeros((len(V.SPECIMENS), len(orgs)))
    for i, s in enumerate(V.SPECIMENS):  # per specimen type (7), not per row
        for name, w in s[5].items():
            probs[i, orgs.index(name)] = w
    cdf = np.cumsum(probs / probs.sum(1, keepdims=True), axis=1)
    n_iso = np.where(positive, 1 + (rng.random(len(t_spec)) < 0.15), 1)
    i_test = expand(n_iso)
    iso_num = rank_in_group(n_iso) + 1
    u = rng.random(len(i_test))
    org = np.minimum((u[:, None] > cdf[spec[t_spec[i_test]]]).sum(1), len(orgs) - 1)
    has_org = positive[i_test]
    panel_of = np.array([{"gn": 1, "gp": 2}.get(V.ORGANISMS[o][1], 0) for o in orgs])[org] * has_org

    # antibiotics of tested isolates; isolates with nothing reported keep one row without antibiotic
    panels = [[], V.ANTIBIOTICS["gn"], V.ANTIBIOTICS["gp"]]
    p_size = np.array([len(p) for p in panels])
    c_iso = expand(p_size[panel_of])
    c_rank = rank_in_group(p_size[panel_of])
    keep = rng.random(len(c_iso)) < V.AB_KEEP
    c_iso, c_rank = c_iso[keep], c_rank[keep]
    bare = np.bincount(c_iso, minlength=len(i_test)) == 0
    r_iso = np.r_[c_iso, np.flatnonzero(bare)]
    ab_flat = [ab for p in panels for ab in p]
    p_off = np.cumsum(p_size) - p_size
    r_ab = np.r_[p_off[panel_of[c_iso]] + c_rank, np.full(bare.sum(), -1)]
    order = np.lexsort((r_ab, r_iso))
    r_iso, r_ab = r_iso[order], r_ab[order]
    n = len(r_iso)
    r_test = i_test[r_iso]
    r_spec = t_spec[r_test]
    has_ab = r_ab >= 0
    r_org = np.where(has_org[r_iso], org[r_iso], -1)

    mic = rng.integers(0, len(V.MIC_VALUES), n)
    comp = np.where(mic == 0, 0, np.where(mic == len(V.MIC_VALUES) - 1, 2, 1))
    mic_txt = [f"{v:g}" for v in V.MIC_VALUES]
    dil_text = [c + m for c in ("<=", "", ">=") for m in mic_txt]
    interp, k_int = list(V.INTERPRETATIONS), weighted(rng, list(V.INTERPRETATIONS.values()), n)
    quant = list(V.GROWTH_QUANTITIES)
    k_q = weighted(rng, list(V.GROWTH_QUANTITIES.values()), len(i_test))[r_iso]  # one per isolate
    spec_names = [s[1] for s in V.SPECIMENS]
    neg_comment = np.array([spec_names.index(s[1]) for s in V.SPECIMENS])
    comments = [V.NEGATIVE_COMMENTS[s] for s in spec_names] + [GRAM_COMMENT, "NEGATIVE.", "POSITIVE."]
    test_names = np.array([t[1] for t in tests])[t_idx[r_test]]
    c_idx = np.select([test_names == "GRAM STAIN", test_names == "C. difficile PCR"],
                      [len(spec_names), len(spec_names) + 1 + (rng.random(n) < 0.12)], neg_comment[spec[r_spec]])
    charttime = s_time[r_spec]
    ct_null = no_time[r_spec]
    store = charttime + floor_min(uniform_int(rng, DAY, 4 * DAY, ns))[r_spec]
    has_result = rng.random(ns)[r_spec] < 0.97
    prov = [f"P{v:05X}" for v in rng.choice(0xFFFFF, 200, replace=False)]
    spec_id = unique_ids(rng, 1_000_000, 10_000_000, ns)
    org_ids = np.array([V.ORGANISMS[o][0] for o in orgs])
    ab_ids = np.array([i for i, _ in ab_flat])
    df = pl.DataFrame({
        "subject_id": a["subject_id"].to_numpy()[s_adm[r_spec]], "hadm_id": a["hadm_id"].to_numpy()[s_adm[r_spec]],
        "micro_specimen_id": spec_id[r_spec],
        "order_provider_id": take(prov, rng.integers(0, len(prov), ns)[r_spec], (rng.random(ns) < 0.5)[r_spec]),
        "chartdate": dt_series(charttime // DAY * DAY), "charttime": dt_series(charttime, ct_null),
        "spec_itemid": np.array([s[0] for s in V.SPECIMENS])[spec[r_spec]],
        "spec_type_desc": take(spec_names, spec[r_spec]), "test_seq": t_seq[r_test] + 1,
        "storedate": dt_series(store // DAY * DAY, ~has_result), "storetime": dt_series(store, ~has_result),
        "test_itemid": np.array([t[0] for t in tests])[t_idx[r_test]], "test_name": pl.Series(test_names),
        "org_itemid": num_series(org_ids[np.maximum(r_org, 0)], pl.Int64, r_org < 0),
        "org_name": take(orgs, np.maximum(r_org, 0), r_org < 0),
        "isolate_num": num_series(iso_num[r_iso], pl.Int64, r_org < 0),
        "quantity": take([q or "" for q in quant], k_q, (r_org < 0) | np.array([q is None for q in quant])[k_q]),
        "ab_itemid": num_series(ab_ids[np.maximum(r_ab, 0)], pl.Int64, ~has_ab),
        "ab_name": take([b for _, b in ab_flat], np.maximum(r_ab, 0), ~has_ab),
        "dilution_text": take(dil_text, comp * len(mic_txt) + mic, ~has_ab),
        "dilution_comparison": take(["<=", "=", ">="], comp, ~has_ab),
        "dilution_value": num_series(np.array(V.MIC_VALUES)[mic], pl.Float64, ~has_ab),
        "interpretation": take([x or "" for x in interp], k_int,
                               ~has_ab | np.array([x is None for x in interp])[k_int]),
        "comments": take(comments, c_idx, r_org >= 0),
    })
    df = df.sort("subject_id", "chartdate", "micro_specimen_id", maintain_order=True)
    df = df.with_columns(microevent_id=pl.int_range(1, pl.len() + 1))
    return table("microbiologyevents", {c: df[c] for c in df.columns})
