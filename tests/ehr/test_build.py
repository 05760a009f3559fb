"""Both databases built from a generated source: sizes, time shift, current patients, keys, rules."""

import datetime as dt
import json

import pytest

from ehrxqa_pipeline.ehr.checks import (check_ages, check_answer_sheet, check_current_patients, check_keys,
                                        check_time_bounds, run_answer_sheet_checks, run_checks)
from ehrxqa_pipeline.ehr.ddl import TABLES

from .conftest import CONFIG

WHICH = ("silver", "gold")


def q(con, sql):
    return con.execute(sql).fetchall()


def one(con, sql):
    return con.execute(sql).fetchone()[0]


@pytest.mark.parametrize("which", WHICH)
def test_sizes_and_all_checks(built, sheets, which):
    con, results = built
    r, sheet = results[which], sheets[which]
    assert r.patients == CONFIG.n_patients(which) and not r.messages
    assert r.current_patients == r.current_patients_target == CONFIG.n_current(r.patients) >= 1
    assert one(con, f"SELECT count(*) FROM {r.schema}.patients") == r.patients
    assert {t.name for t in TABLES} <= {x[0] for x in q(con, f"SELECT table_name FROM duckdb_tables() "
                                                           f"WHERE schema_name = '{r.schema}'")}
    assert one(con, f"SELECT count(*) FROM duckdb_tables() WHERE schema_name = '{r.schema}' "
                    f"AND table_name = 'tb_cxr_plus'") == 0  # the answer sheet lives apart
    for name, (passed, details) in {**run_checks(con, r, CONFIG), **run_answer_sheet_checks(con, sheet, CONFIG)}.items():
        assert passed, (name, details)
    meta = r.metadata()
    assert meta["rows_tb_cxr"] == r.rows["tb_cxr"] > 0 and "rows_tb_cxr_plus" not in meta
    assert all(isinstance(v, (int, float, str)) or v is None for v in meta.values())
    json.dumps(meta)
    assert sheet.metadata()["rows_tb_cxr_plus"] == sheet.rows == r.rows["tb_cxr"] * sheet.labels["pairs"] > 0


@pytest.mark.parametrize("which", WHICH)
def test_shift_is_one_whole_day_offset_per_patient(built, which):
    """Every time of a patient moves by the same whole number of days: all intervals are preserved."""
    con, results = built
    r = results[which]
    b = r.build_schema
    diffs = f"""
        SELECT subject_id, datediff('microsecond', src, dst) AS us FROM (
            SELECT a.subject_id, s.admittime AS src, a.admittime AS dst FROM {r.schema}.admissions a
                JOIN ingest.admissions s USING (hadm_id)
            UNION ALL SELECT a.subject_id, s.dischtime, a.dischtime FROM {r.schema}.admissions a
                JOIN ingest.admissions s USING (hadm_id) WHERE a.dischtime IS NOT NULL
            UNION ALL SELECT i.subject_id, s.intime, i.intime FROM {r.schema}.icustays i
                JOIN ingest.icustays s USING (stay_id)
            UNION ALL SELECT i.subject_id, s.outtime, i.outtime FROM {r.schema}.icustays i
                JOIN ingest.icustays s USING (stay_id) WHERE i.outtime IS NOT NULL
            UNION ALL SELECT t.subject_id, s.intime, t.intime FROM {r.schema}.transfers t
                JOIN ingest.transfers s USING (transfer_id)
            UNION ALL SELECT t.subject_id, date_trunc('second', s.study_datetime), t.studydatetime
                FROM {r.schema}.tb_cxr t JOIN {b}._images s USING (image_id)
            UNION ALL SELECT p.subject_id, o.dob_original, p.dob FROM {r.schema}.patients p
                JOIN {b}._offsets o USING (subject_id))"""
    rows = q(con, f"""SELECT d.subject_id, count(DISTINCT d.us), min(d.us), any_value(o.offset_days)
                      FROM ({diffs}) d JOIN {b}._offsets o USING (subject_id) GROUP BY 1""")
    assert len(rows) == r.patients
    day = 86_400_000_000
    for subject, n_distinct, us, offset_days in rows:
        assert n_distinct == 1 and us == offset_days * day, subject
    # event rows: each is a source row moved by its patient's offset
    for table, t in (("labevents", "charttime"), ("chartevents", "charttime"), ("inputevents", "starttime")):
        value = {"labevents": "valuenum", "chartevents": "valuenum", "inputevents": "amount"}[table]
        missing = one(con, f"""
            SELECT count(*) FROM (
                SELECT e.subject_id, e.itemid, e.{t} - to_days(CAST(o.offset_days AS INTEGER)), e.{value}
                FROM {r.schema}.{table} e JOIN {b}._offsets o USING (subject_id)
                EXCEPT ALL SELECT subject_id, itemid, {t}, {value} FROM ingest.{table})""")
        assert missing == 0, table


