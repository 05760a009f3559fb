"""Hand-built EHRXQA database for the image-template tests (all tables in one SQLite file).

Patients 1 (f), 2 (m), 3 (f). Admissions: 101 (patient 1, 2104-03-01..2104-03-10), 102 (patient 1,
2105-12-20, not discharged = current), 201 (patient 2, 2105-06-01..2105-06-15).
Studies (study_id: patient, time, hadm): 11: 1, 2104-03-02 10:00, 101; 12: 1, 2104-03-05 08:00, 101;
13: 1, 2105-12-21 09:00, 102; 21: 2, 2105-06-02 12:00, 201; 22: 2, 2105-11-15 07:30, none; 31: 3, 2103-07-07.
TB_CXR_PLUS has one row per study x pool pair (relation 0/1), affirmed rows as in AFFIRMED.
Ages at admission: 101: 54, 102: 55, 201: 45. Table events (EVENTS): the diagnosis title "pneumonia, unspecified
organism" belongs to two ICD codes (ICD-9 486 and ICD-10 j189), as real MIMIC-IV titles collide.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

POOL = [("left lung", "lung opacity", "anatomicalfinding"), ("left lung", "pneumonia", "disease"),
        ("left lung", "pleural effusion", "anatomicalfinding"),
        ("left lung", "low lung volumes", "technicalassessment"),
        ("right lung", "lung opacity", "anatomicalfinding"), ("right lung", "pneumonia", "disease"),
        ("right lung", "pleural effusion", "anatomicalfinding"),
        ("right lung", "low lung volumes", "technicalassessment"),
        ("cardiac silhouette", "enlarged cardiac silhouette", "anatomicalfinding"), ("svc", "picc", "tubesandlines")]
STUDIES = [  # study_id, subject_id, hadm_id, time, view, ct_ratio, mt_ratio
    (11, 1, 101, "2104-03-02 10:00:00", "ap", 0.45, 0.30), (12, 1, 101, "2104-03-05 08:00:00", "pa", 0.48, 0.35),
    (13, 1, 102, "2105-12-21 09:00:00", "ap", 0.56, 0.40), (21, 2, 201, "2105-06-02 12:00:00", "pa", 0.5, 0.20),
    (22, 2, None, "2105-11-15 07:30:00", "ap", 0.52, 0.3333), (31, 3, None, "2103-07-07 07:07:07", "pa", 0.61, 0.34)]
AFFIRMED = {
    11: {("left lung", "lung opacity"), ("left lung", "pneumonia")},
    12: {("left lung", "lung opacity"), ("right lung", "pleural effusion"), ("svc", "picc")},
    13: {("right lung", "pleural effusion"), ("cardiac silhouette", "enlarged cardiac silhouette"),
         ("left lung", "low lung volumes")},
    21: set(),
    22: {("left lung", "pneumonia"), ("left lung", "lung opacity"), ("right lung", "pneumonia"),
         ("right lung", "lung opacity")},
    31: {("svc", "picc"), ("cardiac silhouette", "enlarged cardiac silhouette")},
}


DIAGNOSES = [("486", "pneumonia, unspecified organism"), ("j189", "pneumonia, unspecified organism"),
             ("i10", "essential hypertension")]
PROCEDURES = [("0bh17ez", "insertion of endotracheal airway into trachea")]
EVENTS = {  # table -> rows (subject_id, hadm_id, code or drug, time)
    "diagnoses_icd": [(1, 101, "486", "2104-03-01 09:00:00"), (1, 102, "j189", "2105-12-20 11:00:00"),
                      (2, 201, "i10", "2105-06-03 10:00:00")],
    "procedures_icd": [(1, 101, "0bh17ez", "2104-03-04 12:00:00")],
    "prescriptions": [(1, 101, "heparin", "2104-03-03 08:00:00"), (2, 201, "furosemide", "2105-06-01 10:00:00"),
                      (2, 201, "heparin", "2105-06-05 10:00:00")],
}


def _events(con: sqlite3.Connection) -> None:
    con.executescript("""
        CREATE TABLE d_icd_diagnoses (row_id INTEGER, icd_code TEXT, long_title TEXT);
        CREATE TABLE d_icd_procedures (row_id INTEGER, icd_code TEXT, long_title TEXT);
        CREATE TABLE diagnoses_icd (row_id INTEGER, subject_id INTEGER, hadm_id INTEGER, icd_code TEXT, charttime TEXT);
        CREATE TABLE procedures_icd (row_id INTEGER, subject_id INTEGER, hadm_id INTEGER, icd_code TEXT, charttime TEXT);
        CREATE TABLE prescriptions (row_id INTEGER, subject_id INTEGER, hadm_id INTEGER, starttime TEXT, stoptime TEXT,
            drug TEXT, dose_val_rx TEXT, dose_unit_rx TEXT, route TEXT);
    """)
    for table, rows in (("d_icd_diagnoses", DIAGNOSES), ("d_icd_procedures", PROCEDURES)):
        con.executemany(f"INSERT INTO {table} VALUES (?, ?, ?)", [(i, *r) for i, r in enumerate(rows)])
    for table in ("diagnoses_icd", "procedures_icd"):
        con.executemany(f"INSERT INTO {table} VALUES (?, ?, ?, ?, ?)", [(i, *r) for i, r in enumerate(EVENTS[table])])
    con.executemany("INSERT INTO prescriptions (row_id, subject_id, hadm_id, drug, starttime) VALUES (?, ?, ?, ?, ?)",
                    [(i, *r) for i, r in enumerate(EVENTS["prescriptions"])])


def build_db(path: Path) -> Path:
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE patients (row_id INTEGER, subject_id INTEGER, gender TEXT, dob TEXT, dod TEXT);
        CREATE TABLE admissions (row_id INTEGER, subject_id INTEGER, hadm_id INTEGER, admittime TEXT, dischtime TEXT,
            admission_type TEXT, admission_location TEXT, discharge_location TEXT, insurance TEXT, language TEXT,
            marital_status TEXT, age INTEGER);
        CREATE TABLE tb_cxr (row_id INTEGER, subject_id INTEGER, hadm_id INTEGER, study_id INTEGER, image_id TEXT,
            viewposition TEXT, studydatetime TEXT);
        CREATE TABLE tb_cxr_plus (row_id INTEGER, subject_id INTEGER, hadm_id INTEGER, study_id INTEGER,
            image_id TEXT, viewposition TEXT, studydatetime TEXT, studyorder REAL, object TEXT, relation INTEGER,
            attribute TEXT, category TEXT, ct_ratio REAL, mt_ratio REAL);
    """)
    con.executemany("INSERT INTO patients VALUES (?, ?, ?, ?, NULL)",
                    [(0, 1, "f", "2050-01-01 00:00:00"), (1, 2, "m", "2060-01-01 00:00:00"),
                     (2, 3, "f", "2070-01-01 00:00:00")])
    con.executemany("INSERT INTO admissions (row_id, subject_id, hadm_id, admittime, dischtime, age) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    [(0, 1, 101, "2104-03-01 08:00:00", "2104-03-10 12:00:00", 54),
                     (1, 1, 102, "2105-12-20 10:00:00", None, 55),
                     (2, 2, 201, "2105-06-01 09:00:00", "2105-06-15 16:00:00", 45)])
    _events(con)
    plus, order = [], {}
    for i, (sid, subj, hadm, t, view, ct, mt) in enumerate(STUDIES):
        con.execute("INSERT INTO tb_cxr VALUES (?, ?, ?, ?, ?, ?, ?)", (i, subj, hadm, sid, f"img{sid}", view, t))
        order[subj] = order.get(subj, 0) + 1
        for o, a, c in POOL:
            plus.append((len(plus), subj, hadm, sid, f"img{sid}", view, t, float(order[subj]), o,
                         int((o, a) in AFFIRMED[sid]), a, c, ct, mt))
    con.executemany(f"INSERT INTO tb_cxr_plus VALUES ({', '.join('?' * 14)})", plus)
    con.commit()
    con.close()
    return path
