"""Image selection (cxr/selection.py) on hand-made rows: each rule of the silver and gold funnels, its edge
cases and its reason, on the fewest metadata / box / gold rows that isolate it, in an in-memory DuckDB.

Every expected reason, StudyOrder and funnel count is derived by hand in the test. Images are named after
what they are for; every image gets the 36 boxes of ``WIDTHS`` unless a test says otherwise, so a box rule
only fires where a test plants it. The width-outlier tests lean on one fact: among n widths of which n - 1
are equal and one differs, the odd one lies (n - 1) / sqrt(n) sample sds from the mean, whatever the
difference: 2.85 for n = 10 (kept), 3.02 for n = 11 (an outlier under the 3-sd rule).
"""

from __future__ import annotations

from datetime import datetime

import duckdb
import polars as pl
import pytest

from ehrxqa_pipeline.cxr import selection

P1, P2, P3 = 10000001, 10000002, 10000003  # subject ids
BOXES = [f"box{k:02d}" for k in range(37)]  # 36 detector boxes and one extra for the too-many case
WIDTHS = {name: 10.0 + k for k, name in enumerate(BOXES[:36])}  # each box its own usual width


def img(dicom: str, subject: int, study: int, view: str | None = "PA", day: int = 1, time: float = 100000.0):
    """A metadata row; StudyDate = 2150-01-<day>, StudyTime HHMMSS(.ffffff). A dicom_id has no '_' (box
    object ids are ``{dicom_id}_{bbox_name}``)."""
    return dicom, subject, study, view, 21500100 + day, time


def load(con, images, boxes: dict | None = None, gold=()) -> None:
    """Create ingest.cxr_metadata, ingest.silver_bbox and ingest.gold_relations with the columns the SQL reads.

    ``boxes``: dicom_id -> int (the image has the first n boxes of BOXES at their usual width; 0 = absent from
    the box file) or dict (box -> width replacing the usual one, None: no such box). ``gold``: (subject, study,
    dicom_id) rows.
    """
    boxes = boxes or {}
    con.execute("CREATE SCHEMA IF NOT EXISTS ingest")
    meta = pl.DataFrame([(*r, 3000, 2500) for r in images], orient="row", schema={
        "dicom_id": pl.String, "subject_id": pl.Int64, "study_id": pl.Int64, "ViewPosition": pl.String,
        "StudyDate": pl.Int64, "StudyTime": pl.Float64, "Rows": pl.Int64, "Columns": pl.Int64})
    box_rows = []
    for dicom, *_ in images:
        spec = boxes.get(dicom, {})
        widths = {b: WIDTHS.get(b, 10.0) for b in BOXES[:spec]} if isinstance(spec, int) else {**WIDTHS, **spec}
        box_rows += [(f"{dicom}_{name}", name, float(w)) for name, w in widths.items() if w is not None]
    bbox = pl.DataFrame(box_rows, orient="row", schema={"object_id": pl.String, "bbox_name": pl.String,
                                                        "width": pl.Float64})
    rel = pl.DataFrame([(s, st, f"{d}.dcm") for s, st, d in gold], orient="row",
                       schema={"patient_id": pl.Int64, "study_id": pl.Int64, "image_id": pl.String})
    for name, frame in (("cxr_metadata", meta), ("silver_bbox", bbox), ("gold_relations", rel)):
        con.register("_frame", frame)
        con.execute(f"CREATE OR REPLACE TABLE ingest.{name} AS SELECT * FROM _frame")
        con.unregister("_frame")


def select(images, boxes=None, gold=(), integrity=None):
    """Load the rows, run the three library steps; integrity (dicom_id -> status) turns the JPEG check on."""
    con = duckdb.connect()
    load(con, images, boxes, gold)
    selection.build_gold_studies(con)
    selection.build_image_rules(con)
    if integrity is not None:
        con.execute("CREATE TABLE cxr_cohort.image_integrity (dicom_id VARCHAR, status VARCHAR)")
        con.executemany("INSERT INTO cxr_cohort.image_integrity VALUES (?, ?)", list(integrity.items()))
    out = selection.build_cohorts(con, check_jpegs=integrity is not None)
    return con, out


def reasons(con, cohort: str) -> dict[str, str | None]:
    """image -> drop reason in the cohort's rejected table, None for a kept image (each image once)."""
    rows = con.execute(f"SELECT image_id, NULL FROM cxr_cohort.{cohort} UNION ALL "
                       f"SELECT image_id, reason FROM cxr_cohort.{cohort}_rejected").fetchall()
    assert len({r[0] for r in rows}) == len(rows), "an image both kept and refused, or refused twice"
    return dict(rows)


