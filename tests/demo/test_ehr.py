"""The synthetic MIMIC-IV tables: layout, keys, integrity, time windows, realism and planted counts.

Runs make_ehr on a small cohort built here (the cohort module's schema, its edge cases included: equal
study times, a patient with more than 20 studies, anchor_age 91, deaths). Planted counts are re-derived
with DuckDB SQL, independently of the generator's polars code.
"""

from __future__ import annotations

import json

import duckdb
import numpy as np
import polars as pl
import pytest

from ehrxqa_pipeline.demo.ehr import make_ehr
from ehrxqa_pipeline.demo.scale import SCALES
from ehrxqa_pipeline.sources.schema import TABLES

N_CXR, N_EHR = 120, 30
GROUPS = ["2008 - 2010", "2011 - 2013", "2014 - 2016", "2017 - 2019", "2020 - 2022"]
DTYPES = {"int": pl.Int64, "float": pl.Float64, "str": pl.String, "datetime": pl.Datetime("us"), "date": pl.Date}
ICU_UNITS = {"Medical Intensive Care Unit (MICU)", "Surgical Intensive Care Unit (SICU)",
             "Cardiac Vascular Intensive Care Unit (CVICU)", "Medical/Surgical Intensive Care Unit (MICU/SICU)",
             "Coronary Care Unit (CCU)", "Trauma SICU (TSICU)", "Neuro Surgical Intensive Care Unit (Neuro SICU)"}


