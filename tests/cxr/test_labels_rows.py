"""Label refinement (cxr/labels.py) on hand-made rows: relations_sql over an ingest-shaped relations table,
then refine_labels with a hand-written ontology, asserting the exact affirmed rows, rejected rows and reasons,
the dense view and the counts, each derived by hand in the test.

The ontology is written out in full (no semantics files, no closure code): every ancestor map and possible
pair is stated, so a reader can check each expected row against it.
"""

from __future__ import annotations

import duckdb
import polars as pl

from ehrxqa_pipeline.cxr.labels import DROP_REASONS, dense_labels_sql, refine_labels, relations_sql
from ehrxqa_pipeline.cxr.ontology import Ontology

LUNG, LOWER, HEART, ARM = "lung", "lower lung", "heart", "arm"  # lower lung is in the lung; arm is removed
OPACITY, PNEUMONIA, TUBE, PIGTAIL = "opacity", "pneumonia", "tube", "pigtail"  # pigtail is removed
ENLARGED, FRACTURE = "enlarged", "fracture"
CATEGORY = {OPACITY: "anatomicalfinding", PNEUMONIA: "disease", TUBE: "tubesandlines", PIGTAIL: "tubesandlines",
            ENLARGED: "anatomicalfinding", FRACTURE: "anatomicalfinding"}
# Possible pairs, closed upwards by hand: pneumonia and pigtail are possible at the lower lung, so are their
# parents (opacity, tube) and both at the lung; opacity and enlarged at the heart; fracture at the arm.
ALL_PAIRS = {(LOWER, PNEUMONIA), (LOWER, OPACITY), (LUNG, PNEUMONIA), (LUNG, OPACITY),
             (LOWER, PIGTAIL), (LOWER, TUBE), (LUNG, PIGTAIL), (LUNG, TUBE),
             (HEART, ENLARGED), (HEART, OPACITY), (ARM, FRACTURE)}
ONTO = Ontology(
    all_objects=(LUNG, LOWER, HEART, ARM), all_attributes=tuple(CATEGORY), category_of=CATEGORY,
    object_ancestors={LUNG: frozenset(), LOWER: frozenset({LUNG}), HEART: frozenset(), ARM: frozenset()},
    attribute_ancestors={a: frozenset({OPACITY} if a == PNEUMONIA else {TUBE} if a == PIGTAIL else ())
                         for a in CATEGORY},
    all_pair_set=frozenset(ALL_PAIRS), removed_objects=(ARM,), removed_attributes=(PIGTAIL,))
# The pool: the 11 possible pairs less the 2 with pigtail and the 1 with the arm
POOL = sorted(ALL_PAIRS - {(LOWER, PIGTAIL), (LUNG, PIGTAIL), (ARM, FRACTURE)})
RAW_COLUMNS = {"image_id": pl.String, "study_id": pl.Int64, "row_id": pl.String, "sent_loc": pl.Float64,
               "bbox": pl.String, "relation": pl.Int64, "label_name": pl.String, "categoryID": pl.String}


def study(image: str) -> int:
    return 50000000 + int(image[1:])  # i1 -> 50000001


def raw(*rows) -> pl.DataFrame:
    """(image, sentence, bbox, label, relation[, category]) -> rows of an ingested relations table: image_id
    with '.dcm', row_id '{study}|{sentence}', the file's sent_loc equal to the sentence (None: an empty one)."""
    out = []
    for image, sentence, bbox, label, relation, *category in rows:
        out.append((f"{image}.dcm", study(image), f"{study(image)}|{'' if sentence is None else sentence}",
                    None if sentence is None else float(sentence), bbox, relation, label,
                    category[0] if category else CATEGORY.get(label, "disease")))
    return pl.DataFrame(out, schema=RAW_COLUMNS, orient="row")