def kept(con, cohort: str) -> list[tuple[str, int]]:
    """(image, StudyOrder) of the cohort, in its stored order."""
    return con.execute(f"SELECT image_id, study_order FROM cxr_cohort.{cohort}").fetchall()


def rule_column(con, column: str) -> dict:
    return dict(con.execute(f"SELECT dicom_id, {column} FROM cxr_cohort.image_rules").fetchall())


# --- gold_studies ---------------------------------------------------------------------------------------


def test_gold_studies_are_the_distinct_patient_study_image_rows_without_dcm():
    con = duckdb.connect()
    # three label rows of one image (three sentences), one of another image, listed out of order
    load(con, [], gold=[(P2, 50000009, "g2"), (P1, 50000001, "g1"), (P1, 50000001, "g1"), (P1, 50000001, "g1")])
    selection.build_gold_studies(con)
    got = con.execute("SELECT * FROM cxr_cohort.gold_studies").fetchall()
    assert got == [(P1, 50000001, "g1"), (P2, 50000009, "g2")]  # one row per image, '.dcm' gone, sorted


def test_cohort_and_rejected_rows_carry_the_image_facts():
    con, _ = select([img("pa", P1, 50000001, "PA", day=2, time=93015.25), img("ll", P1, 50000001, "LL", day=2)])
    # StudyDate 21500102 + StudyTime 093015.25 -> 2150-01-02 09:30:15.25; Rows x Columns as in the metadata
    assert con.execute("SELECT * FROM cxr_cohort.silver").fetchall() == [
        (P1, 50000001, "pa", "PA", datetime(2150, 1, 2, 9, 30, 15, 250000), 1, 3000, 2500)]
    assert con.execute("SELECT * FROM cxr_cohort.silver_rejected").fetchall() == [
        ("ll", P1, 50000001, "LL", None, "frontal_view")]  # a lateral has no StudyOrder


# --- rule 1: frontal_view --------------------------------------------------------------------------------


def test_frontal_view_is_ap_or_pa_and_a_missing_view_is_not_frontal():
    views = {"ap": "AP", "pa": "PA", "ll": "LL", "lateral": "LATERAL", "none": None}
    con, _ = select([img(d, P1, 50000001 + k, v, day=1 + k) for k, (d, v) in enumerate(views.items())])
    # AP and PA pass; LL, LATERAL and a NULL ViewPosition are not frontal (coalesce to FALSE, not NULL)
    assert reasons(con, "silver") == {"ap": None, "pa": None, "ll": "frontal_view", "lateral": "frontal_view",
                                      "none": "frontal_view"}
    assert rule_column(con, "frontal_view")["none"] is False


# --- rule 2: one_image_per_study ----------------------------------------------------------------------------


def test_one_image_per_study_is_the_earliest_frontal_image():
    con, _ = select([
        img("a-late", P1, 50000001, "AP", time=110000.0),
        img("b-early", P1, 50000001, "PA", time=100000.0),  # earlier despite the larger dicom_id
        img("0-lat", P1, 50000001, "LL", time=90000.0),  # earliest of all, but laterals are not candidates
    ])
    assert reasons(con, "silver") == {"b-early": None, "a-late": "one_image_per_study", "0-lat": "frontal_view"}


def test_one_image_per_study_datetime_is_date_then_time_to_the_microsecond():
    con, _ = select([
        img("a-day2-0100", P1, 50000001, day=2, time=10000.0),
        img("b-day1-2300", P1, 50000001, day=1, time=230000.0),  # the earlier day wins over the earlier time
        img("a-frac-late", P1, 50000002, time=100000.5),
        img("b-frac-early", P1, 50000002, time=100000.25),  # 10:00:00.25 before 10:00:00.5
    ])
    assert reasons(con, "silver") == {"b-day1-2300": None, "a-day2-0100": "one_image_per_study",
                                      "b-frac-early": None, "a-frac-late": "one_image_per_study"}


def test_one_image_per_study_tie_on_datetime_goes_to_the_smallest_dicom_id():
    con, _ = select([img("d", P1, 50000001), img("c", P1, 50000001, "AP"), img("e", P1, 50000001)])
    assert reasons(con, "silver") == {"c": None, "d": "one_image_per_study", "e": "one_image_per_study"}


