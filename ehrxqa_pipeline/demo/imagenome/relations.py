"""Sentence-level relation rows of a report, written from the study's truth.

Grain: one row per report sentence x object x attribute mention (relation 1 affirmed / 0 negated), at
study level; the caller copies a study's rows to each of its frontal images.

Invariant: per (object, attribute) the LAST sentence that mentions it carries the truth -- affirmed for
truth pairs, negated otherwise -- so "last sentence wins" recovers the truth exactly. On top of the plain
mentions it plants, with a ``tag`` per row for exact counting:
- ``TAG_NEG_FIRST``: a truth pair negated in an earlier sentence (then affirmed later);
- ``TAG_AFF_FIRST``: an absent pair affirmed in an earlier sentence (then negated later);
- ``TAG_IMPOSSIBLE``: a negated pair the ontology forbids;
- rows with bbox ``unknown`` and ``nlp`` rows (normal/abnormal per sentence and object).
Negations never contradict the truth through the hierarchy ("no lung opacity in the right lung" is not
written when the right lower zone holds pneumonia).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ehrxqa_pipeline.demo.imagenome.findings import (ABNORMAL, CAT_CODE, CATEGORIES, IMPOSSIBLE_NEGATED, NORMAL,
                                                     UNKNOWN, A, O, _expand, ancestor_pairs)

TAG_PLAIN, TAG_NEG_FIRST, TAG_AFF_FIRST, TAG_IMPOSSIBLE = 0, 1, 2, 3
# (attributes, objects, P per study): typical negative statements ("lungs are clear", "no effusion or
# pneumothorax", "heart size is normal", ...), each written for every attribute x object it names.
NEGATIONS = (
    ("lung opacity|consolidation", "*lung|*upper lung zone|*mid lung zone|*lower lung zone", .5),
    ("pleural effusion|pneumothorax", "*lung|*costophrenic angle", .55),
    ("pneumothorax", "*lung|*apical zone", .25), ("consolidation|pneumonia", "*lung", .3),
    ("pulmonary edema/hazy opacity|vascular congestion", "*lung|*hilar structures", .3),
    ("pneumonia", "*lower lung zone", .15), ("enlarged cardiac silhouette", "cardiac silhouette", .45),
    ("enlarged cardiac silhouette|mediastinal widening", "mediastinum", .25),
    ("mediastinal widening", "upper mediastinum", .1), ("enlarged hilum", "*hilar structures", .15),
    ("rib fracture", "*chest wall", .08), ("atelectasis", "*lower lung zone", .12),
    ("mass/nodule (not otherwise specified)", "*lung", .06), ("sub-diaphragmatic air", "*hemidiaphragm", .04),
    ("pneumomediastinum", "mediastinum", .03), ("rotated", "spine", .03),
    ("costophrenic angle blunting", "*costophrenic angle", .1), ("bronchiectasis", "*lung", .01),
    ("subcutaneous air", "*arm", .005),
)
SCHEMA = {"sidx": pl.Int64, "sent": pl.Int64, "obj": pl.Int16, "att": pl.Int16, "rel": pl.Int8, "tag": pl.Int8}


def _statement_pairs() -> pl.DataFrame:
    rows = [(i, O[o], A[a]) for i, (attrs, objs, _) in enumerate(NEGATIONS)
            for a in attrs.split("|") for o in _expand(objs)]
    return pl.DataFrame(rows, schema=["st", "obj", "att"], orient="row").cast(
        {"st": pl.Int64, "obj": pl.Int16, "att": pl.Int16})


def _other_sentence(rng, s: np.ndarray, k: np.ndarray) -> np.ndarray:
    """A sentence of the same report different from ``s`` (needs k >= 2)."""
    return (s - 1 + rng.integers(1, np.maximum(k, 2))) % np.maximum(k, 2) + 1


def _mentions(rng, units: pl.DataFrame, k: np.ndarray, repeat: float) -> pl.DataFrame:
    """units (sidx, unit) -> (sidx, unit, sent): one sentence each, a second distinct one for ``repeat``."""
    sidx = units["sidx"].to_numpy()
    kk = k[sidx]
    s1 = rng.integers(1, kk + 1)
    two = rng.random(len(sidx)) < repeat
    s2 = _other_sentence(rng, s1, kk)
    first = units.with_columns(sent=pl.Series(s1))
    return pl.concat([first, units.filter(pl.Series(two)).with_columns(sent=pl.Series(s2[two]))])


def _conflicts(rng, mentions: pl.DataFrame, rate: float) -> pl.DataFrame:
    """One pair per chosen study, a new mention strictly before its last one and on no existing one."""
    cand = mentions.group_by("sidx", "obj", "att").agg(last=pl.col("sent").max()).filter(pl.col("last") >= 2)
    cand = cand.sort("sidx", "obj", "att").with_columns(r=pl.Series(rng.random(cand.height)))
    cand = cand.sort("r").unique("sidx", keep="first").sort("sidx")
    s = rng.integers(1, cand["last"].to_numpy()) if cand.height else np.zeros(0, np.int64)
    cand = cand.with_columns(sent=pl.Series(s, dtype=pl.Int64)).select("sidx", "sent", "obj", "att")
    cand = cand.join(mentions, on=["sidx", "sent", "obj", "att"], how="anti", maintain_order="left")
    take = rng.random(cand.height) < rate
    take[:1] |= not take.any()  # at least one of each kind, even in a tiny source
    return cand.filter(pl.Series(take))


def write_relations(rng: np.random.Generator, truth: pl.DataFrame, n: int) -> pl.DataFrame:
    """Relation rows (sidx, sent, obj, att, rel, tag, cat, context) for studies 0..n-1 of ``truth``."""
    k = 3 + rng.binomial(9, 0.35, n)  # sentences per report, up to 12 (so "10" sorts before "2" as text)
    # Affirmed mentions: one sentence per statement group, a third of them repeated in the impression.
    groups = _mentions(rng, truth.select("sidx", unit="grp").unique(maintain_order=True), k, 0.3)
    aff = (truth.join(groups.rename({"unit": "grp"}), on=["sidx", "grp"])
           .select("sidx", "sent", "obj", "att").unique(maintain_order=True))
    # Negative statements, dropped where they would contradict the truth at any hierarchy level.
    hit_s, hit_st = np.nonzero(rng.random((n, len(NEGATIONS))) < np.array([p for *_, p in NEGATIONS]))
    # Every report says something: a study with no finding and no negation gets "no effusion/pneumothorax".
    silent = np.setdiff1d(np.arange(n), np.r_[hit_s, truth["sidx"].to_numpy()])
    order = np.argsort(np.r_[hit_s, silent], kind="stable")
    hit_s, hit_st = np.r_[hit_s, silent][order], np.r_[hit_st, np.full(len(silent), 1)][order]
    stm = _mentions(rng, pl.DataFrame({"sidx": hit_s, "unit": hit_st}), k, 0.25)
    neg = stm.join(_statement_pairs(), left_on="unit", right_on="st").select("sidx", "sent", "obj", "att")
    forbidden = (truth.select("sidx", "obj", "att").join(ancestor_pairs(), on=["obj", "att"])
                 .select("sidx", obj="n_obj", att="n_att").unique())
    neg = neg.join(forbidden, on=["sidx", "obj", "att"], how="anti").unique(maintain_order=True)
    # Conflicts: truth negated first / absent pairs affirmed first.
    neg_first = _conflicts(rng, aff, 0.06)
    aff_first = _conflicts(rng, neg, 0.06)
    imp_s = np.sort(rng.choice(n, min(n, max(1, round(0.006 * n))), replace=False))
    pick = rng.integers(0, len(IMPOSSIBLE_NEGATED), len(imp_s))
    impossible = pl.DataFrame({
        "sidx": imp_s, "sent": rng.integers(1, k[imp_s] + 1),
        "obj": [O[IMPOSSIBLE_NEGATED[i][0]] for i in pick], "att": [A[IMPOSSIBLE_NEGATED[i][1]] for i in pick]})
    # Location-less mentions ("endotracheal tube in place", "no acute process") go to bbox unknown.
    unk_aff = aff.filter(pl.Series(rng.random(aff.height) < 0.12)).unique(["sidx", "sent", "att"])
    unk_neg = neg.filter(pl.Series(rng.random(neg.height) < 0.04)).unique(["sidx", "sent", "att"])
    parts = [
        aff.with_columns(rel=1, tag=TAG_PLAIN), neg.with_columns(rel=0, tag=TAG_PLAIN),
        neg_first.with_columns(rel=0, tag=TAG_NEG_FIRST), aff_first.with_columns(rel=1, tag=TAG_AFF_FIRST),
        impossible.with_columns(rel=0, tag=TAG_IMPOSSIBLE),
        unk_aff.with_columns(obj=UNKNOWN, rel=1, tag=TAG_PLAIN), unk_neg.with_columns(obj=UNKNOWN, rel=0, tag=TAG_PLAIN),
    ]
    rows = pl.concat([p.select("sidx", "sent", "obj", "att", "rel", "tag").cast(SCHEMA) for p in parts])
    cat = pl.Series(CAT_CODE)
    rows = rows.with_columns(cat=cat.gather(rows["att"].cast(pl.Int64)))
    # nlp rows: per sentence and object, "abnormal" when the sentence affirms a non-technical finding there.
    nlp = (rows.group_by("sidx", "sent", "obj")
           .agg(ab=((pl.col("rel") == 1) & (pl.col("cat") != CATEGORIES.index("technicalassessment"))).any())
           .select("sidx", "sent", "obj", att=pl.when("ab").then(ABNORMAL).otherwise(NORMAL).cast(pl.Int16),
                   rel=pl.lit(1, pl.Int8), tag=pl.lit(TAG_PLAIN, pl.Int8), cat=pl.lit(5, pl.Int8)))
    rows = pl.concat([rows, nlp]).sort("sidx", "sent", "obj", "att", "rel")
    # context is the scene graph's yes/no token, of which relation is the 1/0 form (docs/scene_graph.md).
    return rows.with_columns(context=pl.when(pl.col("rel") == 1).then(pl.lit("yes")).otherwise(pl.lit("no")))