@pytest.mark.parametrize("which", WHICH)
def test_first_study_lands_in_its_target_year_and_current_instant_maps_to_now(built, sheets, which):
    con, results = built
    r, b = results[which], results[which].build_schema
    rows = q(con, f"""
        SELECT o.is_current, o.target_year, year(min(i.study_datetime + to_days(CAST(o.offset_days AS INTEGER)))),
               any_value(o.now_original + to_days(CAST(o.offset_days AS INTEGER)))
        FROM {b}._offsets o JOIN {b}._images i USING (subject_id) GROUP BY o.subject_id, o.is_current, o.target_year""")
    for is_current, target, first_year, now in rows:
        if is_current:
            assert now == CONFIG.current_time
        else:
            assert first_year == target and CONFIG.start_year <= target <= CONFIG.start_year + CONFIG.time_span
    # the current patients are exactly the drawn ones, each with one open admission
    open_ = {x[0] for x in q(con, f"SELECT subject_id FROM {r.schema}.admissions WHERE dischtime IS NULL")}
    drawn = {x[0] for x in q(con, f"SELECT subject_id FROM {b}._offsets WHERE is_current")}
    assert open_ == drawn and len(drawn) == r.current_patients_target
    # nothing after the current time, and the open admission is the patient's latest
    assert check_current_patients(con, r.schema, len(drawn))[0]
    assert check_time_bounds(con, r.schema, r.answers_schema, CONFIG)[0]


def test_checks_catch_broken_databases(built, sheets):
    con, results = built
    r = results["gold"]
    con.execute("CREATE OR REPLACE SCHEMA broken")
    for t in TABLES:
        con.execute(f"CREATE TABLE broken.{t.name} AS SELECT * FROM {r.schema}.{t.name}")
    con.execute("INSERT INTO broken.labevents SELECT row_id + 100000, subject_id, 1, itemid, charttime, valuenum, "
                "valueuom FROM broken.labevents LIMIT 1")
    con.execute("UPDATE broken.admissions SET dischtime = NULL, age = 95 WHERE row_id = 0")
    con.execute("UPDATE broken.tb_cxr SET studydatetime = TIMESTAMP '2106-01-01 00:00:00' WHERE row_id = 0")
    ok, details = check_keys(con, "broken")
    assert not ok and "labevents.hadm_id->admissions.hadm_id_orphans" in details["problems"]
    assert not check_time_bounds(con, "broken", None, CONFIG)[0]
    assert not check_ages(con, "broken", CONFIG)[0]
    assert not check_current_patients(con, "broken", r.current_patients_target)[0]
    con.execute("DELETE FROM broken.tb_cxr WHERE row_id = 1")
    assert not check_answer_sheet(con, "broken", r.answers_schema, "cxr_labels.gold_pairs")[0]
    con.execute("DROP SCHEMA broken CASCADE")