# --- rule 3: StudyOrder and max_20_studies ----------------------------------------------------------------


def test_study_order_ranks_by_datetime_then_study_id_and_skips_lateral_only_studies():
    con, _ = select([
        img("lat-only", P1, 50000003, "LL", day=1),  # first study, lateral only: no StudyOrder
        img("s2", P1, 50000002, day=2),
        img("s1", P1, 50000001, day=3),  # smallest study_id but later: order by datetime first
        img("s5", P1, 50000005, day=4),
        img("s4", P1, 50000004, day=4),  # same datetime as s5: the smaller study_id ranks first
        img("other", P2, 50000009, day=9),  # another patient starts at 1
    ])
    assert kept(con, "silver") == [("s2", 1), ("s1", 2), ("s4", 3), ("s5", 4), ("other", 1)]
    assert rule_column(con, "study_order")["lat-only"] is None


def test_max_20_studies_drops_the_21st_frontal_study_only():
    # 21 frontal studies on days 2..22, plus a lateral-only study on day 1 that takes no rank
    rows = [img("lat", P1, 50000100, "LL", day=1)] + [img(f"s{k:02d}", P1, 50000000 + k, day=1 + k)
                                                     for k in range(1, 22)]
    con, out = select(rows)
    got = reasons(con, "silver")
    assert got.pop("lat") == "frontal_view" and got.pop("s21") == "max_20_studies"
    assert got == {f"s{k:02d}": None for k in range(1, 21)}  # ranks 1..20 kept
    assert rule_column(con, "study_order")["s21"] == 21
    assert out["silver_reasons"]["max_20_studies"] == 1


# --- rule 4: has_36_boxes -----------------------------------------------------------------------------


def test_has_36_boxes_means_exactly_36_and_an_image_absent_from_the_box_file_fails():
    con, _ = select([img(d, P1, 50000001 + k, day=1 + k) for k, d in enumerate(["b36", "b35", "b00", "b37"])],
                    boxes={"b35": 35, "b00": 0, "b37": 37})
    assert rule_column(con, "n_boxes") == {"b36": 36, "b35": 35, "b00": 0, "b37": 37}  # absent: 0, not NULL
    assert reasons(con, "silver") == {"b36": None, "b35": "has_36_boxes", "b00": "has_36_boxes",
                                      "b37": "has_36_boxes"}


def test_a_zero_width_box_is_one_of_the_36_and_meets_the_width_rule():
    # 11 images; one has box00 of width 0 instead of 10: the odd one of 11, z = 10 / sqrt(11) = 3.02 > 3
    con, _ = select([img(f"i{k:02d}", P1, 50000001 + k, day=1 + k) for k in range(11)],
                    boxes={"i05": {"box00": 0.0}})
    row = con.execute("SELECT n_boxes, has_36_boxes, silver_reason FROM cxr_cohort.image_rules "
                      "WHERE dicom_id = 'i05'").fetchone()
    assert row == (36, True, "box_width_within_3sd")
    assert sum(r is None for r in reasons(con, "silver").values()) == 10


# --- rule 5: box_width_within_3sd ----------------------------------------------------------------------


@pytest.mark.parametrize("n, odd_one_out", [(10, False), (11, True)])
def test_width_outlier_is_beyond_3_sample_sd_of_its_box(n, odd_one_out):
    # box07 is usually 17 wide; one image has 27: z = (n - 1) / sqrt(n) = 2.85 for 10 images, 3.02 for 11.
    # Pooled over all boxes (widths 10..45) a 27 would be ordinary: the statistics are per box.
    con, _ = select([img(f"i{k:02d}", P1, 50000001 + k, day=1 + k) for k in range(n)], boxes={"i03": {"box07": 27}})
    assert reasons(con, "silver")["i03"] == ("box_width_within_3sd" if odd_one_out else None)
    assert [r for d, r in reasons(con, "silver").items() if d != "i03"] == [None] * (n - 1)
    stats = con.execute("SELECT mean_width, n FROM cxr_cohort.box_width_stats WHERE bbox_name = 'box07'").fetchone()
    assert stats == (pytest.approx(17 + 10 / n), n)  # n - 1 widths of 17 and one of 27