def refine(frame: pl.DataFrame, images_sql: str | None = None):
    """Register the frame as ingest.relations, refine it into lab (+ lab_rejected); (affirmed set, result, con)."""
    con = duckdb.connect()
    con.execute("CREATE SCHEMA ingest")
    con.register("_frame", frame)
    con.execute("CREATE TABLE ingest.relations AS SELECT * FROM _frame")
    res = refine_labels(con, relations_sql("ingest.relations", images_sql), ONTO, "lab", rejected_table="lab_rejected")
    got = {tuple(r) for r in con.execute("SELECT image_id, object, attribute FROM lab").fetchall()}
    return got, res, con


def rejected(con) -> list[tuple]:
    """(image, bbox, label, category, reason) of lab_rejected, sorted."""
    return con.execute("SELECT image_id, bbox, label_name, categoryID, reason FROM lab_rejected "
                       "ORDER BY ALL").fetchall()


def test_the_hand_written_ontology_has_an_8_pair_pool():
    assert ONTO.n_pairs == len(POOL) == 8
    assert [(o, a) for o, a, _ in ONTO.pairs.iter_rows()] == POOL


# --- relations_sql ------------------------------------------------------------------------------------------


def test_relations_sql_strips_dcm_reads_the_sentence_from_row_id_and_restricts_to_the_cohort():
    con = duckdb.connect()
    frame = pl.DataFrame([
        ("i1.dcm", 50000001, "50000001|10", 3.0, LOWER, 1, PNEUMONIA, "disease"),  # row_id beats sent_loc
        ("i1.dcm", 50000001, "50000001|x", 4.0, LOWER, 0, OPACITY, "anatomicalfinding"),  # no number: sent_loc
        ("i1.dcm", 50000001, "50000001|", None, HEART, 1, ENLARGED, "anatomicalfinding"),  # neither: NULL
        ("i2.dcm", 50000002, "50000002|1", 1.0, HEART, 1, ENLARGED, "anatomicalfinding"),  # not in the cohort
    ], schema=RAW_COLUMNS, orient="row")
    con.register("rel", frame)
    cohort = relations_sql("rel", images_sql="SELECT 'i1'")
    assert con.execute(f"SELECT * FROM ({cohort}) ORDER BY sent_loc").fetchall() == [
        ("i1", 50000001, 4.0, LOWER, 0, OPACITY, "anatomicalfinding"),
        ("i1", 50000001, 10.0, LOWER, 1, PNEUMONIA, "disease"),
        ("i1", 50000001, None, HEART, 1, ENLARGED, "anatomicalfinding")]
    everyone = con.execute(f"SELECT DISTINCT image_id FROM ({relations_sql('rel')}) ORDER BY 1").fetchall()
    assert everyone == [("i1",), ("i2",)]  # no images_sql: every image


# --- step 2: the last sentence wins ------------------------------------------------------------------------


def test_last_sentence_wins_numerically_and_an_affirmation_wins_its_own_sentence():
    got, res, _ = refine(raw(
        ("i1", 9, LOWER, PNEUMONIA, 1), ("i1", 10, LOWER, PNEUMONIA, 0),  # sentence 10 is last, not "9" > "10"
        ("i1", 9, HEART, ENLARGED, 0), ("i1", 10, HEART, ENLARGED, 1),
        ("i1", 2, LOWER, TUBE, 0), ("i1", 2, LOWER, TUBE, 1),  # one sentence both ways: affirmed
        ("i1", None, HEART, OPACITY, 1), ("i1", 1, HEART, OPACITY, 0),  # no sentence ranks before sentence 1
    ))
    # enlarged at the heart, and the tube at the lower lung and (its ancestor) the lung
    assert got == {("i1", HEART, ENLARGED), ("i1", LOWER, TUBE), ("i1", LUNG, TUBE)}
    # all 4 keys are mentioned both ways; pneumonia and heart opacity end negated; the tube is the one tie
    assert {k: res.counts[k] for k in ("mentioned_keys", "affirmed_keys", "conflicting_keys",
                                       "conflicting_keys_negated_last", "same_sentence_ties")} == {
        "mentioned_keys": 4, "affirmed_keys": 2, "conflicting_keys": 4, "conflicting_keys_negated_last": 2,
        "same_sentence_ties": 1}


