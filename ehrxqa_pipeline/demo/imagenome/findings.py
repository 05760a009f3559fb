"""Ground-truth findings of each frontal study: what its report finally affirms.

Grain: one row per frontal study x object x attribute that the report affirms (its last mention is
positive). All frontal images of a study share its report, so they share these findings; the phantom
renderer draws them and the relation generator writes the sentences that say them.

Findings come from a catalogue of typical statements (attribute, where it sits, prevalence) modulated by
per-study latent states (portable/ICU film, heart failure, recent cardiac surgery, normal study), so that
findings co-occur the way they do in real reports. Parent attributes are often said too ("opacity ...
likely pneumonia"), always at the SAME object: naming the parent object would make the renderer paint the
whole lung. A few affirmed pairs that the ontology forbids and a few findings of the later-removed
labels/objects are planted here; everything else is a possible pair after the pipeline's closure.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ehrxqa_pipeline.demo.ontology import (ATTRIBUTES, CATEGORY_OF, REMOVED_ATTRIBUTES, REMOVED_OBJECTS,
                                           REPORT_OBJECTS, _both, attribute_ancestors, closed_possible,
                                           object_ancestors)

OBJ = (*REPORT_OBJECTS, "unknown")
ATT = (*ATTRIBUTES, "normal", "abnormal")
O = {o: i for i, o in enumerate(OBJ)}
A = {a: i for i, a in enumerate(ATT)}
UNKNOWN, NORMAL, ABNORMAL = O["unknown"], A["normal"], A["abnormal"]
CATEGORIES = ("anatomicalfinding", "disease", "technicalassessment", "tubesandlines", "device", "nlp")
CAT_CODE = np.array([CATEGORIES.index(CATEGORY_OF[a]) for a in ATTRIBUTES] + [5, 5], np.int8)
MIRROR = np.array([O.get(o.replace("right ", "left ", 1) if o.startswith("right ")
                         else o.replace("left ", "right ", 1), -1) if o.startswith(("right ", "left "))
                   else -1 for o in OBJ], np.int64)
ZONES = "*upper lung zone|*mid lung zone|*lower lung zone"

# (attribute, objects "|"-separated (repeat = weight), base %, x icu, x heart failure, x cardiac surgery,
#  P(bilateral)). Percentages are per frontal study before the latent multipliers.
CATALOGUE = (
    ("lung opacity", ZONES, 8, 1.5, 1, 1, .3), ("airspace opacity", "*lower lung zone|*mid lung zone", 3, 1.5, 1, 1, .2),
    ("consolidation", ZONES, 4, 1.5, 1, 1, .2), ("infiltration", ZONES, 1.5, 1, 1, 1, .2),
    ("atelectasis", "*lower lung zone|*lower lung zone|*costophrenic angle", 12, 2, 1, 1.5, .45),
    ("linear/patchy atelectasis", "*lower lung zone|*mid lung zone", 5, 1, 1, 1, .3),
    ("lobar/segmental collapse", "*lower lung zone|*upper lung zone", 1.5, 2, 1, 1, 0),
    ("pulmonary edema/hazy opacity", "*lung|*hilar structures", 5, 1.5, 6, 1, .9),
    ("vascular congestion", "*hilar structures|*lung", 5, 1, 5, 1, .9),
    ("vascular redistribution", "*upper lung zone", 1, 1, 4, 1, .9),
    ("increased reticular markings/ild pattern", "*lower lung zone", 2, 1, 1, 1, .8),
    ("pleural effusion", "*costophrenic angle|*costophrenic angle|*lower lung zone|*lung", 14, 2, 2.5, 2, .4),
    ("costophrenic angle blunting", "*costophrenic angle", 4, 1, 1, 1, .3),
    ("pleural/parenchymal scarring", "*apical zone|*costophrenic angle", 3, 1, 1, 1, .3),
    ("bronchiectasis", "*lower lung zone", .5, 1, 1, 1, .5),
    ("enlarged cardiac silhouette", "cardiac silhouette", 15, 1.2, 3.5, 1.5, 0),
    ("mediastinal displacement", "trachea|mediastinum", .8, 1, 1, 1, 0),
    ("mediastinal widening", "mediastinum|upper mediastinum", 1.2, 1, 1, 3, 0),
    ("enlarged hilum", "*hilar structures", 1.5, 1, 1, 1, .4),
    ("tortuous aorta", "aortic arch", 5, 1, 1, 1, 0), ("vascular calcification", "aortic arch", 4, 1, 1, 1, 0),
    ("pneumomediastinum", "mediastinum", .3, 1, 1, 5, 0),
    ("pneumothorax", "*apical zone|*apical zone|*lung|*upper lung zone", 3, 1.5, 1, 2, .05),
    ("hydropneumothorax", "*lower lung zone|*costophrenic angle", .3, 1, 1, 1, 0),
    ("lung lesion", ZONES, 1, 1, 1, 1, 0), ("mass/nodule (not otherwise specified)", f"{ZONES}|*hilar structures", 2.5, 1, 1, 1, 0),
    ("multiple masses/nodules", ZONES, .8, 1, 1, 1, .6), ("calcified nodule", ZONES, 2, 1, 1, 1, .1),
    ("superior mediastinal mass/enlargement", "upper mediastinum", .8, 1, 1, 1, 0),
    ("rib fracture", "*chest wall|*mid lung zone|*lower lung zone", 1.5, 1, 1, 1, .1),
    ("clavicle fracture", "*clavicle", .5, 1, 1, 1, 0), ("spinal fracture", "spine", .5, 1, 1, 1, 0),
    ("hyperaeration", "*lung", 4, 1, 1, 1, .95), ("cyst/bullae", "*apical zone|*upper lung zone", .8, 1, 1, 1, .3),
    ("elevated hemidiaphragm", "*hemidiaphragm", 4, 1, 1, 1.5, 0),
    ("diaphragmatic eventration (benign)", "*hemidiaphragm", .3, 1, 1, 1, 0),
    ("sub-diaphragmatic air", "*hemidiaphragm|abdomen", .5, 1, 1, 2, .3),
    ("subcutaneous air", "*chest wall|*chest wall|neck", 1, 1, 1, 3, .2),
    ("hernia", "mediastinum|cardiac silhouette|*hemidiaphragm", 1.5, 1, 1, 1, 0),
    ("scoliosis", "spine", 3, 1, 1, 1, 0), ("spinal degenerative changes", "spine", 4, 1, 1, 1, 0),
    ("shoulder osteoarthritis", "*shoulder", .8, 1, 1, 1, .3), ("bone lesion", "spine|*clavicle|*chest wall", .5, 1, 1, 1, 0),
    ("alveolar hemorrhage", ZONES, .2, 1, 1, 1, .7), ("aspiration", "*lower lung zone", 1.5, 2, 1, 1, .3),
    ("copd/emphysema", "*lung|*upper lung zone", 3, 1, 1, 1, .9),
    ("fluid overload/heart failure", "*lung|cardiac silhouette", 2, 1, 8, 1, .9),
    ("goiter", "neck|upper mediastinum", .4, 1, 1, 1, 0), ("granulomatous disease", "*hilar structures|*upper lung zone", 1, 1, 1, 1, .3),
    ("interstitial lung disease", "*lower lung zone", 1, 1, 1, 1, .9), ("lung cancer", f"{ZONES}|*hilar structures", .8, 1, 1, 1, 0),
    ("pericardial effusion", "cardiac silhouette", .3, 1, 3, 3, 0), ("pneumonia", "*lower lung zone|*mid lung zone", 6, 1.5, 1, 1, .2),
    ("artifact", "*lung|*chest wall", .5, 1, 1, 1, 0), ("breast/nipple shadows", "*breast|*lower lung zone", 1.5, 1, 1, 1, .7),
    ("low lung volumes", "*lung", 6, 1.5, 1, 1.5, .95), ("rotated", "spine", 2, 1.5, 1, 1, 0),
    ("skin fold", "*chest wall", .3, 3, 1, 1, 0),
    ("chest port", "*chest wall|svc|cavoatrial junction", 3, 1, 1, 1, 0),
    ("chest tube", "*apical zone|*lower lung zone", 2.5, 2, 1, 4, .15),
    ("endotracheal tube", "trachea", 3, 4, 1, 3, 0), ("enteric tube", "abdomen|mediastinum", 3, 4, 1, 3, 0),
    ("ij line", "svc|cavoatrial junction|neck", 3, 3, 1, 3, 0), ("intra-aortic balloon pump", "aortic arch", .2, 2, 1, 3, 0),
    ("mediastinal drain", "mediastinum", .3, 1, 1, 15, 0),
    ("picc", "svc|svc|svc|cavoatrial junction|cavoatrial junction|cavoatrial junction|right atrium|right arm", 3, 2, 1, 1, 0),
    ("pigtail catheter", "*lower lung zone|*costophrenic angle", .4, 1, 1, 1, 0),
    ("subclavian line", "svc|cavoatrial junction", .8, 2, 1, 1, 0),
    ("swan-ganz catheter", "*hilar structures|svc", .4, 2, 1, 8, 0), ("tracheostomy tube", "trachea", .8, 2, 1, 1, 0),
    ("cabg grafts", "cardiac silhouette", 1, 1, 1, 20, 0),
    ("cardiac pacer and wires", "cardiac silhouette|right atrium|*chest wall", 4, 1, 1.5, 1, 0),
    ("prosthetic valve", "cardiac silhouette", .8, 1, 1, 6, 0), ("aortic graft/repair", "aortic arch", .3, 1, 1, 1, 0),
    ("sternotomy wires", "mediastinum", 2, 1, 1, 15, 0),
)
# Echoes never name these parents: a goiter is not a reason to widen the drawn mediastinum.
NO_ECHO = frozenset({"mediastinal widening", "superior mediastinal mass/enlargement"})
# Affirmed pairs the ontology forbids (NLP mislocations); the relation generator plants negated ones apart.
IMPOSSIBLE_AFFIRMED = (("spine", "pneumonia"), ("trachea", "pleural effusion"), ("right clavicle", "atelectasis"),
                       ("abdomen", "pneumothorax"), ("left breast", "endotracheal tube"))
IMPOSSIBLE_NEGATED = (("carina", "pleural effusion"), ("right shoulder", "pulmonary edema/hazy opacity"),
                      ("neck", "consolidation"), ("left hemidiaphragm", "rib fracture"), ("svc", "pneumothorax"))


def _expand(spec: str) -> list[str]:
    return _both(*spec.split("|"))


def _check_catalogue() -> None:
    poss = closed_possible()
    for attr, spec, *_ in CATALOGUE:
        bad = [o for o in _expand(spec) if (o, attr) not in poss]
        assert not bad, f"catalogue places {attr!r} at impossible {bad}"
    for o, a in (*IMPOSSIBLE_AFFIRMED, *IMPOSSIBLE_NEGATED):
        family = {(oo, aa) for oo in {o, *object_ancestors()[o]} for aa in {a, *attribute_ancestors()[a]}}
        assert not family & poss, f"planted impossible pair ({o}, {a}) is possible at some level"


_check_catalogue()


def ancestor_pairs() -> pl.DataFrame:
    """(obj, att) -> every (ancestor-or-self obj, ancestor-or-self att): a negation of any of those would
    contradict an affirmed (obj, att)."""
    oa, aa = object_ancestors(), attribute_ancestors()
    rows = [(O[o], A[a], O[po], A[pa]) for o in REPORT_OBJECTS for a in ATTRIBUTES
            for po in {o, *oa[o]} for pa in {a, *aa[a]}]
    return pl.DataFrame(rows, schema=["obj", "att", "n_obj", "n_att"], orient="row").cast(pl.Int16)


def _catalogue_arrays():
    opts = [[O[o] for o in _expand(spec)] for _, spec, *_ in CATALOGUE]
    width = max(map(len, opts))
    table = np.array([o + [o[0]] * (width - len(o)) for o in opts], np.int64)
    num = np.array([len(o) for o in opts])
    att = np.array([A[c[0]] for c in CATALOGUE])
    base, icu, chf, surg, bil = (np.array([c[i] for c in CATALOGUE], float) for i in range(2, 7))
    return table, num, att, base / 100, icu, chf, surg, bil


def sample_truth(rng: np.random.Generator, portable: np.ndarray) -> tuple[pl.DataFrame, dict]:
    """Truth for n frontal studies (``portable``: the study's primary frontal image is AP).

    Returns rows (sidx, obj, att, grp) -- grp = the statement a row belongs to (echoes and the mirrored
    side of a bilateral finding share it) -- and exact counts of what was planted."""
    n = len(portable)
    table, num, att, base, m_icu, m_chf, m_surg, bil = _catalogue_arrays()
    normal = rng.random(n) < 0.3
    chf = rng.random(n) < 0.12
    surg = rng.random(n) < 0.06
    p = base[None, :] * np.where(portable[:, None], m_icu, 1) * np.where(chf[:, None], m_chf, 1)
    p = np.minimum(p * np.where(surg[:, None], m_surg, 1) * np.where(normal[:, None], 0.03, 1), 0.9)
    s, e = np.nonzero(rng.random((n, len(base))) < p)
    obj = table[e, (rng.random(len(e)) * num[e]).astype(np.int64)]
    grp = np.arange(len(e))
    two = (MIRROR[obj] >= 0) & (rng.random(len(e)) < bil[e])
    s, a, o, g = (np.r_[s, s[two]], np.r_[att[e], att[e][two]], np.r_[obj, MIRROR[obj][two]], np.r_[grp, grp[two]])
    rows = pl.DataFrame({"sidx": s, "obj": o, "att": a, "grp": g}).cast(
        {"sidx": pl.Int64, "obj": pl.Int16, "att": pl.Int16, "grp": pl.Int64})
    # Parent attributes said along with the finding, at the same object, for about half the statements.
    aa = attribute_ancestors()
    echo_map = pl.DataFrame([(A[c], A[p]) for c in ATTRIBUTES for p in aa[c] if p not in NO_ECHO],
                            schema=["att", "echo"], orient="row").cast(pl.Int16)
    said = rows.filter(pl.Series(rng.random(rows.height) < 0.5))
    echoes = said.join(echo_map, on="att").select("sidx", "obj", pl.col("echo").alias("att"), "grp")
    k = max(1, round(0.004 * n))
    plant_s = np.sort(rng.choice(n, min(k, n), replace=False))
    pick = rng.integers(0, len(IMPOSSIBLE_AFFIRMED), len(plant_s))
    planted = pl.DataFrame({
        "sidx": plant_s, "obj": [O[IMPOSSIBLE_AFFIRMED[i][0]] for i in pick],
        "att": [A[IMPOSSIBLE_AFFIRMED[i][1]] for i in pick], "grp": len(e) + np.arange(len(plant_s)),
    }).cast({"sidx": pl.Int64, "obj": pl.Int16, "att": pl.Int16, "grp": pl.Int64})
    # Even a tiny source shows an enlarged heart and a widened mediastinum (CTR/MTR questions need both).
    must = [(o, a) for o, a in (("cardiac silhouette", "enlarged cardiac silhouette"), ("mediastinum", "mediastinal widening"))
            if not ((rows["obj"] == O[o]) & (rows["att"] == A[a])).any()]
    forced = pl.DataFrame({"sidx": rng.integers(0, n, len(must)), "obj": [O[o] for o, _ in must],
                           "att": [A[a] for _, a in must], "grp": len(e) + len(plant_s) + np.arange(len(must))})
    forced = forced.cast(planted.schema)
    truth = pl.concat([rows, echoes, planted, forced]).unique(["sidx", "obj", "att"], keep="first", maintain_order=True)
    truth = truth.sort("sidx", "grp", "obj", "att")
    removed = [A[x] for x in REMOVED_ATTRIBUTES]
    arms = [O[x] for x in REMOVED_OBJECTS]
    counts = {
        "affirmed_pairs": truth.height, "studies_with_findings": truth["sidx"].n_unique(),
        "impossible_affirmed_pairs": len(plant_s),
        "removed_label_affirmed_pairs": truth.filter(pl.col("att").is_in(removed) | pl.col("obj").is_in(arms)).height,
    }
    return truth, counts


def study_flags(truth: pl.DataFrame, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(enlarged heart, widened mediastinum) per study, from the truth."""
    enlarged, widened = np.zeros(n, bool), np.zeros(n, bool)
    ecs = truth.filter((pl.col("obj") == O["cardiac silhouette"]) & (pl.col("att") == A["enlarged cardiac silhouette"]))
    wide = truth.filter(pl.col("obj").is_in([O["mediastinum"], O["upper mediastinum"]])
                        & pl.col("att").is_in([A["mediastinal widening"], A["superior mediastinal mass/enlargement"]]))
    enlarged[ecs["sidx"].to_numpy()] = True
    widened[wide["sidx"].to_numpy()] = True
    return enlarged, widened