@pytest.mark.parametrize("decoy", ["lateral", "second_image_of_a_study", "21st_study", "35_boxes"])
def test_width_statistics_are_over_the_images_that_passed_rules_1_to_4(decoy):
    # 20 passing studies; box00 is 10 wide but 20 in s07: z = 19 / sqrt(20) = 4.25, an outlier. A decoy that
    # fails rule 1, 2, 3 or 4 has box00 = 1000: counted in, it would make the sd about 216 (3 sd = 648) and
    # s07's 20 (37.6 from the mean 57.6) would pass.
    rows = [img(f"s{k:02d}", P1, 50000000 + k, day=k) for k in range(1, 21)]
    rows.append({"lateral": img("decoy", P1, 50000001, "LL", day=1),
                 "second_image_of_a_study": img("decoy", P1, 50000001, day=1, time=110000.0),
                 "21st_study": img("decoy", P1, 50000021, day=21),
                 "35_boxes": img("decoy", P2, 50000099, day=1)}[decoy])
    decoy_boxes = {"box00": 1000.0, **({"box35": None} if decoy == "35_boxes" else {})}
    con, _ = select(rows, {"s07": {"box00": 20.0}, "decoy": decoy_boxes})
    got = reasons(con, "silver")
    expected_decoy = {"lateral": "frontal_view", "second_image_of_a_study": "one_image_per_study",
                      "21st_study": "max_20_studies", "35_boxes": "has_36_boxes"}[decoy]
    assert got.pop("decoy") == expected_decoy
    assert got.pop("s07") == "box_width_within_3sd"
    assert set(got.values()) == {None} and len(got) == 19
    assert con.execute("SELECT n FROM cxr_cohort.box_width_stats WHERE bbox_name = 'box00'").fetchone() == (20,)


def test_width_statistics_are_the_same_bits_on_any_thread_count():
    """About 14,000 images of 36 boxes, half a million widths in several of DuckDB's row groups: the statistics
    are bitwise those of one thread, run after run on four (where plain avg / stddev_samp differ in the sd's
    last bits from run to run: the threads' partial states are combined in the order they finish)."""
    con = duckdb.connect()
    con.execute("CREATE SCHEMA ingest")
    con.execute("""CREATE TABLE ingest.cxr_metadata AS SELECT 'd' || i AS dicom_id, 10000000 + i AS subject_id,
                   50000000 + i AS study_id, 'PA' AS ViewPosition, 21500101 AS StudyDate, 100000.0 AS StudyTime,
                   3000 AS Rows, 2500 AS Columns FROM range(14000) t(i)""")
    con.execute(f"""CREATE TABLE ingest.silver_bbox AS SELECT 'd' || i || '_' || b.name AS object_id,
                    b.name AS bbox_name, (10 + k + hash(i, k) % 7)::DOUBLE / 3 AS width
                    FROM range(14000) t(i), (SELECT unnest({BOXES[:36]}) AS name, generate_subscripts({BOXES[:36]}, 1)
                    AS k) b""")
    con.execute("CREATE TABLE ingest.gold_relations (patient_id BIGINT, study_id BIGINT, image_id VARCHAR)")
    selection.build_gold_studies(con)

    def stats(threads: int) -> list[tuple]:
        con.execute(f"SET threads = {threads}")
        selection.build_image_rules(con)
        return con.execute("SELECT * FROM cxr_cohort.box_width_stats ORDER BY bbox_name").fetchall()

    one = stats(1)
    assert len(one) == 36 and all(n == 14000 for *_, n in one)
    assert all(stats(4) == one for _ in range(4))


def test_a_single_passing_image_is_no_outlier_of_itself():
    # one image per box: the sample sd is undefined (NULL), so no width can be beyond it
    con, _ = select([img("only", P1, 50000001)], boxes={"only": {"box00": 500.0}})
    assert reasons(con, "silver") == {"only": None}
    sd = con.execute("SELECT sd_width FROM cxr_cohort.box_width_stats WHERE bbox_name = 'box00'").fetchone()
    assert sd == (None,)


# --- the whole silver and gold funnels ---------------------------------------------------------------------