# --- step 3: propagation of affirmed pairs -------------------------------------------------------------------


def test_affirmed_pair_affirms_every_ancestor_object_and_attribute():
    got, res, _ = refine(raw(("i1", 1, LOWER, PNEUMONIA, 1)))
    # lower lung and lung x pneumonia and opacity
    assert got == {("i1", LOWER, PNEUMONIA), ("i1", LOWER, OPACITY), ("i1", LUNG, PNEUMONIA), ("i1", LUNG, OPACITY)}
    assert res.counts["propagated_keys"] == res.counts["affirmed_rows_out"] == 4


def test_a_later_negated_parent_does_not_undo_an_affirmed_child():
    # "lower lung pneumonia. ... no lung opacity.": the child still affirms its parent pair
    got, _, _ = refine(raw(("i1", 1, LOWER, PNEUMONIA, 1), ("i1", 2, LUNG, OPACITY, 0),
                           ("i2", 1, LOWER, PNEUMONIA, 0)))  # a negation alone: nothing, not even at the lung
    assert got == {("i1", LOWER, PNEUMONIA), ("i1", LOWER, OPACITY), ("i1", LUNG, PNEUMONIA), ("i1", LUNG, OPACITY)}


# --- step 4: removed labels ----------------------------------------------------------------------------------


def test_removed_labels_are_no_output_but_still_affirm_their_kept_parents():
    got, res, con = refine(raw(("i1", 1, LOWER, PIGTAIL, 1), ("i1", 1, ARM, FRACTURE, 1)))
    # pigtail (removed) at the lower lung affirms its parent tube at the lower lung and the lung; the arm
    # (removed, no parent) gives nothing
    assert got == {("i1", LOWER, TUBE), ("i1", LUNG, TUBE)}
    assert rejected(con) == []  # removed labels are not refused rows: they pass the row filters
    assert res.counts["removed_label_rows"] == 2
    # 4 propagated keys of pigtail (2 objects x pigtail, tube) + 1 of the arm; 2 come out
    assert (res.counts["propagated_keys"], res.counts["affirmed_rows_out"], res.counts["removed_label_keys"]) == \
        (5, 2, 3)


# --- step 1: the row filters and the rejected table ---------------------------------------------------------


def test_impossible_pair_implies_nothing_not_even_a_possible_parent_pair():
    # pneumonia is not possible at the heart, its parent opacity is: propagating first would affirm it
    got, res, con = refine(raw(("i1", 1, HEART, PNEUMONIA, 1), ("i1", 1, HEART, PIGTAIL, 1)))
    assert got == set()
    # a removed label at an impossible place is an impossible pair too, not a silent removal
    assert rejected(con) == [("i1", HEART, PIGTAIL, "tubesandlines", "impossible_pair"),
                             ("i1", HEART, PNEUMONIA, "disease", "impossible_pair")]
    assert res.counts["impossible_affirmed_keys"] == 2 and res.counts["removed_label_rows"] == 0