def test_the_answer_sheet_check_counts_what_both_except_alls_count(built, sheets):
    """Planted in a copy of the gold sheet: 2 rows gone, 1 row twice, 1 row with another study time, 1 relation
    2. The check's counts equal both EXCEPT ALLs of expected and actual rows, computed here."""
    con, results = built
    r = results["gold"]
    con.execute("CREATE OR REPLACE SCHEMA broken_sheet")
    con.execute(f"CREATE TABLE broken_sheet.tb_cxr_plus AS SELECT * FROM {r.answers_schema}.tb_cxr_plus")
    assert check_answer_sheet(con, r.schema, "broken_sheet", "cxr_labels.gold_pairs") == (True, {
        "expected_rows": sheets["gold"].rows, "rows": sheets["gold"].rows, "missing_rows": 0, "unexpected_rows": 0,
        "bad_relation_values": 0})
    con.execute("DELETE FROM broken_sheet.tb_cxr_plus WHERE row_id IN (3, 4)")
    con.execute("INSERT INTO broken_sheet.tb_cxr_plus SELECT * REPLACE (row_id + 10000000 AS row_id) "
                "FROM broken_sheet.tb_cxr_plus WHERE row_id = 5")
    con.execute("UPDATE broken_sheet.tb_cxr_plus SET studydatetime = studydatetime + INTERVAL 1 MINUTE "
                "WHERE row_id = 6")
    con.execute("UPDATE broken_sheet.tb_cxr_plus SET relation = 2 WHERE row_id = 7")
    ok, details = check_answer_sheet(con, r.schema, "broken_sheet", "cxr_labels.gold_pairs")
    columns = "image_id, study_id, subject_id, hadm_id, studydatetime, object, attribute"
    expected = (f"SELECT t.image_id, t.study_id, t.subject_id, t.hadm_id, t.studydatetime, lower(p.object), "
                f"lower(p.attribute) FROM {r.schema}.tb_cxr t CROSS JOIN cxr_labels.gold_pairs p")
    actual = f"SELECT {columns} FROM broken_sheet.tb_cxr_plus"
    missing = one(con, f"SELECT count(*) FROM ({expected} EXCEPT ALL {actual})")
    unexpected = one(con, f"SELECT count(*) FROM ({actual} EXCEPT ALL {expected})")
    assert (missing, unexpected) == (3, 2)
    assert not ok and details == {"expected_rows": sheets["gold"].rows, "rows": sheets["gold"].rows - 2 + 1,
                                  "missing_rows": missing, "unexpected_rows": unexpected, "bad_relation_values": 1}
    con.execute("DROP SCHEMA broken_sheet CASCADE")


@pytest.mark.parametrize("which", WHICH)
def test_ages_dob_and_cohort_rules(built, which):
    con, results = built
    r = results[which]
    assert check_ages(con, r.schema, CONFIG)[0]
    # dob: the birth year anchor_year - anchor_age on the source timeline, never overflowing into the next year
    assert one(con, f"""SELECT count(*) FROM {r.build_schema}._offsets o JOIN ingest.patients p USING (subject_id)
                        WHERE year(o.dob_original) <> p.anchor_year - p.anchor_age""") == 0
    # every admission of the database passes the age rule, and the dropped ones are recorded with the reason
    ages = q(con, f"""SELECT a.hadm_id, year(a.admittime) - p.anchor_year + p.anchor_age FROM ingest.admissions a
                      JOIN ingest.patients p USING (subject_id)
                      WHERE a.subject_id IN (SELECT subject_id FROM {r.schema}.patients)""")
    kept = {x[0] for x in q(con, f"SELECT hadm_id FROM {r.schema}.admissions")}
    out_of_range = {h for h, age in ages if not CONFIG.min_age <= age <= CONFIG.max_age}
    assert not out_of_range & kept
    assert r.rejected["admissions"].get("age_outside_range", 0) == len(out_of_range)
    assert r.candidates["los_max_days"] > 0


@pytest.mark.parametrize("which", WHICH)
def test_tables_follow_unit_dose_and_case_rules(built, which):
    con, results = built
    s = results[which].schema
    assert one(con, f"SELECT max(n) FROM (SELECT count(DISTINCT valueuom) n FROM {s}.labevents GROUP BY itemid)") == 1
    assert one(con, f"SELECT max(n) FROM (SELECT count(DISTINCT valueuom) n FROM {s}.chartevents GROUP BY itemid)") == 1
    assert {x[0] for x in q(con, f"SELECT DISTINCT itemid FROM {s}.chartevents")} <= set(CONFIG.chart_itemids)
    assert one(con, f"SELECT max(n) FROM (SELECT count(DISTINCT dose_unit_rx) n FROM {s}.prescriptions "
                    f"GROUP BY drug)") == 1
    assert one(con, f"SELECT count(*) FROM {s}.prescriptions WHERE TRY_CAST(dose_val_rx AS DOUBLE) IS NULL") == 0
    assert one(con, f"SELECT count(*) FROM {s}.d_items WHERE linksto NOT IN "
                    f"('chartevents', 'inputevents', 'outputevents')") == 0
    # every string cell lower-cased and stripped
    for table in TABLES:
        for col in (c.name for c in table.columns if c.type == "str"):
            assert one(con, f"SELECT count(*) FROM {s}.{table.name} WHERE {col} <> lower(trim({col}))") == 0
    # inputevents keeps only the ml rows of the source
    assert one(con, f"""SELECT count(*) FROM (SELECT stay_id, itemid, amount FROM {s}.inputevents
                        EXCEPT ALL SELECT stay_id, itemid, amount FROM ingest.inputevents
                        WHERE lower(amountuom) = 'ml')""") == 0
    rej = results[which].rejected
    assert rej["prescriptions"].get("non_numeric_dose", 0) > 0  # "5-10" ranges are planted
    assert sum(rej[t].get("minority_unit", 0) for t in ("labevents", "chartevents")) > 0