def test_funnels_count_one_image_lost_per_rule():
    # P1: a kept image, a second image of its study, a lateral, a 35-box image. P2: 21 studies, the 21st
    # beyond StudyOrder 20 and s05 with box00 = 20 (the others 10; over the 22 images passing rules 1-4:
    # z = 21 / sqrt(22) = 4.48). P3: a gold patient.
    rows = [img("keep", P1, 50000001), img("dup", P1, 50000001, time=110000.0), img("lat", P1, 50000002, "LL", 2),
            img("few", P1, 50000003, day=3), img("gold", P3, 50000201)]
    rows += [img(f"s{k:02d}", P2, 50000100 + k, day=k) for k in range(1, 22)]
    con, out = select(rows, boxes={"few": 35, "s05": {"box00": 20.0}}, gold=[(P3, 50000201, "gold")])
    got = reasons(con, "silver")
    assert {d: r for d, r in got.items() if r} == {
        "lat": "frontal_view", "dup": "one_image_per_study", "s21": "max_20_studies", "few": "has_36_boxes",
        "s05": "box_width_within_3sd", "gold": "not_gold_patient"}
    silver = [("all_images", 26), ("frontal_view", 25), ("one_image_per_study", 24), ("max_20_studies", 23),
              ("has_36_boxes", 22), ("box_width_within_3sd", 21), ("not_gold_patient", 20)]  # one each
    # gold: of the 26 images only P3's one is a gold patient's, and it is its StudyOrder-1 pick
    gold = [("all_images", 26), ("not_gold_patient", 1), ("frontal_view", 1), ("one_image_per_study", 1),
            ("max_20_studies", 1), ("first_study_rule", 1), ("sound_jpeg", 1)]
    assert out["funnels"] == {"silver": silver, "gold": gold}
    assert out["silver_reasons"] == {r: 1 for r in ("box_width_within_3sd", "frontal_view", "has_36_boxes",
                                                    "max_20_studies", "not_gold_patient", "one_image_per_study")}
    table = con.execute("SELECT cohort, step, rule, images FROM cxr_cohort.funnel "
                        "ORDER BY cohort DESC, step").fetchall()
    assert table == [("silver", i, r, n) for i, (r, n) in enumerate(silver)] + \
        [("gold", i, r, n) for i, (r, n) in enumerate(gold)]
    assert kept(con, "gold") == [("gold", 1)]


# --- the gold cohort and its first-study rule ---------------------------------------------------------------

# P1 (gold patient in every test below): study 1 with its automatic pick, a later frontal image and a
# lateral; study 2 with a frontal image and a lateral. P2 is no gold patient.
GOLD_BASE = [
    img("g1-pick", P1, 50000001, "PA", day=1, time=100000.0),
    img("g1-second", P1, 50000001, "AP", day=1, time=110000.0),
    img("g1-lat", P1, 50000001, "LL", day=1, time=90000.0),
    img("g2", P1, 50000002, "PA", day=2),
    img("g2-lat", P1, 50000002, "LL", day=2),
    img("other", P2, 50000009, day=1),
]


def test_gold_image_replaces_the_studyorder_1_pick():
    con, out = select(GOLD_BASE, gold=[(P1, 50000001, "g1-second")])
    assert kept(con, "gold") == [("g1-second", 1), ("g2", 2)]  # the gold image takes StudyOrder 1
    # the automatic pick makes way; P2's image is neither kept nor refused in the gold cohort
    assert reasons(con, "gold") == {"g1-second": None, "g2": None, "g1-pick": "replaced_by_gold_image",
                                    "g1-lat": "frontal_view", "g2-lat": "frontal_view"}
    assert out["gold_checks"] == {"gold_patients": 1, "gold_images_replacing_auto_pick": 1,
                                  "gold_patients_failing_first_study_rule": 0}
    # silver: the gold patient's images leave by their first failing rule, the pick and g2 by the last one
    assert reasons(con, "silver") == {"g1-pick": "not_gold_patient", "g1-second": "one_image_per_study",
                                      "g1-lat": "frontal_view", "g2": "not_gold_patient", "g2-lat": "frontal_view",
                                      "other": None}
    # 6 images, 5 of P1, 3 frontal, 2 picks, then the swap keeps 2
    assert out["funnels"]["gold"] == [("all_images", 6), ("not_gold_patient", 5), ("frontal_view", 3),
                                      ("one_image_per_study", 2), ("max_20_studies", 2), ("first_study_rule", 2),
                                      ("sound_jpeg", 2)]


def test_gold_image_that_is_the_pick_replaces_nothing():
    con, out = select(GOLD_BASE, gold=[(P1, 50000001, "g1-pick")])
    assert kept(con, "gold") == [("g1-pick", 1), ("g2", 2)]
    assert "replaced_by_gold_image" not in reasons(con, "gold").values()
    assert out["gold_checks"]["gold_images_replacing_auto_pick"] == 0