def test_each_refused_row_gets_the_first_rule_it_fails():
    got, res, con = refine(raw(
        ("i1", 1, LOWER, "abnormal", 1, "nlp"),
        ("i1", 1, "unknown", "normal", 1, "nlp"),  # nlp comes before unknown_bbox
        ("i1", 2, "unknown", PNEUMONIA, 1),
        ("i1", 2, "unknown", "goiter", 1),  # unknown_bbox comes before not_in_ontology
        ("i1", 3, "neck", PNEUMONIA, 1),  # no report object
        ("i1", 3, LOWER, "goiter", 1),  # no target attribute
        ("i1", 4, LOWER, "patchy", 1, "texture"),  # the cue categories out of the builders' scope have no
        ("i1", 4, LOWER, "improved", 1, "temporal"),  # target attribute: they are not_in_ontology
        ("i1", 4, "neck", PNEUMONIA, 0),  # a negated row is refused all the same
        ("i1", 5, HEART, PNEUMONIA, 1),  # both labels known, the pair ruled out
        ("i1", 6, HEART, ENLARGED, 1),  # the one row kept
    ))
    assert got == {("i1", HEART, ENLARGED)}
    assert rejected(con) == sorted([
        ("i1", LOWER, "abnormal", "nlp", "nlp"), ("i1", "unknown", "normal", "nlp", "nlp"),
        ("i1", "unknown", PNEUMONIA, "disease", "unknown_bbox"), ("i1", "unknown", "goiter", "disease", "unknown_bbox"),
        ("i1", "neck", PNEUMONIA, "disease", "not_in_ontology"), ("i1", LOWER, "goiter", "disease", "not_in_ontology"),
        ("i1", LOWER, "patchy", "texture", "not_in_ontology"), ("i1", LOWER, "improved", "temporal", "not_in_ontology"),
        ("i1", "neck", PNEUMONIA, "disease", "not_in_ontology"),
        ("i1", HEART, PNEUMONIA, "disease", "impossible_pair")])
    assert res.dropped_rows == {"nlp": 2, "unknown_bbox": 2, "not_in_ontology": 5, "impossible_pair": 1}
    assert list(res.dropped_rows) == list(DROP_REASONS)  # every reason, in rule order
    assert (res.counts["rows_in"], res.counts["rows_kept"]) == (11, 1)


def test_rejected_rows_keep_their_input_columns_and_sentence():
    _, _, con = refine(raw(("i1", 7, "unknown", PNEUMONIA, 0)))
    got = con.execute("SELECT * FROM lab_rejected").fetchall()
    # the relations_sql columns (no .dcm, sentence from row_id) and the reason; the helper flag is gone
    assert got == [("i1", 50000001, 7.0, "unknown", 0, PNEUMONIA, "disease", "unknown_bbox")]


# --- the image universe and the dense view ---------------------------------------------------------------------


def test_dense_view_is_every_image_times_the_pool_with_0_for_unaffirmed_pairs():
    frame = raw(("i1", 1, LOWER, PNEUMONIA, 1),
                ("i2", 1, LOWER, "abnormal", 1, "nlp"))  # i2's only row is refused: an image of all zeros
    frame = pl.concat([frame, raw(("i2", 2, HEART, ENLARGED, 0)).with_columns(study_id=pl.lit(50000000, pl.Int64))])
    _, res, con = refine(frame)
    # i2 has rows under two study ids (50000002 and 50000000): the smallest is its study
    assert con.execute("SELECT * FROM lab_images").fetchall() == [("i1", 50000001), ("i2", 50000000)]
    assert res.counts["images_with_several_study_ids"] == 1
    assert con.execute("SELECT * FROM lab_pairs").fetchall() == [(o, a, CATEGORY[a]) for o, a in POOL]
    dense = con.execute(f"SELECT * FROM ({dense_labels_sql('lab')}) ORDER BY image_id, object, attribute")
    affirmed = {(LOWER, PNEUMONIA), (LOWER, OPACITY), (LUNG, PNEUMONIA), (LUNG, OPACITY)}  # i1's family
    assert dense.fetchall() == [(i, s, o, a, CATEGORY[a], int(i == "i1" and (o, a) in affirmed))
                                for i, s in (("i1", 50000001), ("i2", 50000000)) for o, a in POOL]
    assert (res.counts["images"], res.counts["images_with_findings"], res.counts["dense_rows"]) == (2, 1, 16)


def test_an_image_outside_the_cohort_is_not_in_the_universe():
    _, res, con = refine(raw(("i1", 1, LOWER, PNEUMONIA, 1), ("i2", 1, HEART, ENLARGED, 1)), images_sql="SELECT 'i2'")
    assert con.execute("SELECT image_id, object, attribute FROM lab").fetchall() == [("i2", HEART, ENLARGED)]
    assert con.execute("SELECT image_id FROM lab_images").fetchall() == [("i2",)] and res.counts["rows_in"] == 1