def make_cohort(seed: int = 3, n_cxr: int = N_CXR, n_ehr: int = N_EHR) -> tuple[pl.DataFrame, pl.DataFrame]:
    """patients / studies with the cohort module's schema and guarantees."""
    rng = np.random.default_rng(seed)
    n = n_cxr + n_ehr
    subject = rng.choice(10_000_000, n, replace=False) + 10_000_000
    anchor = rng.integers(2110, 2201, n)
    age = np.where(np.arange(n) % 15 == 0, 91, rng.integers(18, 91, n))
    has_cxr = np.arange(n) < n_cxr
    n_st = np.where(has_cxr, 1 + rng.geometric(0.4, n), 0)
    n_st[0] = 26  # more than 20 studies
    pi = np.repeat(np.arange(n), n_st)
    new_ep = (rng.random(len(pi)) < 0.45) | np.r_[True, pi[1:] != pi[:-1]]
    ep = np.cumsum(new_ep) - 1
    y0 = (anchor - 1970).astype("datetime64[Y]").astype("datetime64[s]").astype(np.int64)
    ep_start = y0[pi[new_ep]] + (rng.random(new_ep.sum()) * 8 * 365 * 86_400).astype(np.int64)
    step = np.where(new_ep, 0, rng.exponential(20 * 3600, len(pi)).astype(np.int64))
    cs = np.cumsum(step)
    t = ep_start[ep] + cs - cs[np.flatnonzero(new_ep)][ep]
    same = np.r_[False, (pi[1:] == pi[:-1]) & (rng.random(len(pi) - 1) < 0.03)]
    t[same] = t[np.flatnonzero(same) - 1]  # two studies at the identical datetime
    studies = pl.DataFrame({"subject_id": subject[pi],
                            "study_id": rng.choice(10_000_000, len(pi), replace=False) + 50_000_000,
                            "study_datetime": pl.Series(t * 1_000_000).cast(pl.Datetime("us"))})
    last = np.zeros(n, dtype=np.int64)
    np.maximum.at(last, pi, t)
    dod_day = np.where(has_cxr, last // 86_400 + 1 + rng.integers(0, 400, n),
                       y0 // 86_400 + rng.integers(300, 3000, n))
    dod = pl.Series(dod_day.astype(np.int32)).cast(pl.Date)
    patients = pl.DataFrame({
        "subject_id": subject, "gender": np.where(rng.random(n) < 0.5, "F", "M"), "anchor_age": age,
        "anchor_year": anchor, "anchor_year_group": np.array(GROUPS)[rng.integers(0, 5, n)],
        "dod": pl.select(pl.when(pl.Series(rng.random(n) < 0.2)).then(dod)).to_series(),
        "has_cxr": has_cxr, "is_gold": has_cxr & (rng.random(n) < 0.1),
    })
    return patients, studies


@pytest.fixture(scope="module")
def cohort():
    return make_cohort()


@pytest.fixture(scope="module")
def ehr(cohort):
    return make_ehr(11, SCALES["demo"], *cohort)


@pytest.fixture(scope="module")
def db(ehr, cohort):
    tables, _ = ehr
    con = duckdb.connect()
    for name, df in tables.items():
        con.register(name, df.to_arrow())
    con.register("cohort_patients", cohort[0].to_arrow())
    con.register("studies", cohort[1].to_arrow())
    return con


def one(con, sql: str):
    return con.sql(sql).fetchone()[0]


def test_deterministic(cohort, ehr):
    tables, planted = ehr
    again, planted2 = make_ehr(11, SCALES["demo"], *cohort)
    assert planted == planted2
    for name, df in tables.items():
        assert df.equals(again[name]), name
    other, _ = make_ehr(12, SCALES["demo"], *cohort)
    assert not other["admissions"].equals(tables["admissions"])


def test_layout_matches_schema(ehr):
    tables, planted = ehr
    assert list(tables) == [f.name for f in TABLES.values() if f.group.startswith("mimiciv")]
    for name, df in tables.items():
        spec = TABLES[name]
        assert df.columns == list(spec.header), name
        assert [df[c].dtype for c in df.columns] == [DTYPES[spec.types[c]] for c in df.columns], name
        for c in df.columns:
            if spec.types[c] == "datetime":
                assert (df[c].drop_nulls().dt.microsecond() == 0).all(), (name, c)
            if spec.types[c] == "str":
                assert not (df[c] == "").any(), (name, c)  # real nulls, not empty strings
            if spec.types[c] == "float":
                assert not df[c].is_nan().any(), (name, c)
        assert df.height > 0, name
    json.dumps(planted)
    # MIMIC charts whole minutes (studies keep their seconds)
    for name, col in (("admissions", "admittime"), ("admissions", "dischtime"), ("transfers", "intime"),
                      ("labevents", "charttime"), ("chartevents", "charttime"), ("prescriptions", "starttime"),
                      ("inputevents", "endtime"), ("outputevents", "charttime")):
        assert (tables[name][col].dt.second() == 0).all(), (name, col)


def test_keys_unique_and_id_ranges(ehr):
    tables, _ = ehr
    for name, df in tables.items():
        key = list(TABLES[name].key)
        assert df.select(key).is_duplicated().sum() == 0, name
    assert tables["admissions"]["hadm_id"].is_between(20_000_000, 29_999_999).all()
    assert tables["transfers"]["transfer_id"].is_between(30_000_000, 39_999_999).all()
    assert tables["icustays"]["stay_id"].is_between(30_000_000, 39_999_999).all()


def test_referential_integrity(db):
    for t in ("admissions", "transfers", "diagnoses_icd", "procedures_icd", "labevents", "prescriptions",
              "microbiologyevents", "icustays", "chartevents", "inputevents", "outputevents"):
        assert one(db, f"select count(*) from {t} where subject_id not in (select subject_id from patients)") == 0
        assert one(db, f"""select count(*) from {t} x where hadm_id is not null and not exists
                   (select 1 from admissions a where a.hadm_id = x.hadm_id and a.subject_id = x.subject_id)""") == 0, t
    for t in ("chartevents", "inputevents", "outputevents"):
        assert one(db, f"""select count(*) from {t} x where not exists (select 1 from icustays i
                   where i.stay_id = x.stay_id and i.hadm_id = x.hadm_id)""") == 0, t
        assert one(db, f"""select count(*) from {t} x where itemid not in
                   (select itemid from d_items where linksto = '{t}')""") == 0, t
    assert one(db, "select count(*) from labevents where itemid not in (select itemid from d_labitems)") == 0
    for t, d in (("diagnoses_icd", "d_icd_diagnoses"), ("procedures_icd", "d_icd_procedures")):
        assert one(db, f"select count(*) from {t} anti join {d} using (icd_code, icd_version)") == 0, t
    for t in ("diagnoses_icd", "procedures_icd"):  # seq_num is 1..n within an admission
        assert one(db, f"select count(*) from (select hadm_id from {t} group by 1 "
                       f"having max(seq_num) <> count(*) or min(seq_num) <> 1)") == 0
    n_dx = db.sql("select count(*) n from admissions a left join diagnoses_icd d using (hadm_id) group by hadm_id").pl()
    assert n_dx["n"].min() >= 3 and n_dx["n"].max() <= 15
    assert one(db, "select max(n) from (select count(*) n from procedures_icd group by hadm_id)") <= 5


def test_events_inside_their_windows(db):
    ok = "(select * from admissions where dischtime >= admittime)"
    for t, col in (("labevents", "charttime"), ("prescriptions", "starttime"), ("prescriptions", "stoptime"),
                   ("microbiologyevents", "charttime"), ("chartevents", "charttime"), ("inputevents", "starttime"),
                   ("outputevents", "charttime"), ("icustays", "intime"), ("icustays", "outtime")):
        assert one(db, f"""select count(*) from {t} x join {ok} a using (hadm_id)
                   where x.{col} not between a.admittime and a.dischtime""") == 0, (t, col)
    # time-bearing events never point at the admissions discharged before admittime
    for t in ("labevents", "prescriptions", "microbiologyevents", "procedures_icd", "icustays"):
        assert one(db, f"select count(*) from {t} join admissions a using (hadm_id) "
                       f"where a.dischtime < a.admittime") == 0, t
    assert one(db, """select count(*) from procedures_icd x join admissions a using (hadm_id)
               where x.chartdate not between cast(a.admittime as date) and cast(a.dischtime as date)""") == 0
    assert one(db, """select count(*) from microbiologyevents x join admissions a using (hadm_id)
               where x.chartdate not between date_trunc('day', a.admittime) and a.dischtime""") == 0
    for t, col in (("chartevents", "charttime"), ("inputevents", "starttime"), ("inputevents", "endtime"),
                   ("outputevents", "charttime")):
        assert one(db, f"""select count(*) from {t} x join icustays i using (stay_id)
                   where x.{col} not between i.intime and i.outtime""") == 0, (t, col)
    assert one(db, "select count(*) from prescriptions where stoptime < starttime") == 0
    assert one(db, "select count(*) from microbiologyevents where charttime is not null "
                   "and chartdate <> date_trunc('day', charttime)") == 0


def test_transfer_chains(db):
    chains = db.sql("""
        select t.*, a.admittime, a.dischtime, a.edregtime, a.edouttime,
               lead(intime) over (partition by hadm_id order by intime, eventtype = 'discharge') next_in,
               row_number() over (partition by hadm_id order by intime, eventtype = 'discharge') k,
               count(*) over (partition by hadm_id) n
        from transfers t join admissions a using (hadm_id, subject_id) where a.dischtime >= a.admittime""").pl()
    inner = chains.filter(pl.col("eventtype") != "discharge")
    assert (inner["outtime"] == inner["next_in"]).all()  # contiguous
    last = chains.filter(pl.col("k") == pl.col("n"))
    assert (last["eventtype"] == "discharge").all() and last["careunit"].is_null().all()
    assert last["outtime"].is_null().all() and (last["intime"] == last["dischtime"]).all()
    first = chains.filter(pl.col("k") == 1)
    ed = first.filter(pl.col("eventtype") == "ED")
    assert (ed["intime"] == ed["edregtime"]).all() and (ed["outtime"] == ed["edouttime"]).all()
    assert (ed["careunit"] == "Emergency Department").all()
    direct = first.filter(pl.col("eventtype") != "ED")
    assert (direct["eventtype"] == "admit").all() and (direct["intime"] == direct["admittime"]).all()
    assert direct["edregtime"].is_null().all()
    assert set(chains.filter(pl.col("k").is_between(2, pl.col("n") - 1))["eventtype"]) <= {"admit", "transfer"}
    n_transfers = chains.filter(pl.col("eventtype") == "transfer").group_by("hadm_id").len()["len"]
    assert n_transfers.max() <= 3
    # ED-only visits: ED rows without an admission
    assert one(db, "select count(*) from transfers where hadm_id is null and eventtype <> 'ED'") == 0
    assert one(db, "select count(*) from transfers where hadm_id is null") > 0
    # one ICU stay per ICU transfer row, same times
    assert one(db, """select count(*) from transfers t where careunit in (select first_careunit from icustays)
               and not exists (select 1 from icustays i where i.hadm_id = t.hadm_id and i.intime = t.intime
               and i.outtime = t.outtime and i.first_careunit = t.careunit)""") == 0
    assert set(db.sql("select distinct first_careunit from icustays").pl().to_series()) <= ICU_UNITS
    assert one(db, "select count(*) from icustays where abs(los - date_diff('second', intime, outtime) / 86400.0) "
                   "> 1e-9") == 0


def test_admissions_realism(db, ehr, cohort):
    tables, planted = ehr
    patients = cohort[0]
    counts = db.sql("""select p.has_cxr, count(a.hadm_id) n from cohort_patients p
                       left join admissions a using (subject_id) group by p.subject_id, p.has_cxr""").pl()
    assert counts.filter("has_cxr")["n"].is_between(1, 6).all()
    assert counts.filter(~pl.col("has_cxr"))["n"].is_between(1, 4).all()
    assert one(db, """select count(*) from admissions a join admissions b on a.subject_id = b.subject_id
               and a.hadm_id < b.hadm_id and a.dischtime >= a.admittime and b.dischtime >= b.admittime
               and a.admittime < b.dischtime and b.admittime < a.dischtime""") == 0
    assert one(db, """select count(*) from admissions join patients using (subject_id)
               where year(admittime) < anchor_year or year(dischtime) > anchor_year + 9""") == 0
    died = db.sql("""select a.*, p.dod from admissions a join patients p using (subject_id)
                     where hospital_expire_flag = 1""").pl()
    assert died.height > 0
    assert (died["discharge_location"] == "DIED").all() and (died["deathtime"] == died["dischtime"]).all()
    assert (died["deathtime"].dt.date() == died["dod"]).all()
    assert one(db, "select count(*) from admissions where (hospital_expire_flag = 1) <> (deathtime is not null)"
                   " or (discharge_location = 'DIED') <> (hospital_expire_flag = 1)") == 0
    assert one(db, """select count(*) from admissions join patients p using (subject_id)
               where hospital_expire_flag = 0 and p.dod is not null and dischtime >= p.dod""") == 0
    los = db.sql("select date_diff('second', admittime, dischtime) / 86400.0 d from admissions").pl()["d"]
    assert 2.5 < los.median() < 6 and los.max() > 30
    adm = tables["admissions"]
    assert set(adm["admission_type"]) <= {"EW EMER.", "EU OBSERVATION", "OBSERVATION ADMIT", "URGENT",
                                          "SURGICAL SAME DAY ADMISSION", "DIRECT EMER.", "DIRECT OBSERVATION",
                                          "ELECTIVE", "AMBULATORY OBSERVATION"}
    assert set(adm["insurance"]) == {"Medicare", "Medicaid", "Other"}
    assert set(adm["language"]) == {"ENGLISH", "?"}
    assert adm["marital_status"].null_count() > 0 and adm["discharge_location"].null_count() > 0
    ed = adm.filter(pl.col("edregtime").is_not_null())
    assert 0.3 < ed.height / adm.height < 0.8
    assert (ed["edregtime"] <= ed["admittime"]).all() and (ed["edouttime"] >= ed["admittime"]).all()
    assert 0.25 <= planted["admissions_with_icu"] / adm.height <= 0.45
    assert planted["admissions_age_over_89"] > 0  # anchor_age 91 patients reach the >89 filter
    assert patients.height == tables["patients"].height


def test_planted_counts_rederived(db, ehr, cohort):
    _, planted = ehr
    n_studies = cohort[1].height
    m = db.sql("""select s.study_id, count(t.transfer_id) n, bool_or(t.hadm_id is not null) with_hadm
                  from studies s left join transfers t on t.subject_id = s.subject_id
                  and s.study_datetime between t.intime and t.outtime group by s.study_id""").pl()
    matches = {"none": int((m["n"] == 0).sum()), "one_with_hadm": int(((m["n"] == 1) & m["with_hadm"]).sum()),
               "one_without_hadm": int(((m["n"] == 1) & ~m["with_hadm"]).sum()), "several": int((m["n"] > 1).sum())}
    assert planted["study_transfer_matches"] == matches
    assert sum(matches.values()) == n_studies
    expected = {
        "admissions_dischtime_before_admittime": "select count(*) from admissions where dischtime < admittime",
        "admissions_age_over_89": """select count(*) from admissions join patients using (subject_id)
                                     where year(admittime) - anchor_year + anchor_age > 89""",
        "admissions_died": "select count(*) from admissions where deathtime is not null",
        "admissions_los_over_30_days": "select count(*) from admissions where dischtime - admittime > interval 30 day",
        "admissions_with_icu": "select count(distinct hadm_id) from icustays",
        "studies_inside_admission": """select count(*) from studies s where exists (select 1 from admissions a
            where a.subject_id = s.subject_id and s.study_datetime between a.admittime and a.dischtime)""",
        "labevents_null_hadm_rows": "select count(*) from labevents where hadm_id is null",
        "labevents_null_valuenum_rows": "select count(*) from labevents where valuenum is null",
        "prescriptions_non_integer_dose_rows": """select count(*) from prescriptions
            where not regexp_full_match(replace(dose_val_rx, ',', ''), '[0-9]+')""",
        "prescriptions_null_stoptime_rows": "select count(*) from prescriptions where stoptime is null",
        "chartevents_null_valuenum_rows": "select count(*) from chartevents where valuenum is null",
        "inputevents_non_ml_rows": "select count(*) from inputevents where amountuom <> 'ml'",
        "microbiologyevents_null_charttime_rows": "select count(*) from microbiologyevents where charttime is null",
    }
    for key, sql in expected.items():
        assert planted[key] == one(db, sql), key
    n_adm = planted["rows"]["admissions"]
    assert planted["admissions_dischtime_before_admittime"] == min(3, max(1, n_adm // 200))
    for t, key in (("labevents", "labevents_minority_unit_rows"), ("chartevents", "chartevents_minority_unit_rows")):
        sql = f"""with u as (select itemid, valueuom, count(*) n from {t} where valueuom is not null group by all),
                  r as (select *, row_number() over (partition by itemid order by n desc, valueuom) k from u)
                  select coalesce(sum(n), 0) from r where k > 1"""
        assert planted[key] == one(db, sql) > 0, key
    for d, kind in (("d_icd_diagnoses", "diagnoses"), ("d_icd_procedures", "procedures")):
        coll = one(db, f"""select count(*) from (select icd_code from {d} group by icd_code
                   having count(distinct icd_version) > 1 and count(distinct long_title) > 1)""")
        shared = one(db, f"select count(*) from (select long_title from {d} group by 1 "
                         f"having count(distinct icd_code) > 1)")
        assert planted["icd_code_version_collisions"][kind] == coll
        assert planted["icd_shared_long_titles"][kind] == shared
    assert planted["icd_code_version_collisions"]["diagnoses"] > 0
    assert planted["icd_shared_long_titles"]["diagnoses"] > 0 and planted["icd_shared_long_titles"]["procedures"] > 0
    assert planted["rows"] == {name: one(db, f"select count(*) from {name}") for name in planted["rows"]}


def test_study_bracketing_shares(ehr, cohort):
    _, planted = ehr
    n = cohort[1].height
    m = planted["study_transfer_matches"]
    assert abs(planted["studies_inside_admission"] / n - 0.80) <= 0.05
    assert abs(m["one_without_hadm"] / n - 0.08) <= 0.04
    assert abs(m["none"] / n - 0.07) <= 0.04
    assert m["several"] >= 3


def test_dictionaries_and_vocabularies(db, ehr):
    tables, _ = ehr
    dx = tables["d_icd_diagnoses"]
    for code, version, title in (("4019", 9, "Unspecified essential hypertension"),
                                 ("I10", 10, "Essential (primary) hypertension"), ("42731", 9, "Atrial fibrillation"),
                                 ("N179", 10, "Acute kidney failure, unspecified")):
        row = dx.filter((pl.col("icd_code") == code) & (pl.col("icd_version") == version))
        assert row["long_title"].to_list() == [title]
    for d in (dx, tables["d_icd_procedures"]):
        assert set(d["icd_version"]) == {9, 10} and d.height >= 150
    for t in ("diagnoses_icd", "procedures_icd"):
        assert set(tables[t]["icd_version"]) == {9, 10}
    labs = dict(zip(tables["d_labitems"]["itemid"], tables["d_labitems"]["label"]))
    assert labs[50912] == "Creatinine" and labs[51301] == "White Blood Cells" and labs[50893] == "Calcium, Total"
    items = tables["d_items"]
    vitals = {223762: "temperature celsius", 220277: "o2 saturation pulseoxymetry", 220045: "heart rate",
              220210: "respiratory rate", 220050: "arterial blood pressure systolic",
              220051: "arterial blood pressure diastolic", 220052: "arterial blood pressure mean",
              226512: "admission weight (kg)", 226730: "height (cm)"}  # reference-builders 5.10
    got = dict(zip(items["itemid"], items["label"].str.to_lowercase()))
    assert all(got[i] == label for i, label in vitals.items())
    assert {"chartevents", "inputevents", "outputevents", "procedureevents", "datetimeevents"} <= set(items["linksto"])
    charted = set(tables["chartevents"]["itemid"])
    assert set(vitals) <= charted and 223761 in charted
    rx = tables["prescriptions"]
    assert {"0.5", "5-10"} & set(rx["dose_val_rx"])
    assert {"PO", "IV", "SC", "IH", "PO/NG", "IV DRIP", "TP"} <= set(rx["route"])
    assert one(db, "select count(distinct itemid) from labevents where valueuom in ('mmol/L', 'umol/L', 'g/L')") >= 3


def test_event_content(ehr):
    tables, planted = ehr
    lab = tables["labevents"]
    assert 0.05 < planted["labevents_null_hadm_rows"] / lab.height < 0.15
    text = lab.filter(pl.col("valuenum").is_null())
    assert text.height > 0 and text["value"].null_count() == 0
    nums = lab.filter(pl.col("valuenum").is_not_null())
    assert (nums["value"].cast(pl.Float64) == nums["valuenum"]).all()
    micro = tables["microbiologyevents"]
    tests = micro.group_by("micro_specimen_id", "test_seq").agg(pos=pl.col("org_name").is_not_null().any())
    assert 0.55 < 1 - tests["pos"].mean() < 0.9  # most cultures are negative
    grown = micro.filter(pl.col("ab_name").is_not_null())
    assert grown["org_name"].null_count() == 0 and set(grown["interpretation"].drop_nulls()) <= {"S", "R", "I"}
    assert set(micro["spec_type_desc"]) >= {"BLOOD CULTURE", "URINE", "SPUTUM", "MRSA SCREEN"}
    # order sets: ~1 in 5 prescriptions starts with the admission's previous one (template 165 needs two
    # different drugs started together); never across admissions
    rx = tables["prescriptions"]
    together = rx.group_by("hadm_id", "starttime").agg(n=pl.len(), drugs=pl.col("drug").n_unique())
    assert 0.1 < (rx.height - together.height) / rx.height < 0.3
    assert together.filter(pl.col("drugs") > 1).height > 20
    assert rx.group_by("subject_id", "starttime").agg(pl.col("hadm_id").n_unique())["hadm_id"].max() == 1
    inputs = tables["inputevents"]
    assert 0 < planted["inputevents_non_ml_rows"] < inputs.height / 2
    assert set(tables["outputevents"]["valueuom"]) == {"ml"}
    chart = tables["chartevents"]
    assert (chart.filter(pl.col("valuenum").is_null() & pl.col("value").is_not_null())["itemid"] == 220048).all()


def test_demo_scale_volumes():
    """A demo-sized cohort (300 CXR + 60 EHR-only patients) gives MIMIC-like volumes quickly."""
    patients, studies = make_cohort(5, 300, 60)
    tables, planted = make_ehr(0, SCALES["demo"], patients, studies)
    assert 50_000 <= tables["labevents"].height <= 150_000
    assert tables["chartevents"].height > tables["inputevents"].height > 0
    assert planted["admissions_dischtime_before_admittime"] == 3
    assert abs(planted["studies_inside_admission"] / studies.height - 0.80) <= 0.04