@pytest.mark.parametrize("which", WHICH)
def test_tb_cxr_link_holds_after_the_shift(built, which):
    """A linked study lies inside one of its admission's transfers (shifted with it)."""
    con, results = built
    r = results[which]
    s = r.schema
    linked = one(con, f"SELECT count(*) FROM {s}.tb_cxr WHERE hadm_id IS NOT NULL")
    inside = one(con, f"""SELECT count(DISTINCT c.image_id) FROM {s}.tb_cxr c JOIN {s}.transfers t USING (hadm_id)
                         WHERE c.studydatetime BETWEEN t.intime AND coalesce(t.outtime, TIMESTAMP
                               '{CONFIG.current_time:%Y-%m-%d %H:%M:%S}')""")
    assert linked == inside > 0
    link = r.link
    n_studies = one(con, f"SELECT count(*) FROM {r.build_schema}._links")
    assert (link["studies_matching_0_transfers"] + link["studies_matching_1_transfer"]
            + link["studies_matching_several_transfers"]) == n_studies


def test_answer_sheet_label_sources(built, sheets):
    con, results = built
    gold = results["gold"]
    b = gold.build_schema
    sets = dict(q(con, f"""SELECT i.studyorder = 1, list(DISTINCT l.label_set) FROM {gold.schema}.tb_cxr t
                           JOIN {b}._images i USING (image_id) JOIN {b}._label_images l USING (image_id) GROUP BY 1"""))
    assert sets[True] == ["gold"] and sets[False] == ["silver_refined"]
    # relation = 1 exactly for the affirmed labels of the label source
    labels = """SELECT image_id, 'silver' AS label_set FROM cxr_labels.silver UNION ALL
                SELECT image_id, 'gold' FROM cxr_labels.gold UNION ALL
                SELECT image_id, 'silver_refined' FROM cxr_labels.gold_later"""
    for r in results.values():
        pos = one(con, f"""SELECT count(*) FROM {r.build_schema}._label_images li JOIN ({labels}) l USING (image_id, label_set)
                           WHERE image_id IN (SELECT image_id FROM {r.schema}.tb_cxr)""")
        assert one(con, f"SELECT sum(relation) FROM {r.answers_schema}.tb_cxr_plus") == pos
        assert one(con, f"SELECT count(*) FROM {r.answers_schema}.tb_cxr_plus WHERE ct_ratio IS NULL") == 0


def test_a_failed_answer_sheet_build_leaves_the_sheet_as_it_was(warehouse_copy, monkeypatch):
    """The sheet is written in place in one transaction: a failure after its rows were written (planted here)
    rolls them back, and the sheet still holds the labels it was built from."""
    from ehrxqa_pipeline.ehr import build

    con = warehouse_copy()
    gold = build.build_database(con, "gold", CONFIG, seed=0)
    sheet = build.build_answer_sheet(con, "gold", CONFIG)
    table = f"{sheet.schema}.tb_cxr_plus"
    before = q(con, f"SELECT * FROM {table} ORDER BY row_id")
    image, obj, attr = q(con, f"""SELECT image_id, object, attribute FROM cxr_labels.gold
                                  WHERE image_id IN (SELECT image_id FROM {gold.schema}.tb_cxr)
                                  ORDER BY ALL LIMIT 1""")[0]
    con.execute("DELETE FROM cxr_labels.gold WHERE image_id = ? AND object = ? AND attribute = ?", [image, obj, attr])
    real = build.materialize

    def fails_after_writing(*args, **kwargs):
        real(*args, **kwargs)
        raise OSError("planted: disk full")

    monkeypatch.setattr(build, "materialize", fails_after_writing)
    with pytest.raises(OSError, match="planted"):
        build.build_answer_sheet(con, "gold", CONFIG)
    assert q(con, f"SELECT * FROM {table} ORDER BY row_id") == before
    monkeypatch.setattr(build, "materialize", real)
    assert build.build_answer_sheet(con, "gold", CONFIG).rows == sheet.rows
    after = q(con, f"SELECT * FROM {table} ORDER BY row_id")
    assert len(after) == len(before)
    assert q(con, f"""SELECT image_id, object, attribute, relation FROM {table}
                      WHERE row_id IN ({', '.join(str(a[0]) for a, b in zip(before, after) if a != b) or 'NULL'})"""
             ) == [(image, obj, attr, 0)]  # the one label taken out, and nothing else
    assert one(con, f"SELECT count(*) FROM duckdb_schemas() WHERE schema_name = '{sheet.schema}_next'") == 0