@pytest.mark.parametrize("gold, problem", [
    ([(P1, 50000001, "g1-pick"), (P1, 50000001, "g1-second")], "several_gold_images"),  # even with the pick
    ([(P1, 50000001, "g1-pick"), (P1, 50000001, "nowhere")], "several_gold_images"),  # checked first
    ([(P1, 50000001, "nowhere")], "gold_image_not_in_metadata"),
    ([(P1, 50000001, "g1-lat")], "gold_image_not_frontal"),
    ([(P1, 50000002, "g2-lat")], "gold_image_not_frontal"),  # not frontal and not study 1: the first check names it
    ([(P1, 50000002, "g2")], "gold_image_not_first_study"),
    ([(P1, 50000009, "other")], "gold_image_not_first_study"),  # the metadata puts it in P2's study
])
def test_gold_patient_failing_a_check_loses_the_studyorder_1_row(gold, problem):
    con, out = select(GOLD_BASE, gold=gold)
    got = reasons(con, "gold")
    assert got["g1-pick"] == problem  # the StudyOrder-1 row carries the failed check
    assert kept(con, "gold") == [("g2", 2)]  # the later study stays, with its own StudyOrder
    assert out["gold_checks"] == {"gold_patients": 1, "gold_images_replacing_auto_pick": 0,
                                  "gold_patients_failing_first_study_rule": 1}
    assert out["funnels"]["gold"][-2:] == [("first_study_rule", 1), ("sound_jpeg", 1)]  # 2 picks, 1 left
    assert "other" not in got  # P2 is outside the gold population even when P1's gold row names its image


def test_studyorder_1_of_a_gold_patient_skips_a_lateral_only_first_study():
    # the published rank would count the lateral-only study and refuse the gold image of the second study
    con, out = select([img("lat-first", P1, 50000001, "LL", day=1), img("f2", P1, 50000002, day=2)],
                      gold=[(P1, 50000002, "f2")])
    assert kept(con, "gold") == [("f2", 1)]
    assert out["gold_checks"]["gold_patients_failing_first_study_rule"] == 0


# --- JPEG integrity (check_jpegs=True) ----------------------------------------------------------------------


def test_silver_needs_a_sound_jpeg_and_a_rule_reason_comes_first():
    statuses = {"ok": "ok", "broken": "undecodable_jpeg", "small": "size_mismatch", "gone": "missing_jpeg",
                "lat-broken": "undecodable_jpeg"}
    rows = [img(d, P1, 50000001 + k, day=1 + k) for k, d in enumerate(["ok", "broken", "small", "gone", "unlisted"])]
    rows.append(img("lat-broken", P1, 50000009, "LL", day=9))
    con, out = select(rows, integrity=statuses)
    # the status is the reason; no integrity row is a missing JPEG; a lateral is refused as a lateral
    assert reasons(con, "silver") == {"ok": None, "broken": "undecodable_jpeg", "small": "size_mismatch",
                                      "gone": "missing_jpeg", "unlisted": "missing_jpeg", "lat-broken": "frontal_view"}
    assert out["funnels"]["silver"][-2:] == [("not_gold_patient", 5), ("sound_jpeg", 1)]


def test_check_jpegs_off_reads_no_integrity_table():
    con, out = select([img("ok", P1, 50000001)])  # no cxr_cohort.image_integrity exists
    assert reasons(con, "silver") == {"ok": None}
    assert [r for r, _ in out["funnels"]["silver"]][-1] == "not_gold_patient"  # no sound_jpeg step


def test_gold_image_with_an_unsound_jpeg_is_refused_and_the_pick_stays_replaced():
    statuses = {"g1-pick": "ok", "g1-second": "undecodable_jpeg", "g2": "ok"}
    con, out = select(GOLD_BASE, gold=[(P1, 50000001, "g1-second")], integrity=statuses)
    assert reasons(con, "gold") == {"g1-second": "undecodable_jpeg", "g1-pick": "replaced_by_gold_image",
                                    "g2": None, "g1-lat": "frontal_view", "g2-lat": "frontal_view"}
    assert kept(con, "gold") == [("g2", 2)]
    # the first-study rule keeps 2 (the gold image, g2); the JPEG check leaves 1
    assert out["funnels"]["gold"][-2:] == [("first_study_rule", 2), ("sound_jpeg", 1)]
    assert reasons(con, "silver")["other"] == "missing_jpeg"  # P2's image has no integrity row