def test_cost_prices_events(built):
    con, results = built
    for r in results.values():
        s = r.schema
        events = one(con, f"""SELECT (SELECT count(*) FROM {s}.diagnoses_icd) + (SELECT count(*) FROM {s}.labevents)
                                    + (SELECT count(*) FROM {s}.procedures_icd)
                                    + (SELECT count(*) FROM {s}.prescriptions)""")
        assert r.rows["cost"] == events
        # one price per code, and each charge at its event's time
        assert one(con, f"""SELECT count(*) FROM {s}.cost c JOIN {s}.labevents l ON c.event_id = l.row_id
                            WHERE c.event_type = 'labevents' AND c.chargetime <> l.charttime""") == 0
        assert one(con, f"""SELECT max(n) FROM (SELECT count(DISTINCT c.cost) n FROM {s}.cost c
                            JOIN {s}.prescriptions p ON c.event_id = p.row_id AND c.event_type = 'prescriptions'
                            GROUP BY p.drug)""") == 1
        assert one(con, f"SELECT min(cost) FROM {s}.cost") > 0


def test_patient_count_is_clamped_with_a_message(ehr_inputs, warehouse_copy):
    from ehrxqa_pipeline.ehr.build import build_database
    from ehrxqa_pipeline.ehr.config import DbConfig

    con = warehouse_copy()
    config = DbConfig(silver_patients=10_000, gold_patients=10_000, current_ratio=0.25)
    r = build_database(con, "gold", config, seed=0)
    assert r.patients == r.candidates["eligible"] < 10_000
    assert r.messages and "10000 patients requested" in r.messages[0]
    assert r.current_patients == r.current_patients_drawn == min(config.n_current(r.patients),
                                                                 r.candidates["current_eligible"])
    assert r.current_patients_target == config.n_current(r.patients)
    assert dt.datetime(2105, 12, 31, 23, 59) == config.current_time


@pytest.mark.parametrize("which", ["silver", "gold"])
def test_the_answer_sheet_reads_of_the_warehouse_what_answer_sheet_reads_names(warehouse_copy, which):
    """``build.answer_sheet_reads``, what the answer sheet's memo is keyed by (assets/ehr_db.py, with the silver
    boxes' data version): with every other table of the database's, its workspace's, the labels' and the splits'
    schemas dropped, the sheet builds the same rows; and an EHR table of the database is not among them."""
    from ehrxqa_pipeline.ehr import build
    from ehrxqa_pipeline.ehr.config import schemas

    con = warehouse_copy()
    build.build_database(con, which, CONFIG, seed=0)
    sheet = build.build_answer_sheet(con, which, CONFIG)
    rows = q(con, f"SELECT * FROM {sheet.schema}.tb_cxr_plus ORDER BY row_id")
    reads = build.answer_sheet_reads(which)
    schema, _, workspace = schemas(which)
    assert f"{schema}.labevents" not in reads and f"{schema}.admissions" not in reads
    dropped = 0
    for part in (schema, workspace, "cxr_labels", "splits"):
        for (table,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE schema_name = ?", [part]).fetchall():
            if f"{part}.{table}" not in reads:
                con.execute(f"DROP TABLE {part}.{table}")
                dropped += 1
    assert dropped > 20
    assert build.build_answer_sheet(con, which, CONFIG).rows == sheet.rows
    assert q(con, f"SELECT * FROM {sheet.schema}.tb_cxr_plus ORDER BY row_id") == rows
