"""Tests of the NeuralSQL parser, executor and VQA modules over a hand-built EHRXQA SQLite database.

``build_db`` writes the tables the tests need in the EHRXQA column layout (reference-builders.md 5.3): 3
patients, 8 studies at known times (one study, ``C3``, has no answer-sheet rows), an answer sheet with
hand-chosen affirmed labels (``AFFIRMED``) over a small pair pool, admissions and a lab table.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

AF, DIS, TA, TL, DEV = "anatomicalfinding", "disease", "technicalassessment", "tubesandlines", "device"
CATEGORY = {"lung opacity": AF, "pleural effusion": AF, "atelectasis": AF, "pneumonia": DIS, "chest tube": TL,
            "low lung volumes": TA, "enlarged cardiac silhouette": AF, "cardiac pacer and wires": DEV,
            "endotracheal tube": TL, "rotated": TA, "scoliosis": AF}
_LUNG = ("lung opacity", "pleural effusion", "atelectasis", "pneumonia", "chest tube", "low lung volumes")
POOL = {"left lung": _LUNG, "right lung": _LUNG,
        "cardiac silhouette": ("enlarged cardiac silhouette", "cardiac pacer and wires"),
        "mediastinum": ("endotracheal tube", "enlarged cardiac silhouette", "cardiac pacer and wires"),
        "spine": ("rotated", "scoliosis")}

A, B, C = 10000001, 10000002, 10000003
PATIENTS = [(A, "f"), (B, "m"), (C, "m")]
ADMISSIONS = [(A, 201, "2105-01-01 08:00:00", "2105-01-10 12:00:00"), (A, 202, "2105-12-30 10:00:00", None),
              (B, 203, "2104-05-01 08:00:00", "2104-05-20 12:00:00"), (C, 204, "2105-06-01 08:00:00",
                                                                       "2105-06-05 12:00:00")]
# study key -> (subject, hadm, study_id, image_id, view, time, ct_ratio, mt_ratio)
STUDIES = {
    "A1": (A, 201, 50000001, "img-a1", "ap", "2105-01-02 10:00:00", 0.45, 0.30),
    "A2": (A, 201, 50000002, "img-a2", "pa", "2105-01-05 10:00:00", 0.52, 0.35),
    "A3": (A, 202, 50000003, "img-a3", "ap", "2105-12-31 08:00:00", 0.48, 0.31),
    "B1": (B, 203, 50000004, "img-b1", "pa", "2104-05-03 09:00:00", 0.60, 0.40),
    "B2": (B, 203, 50000005, "img-b2", "ap", "2104-05-10 09:00:00", 0.62, 0.36),
    "C1": (C, 204, 50000006, "img-c1", "ap", "2105-06-02 11:00:00", 0.40, 0.20),
    "C2": (C, 204, 50000007, "img-c2", "pa", "2105-06-04 11:00:00", None, None),
    "C3": (C, 204, 50000008, "img-c3", "ap", "2105-06-04 20:00:00", None, None),  # not in the answer sheet
}
SID = {k: v[2] for k, v in STUDIES.items()}
AFFIRMED = {
    "A1": [("left lung", "lung opacity"), ("left lung", "pneumonia"), ("left lung", "pleural effusion"),
           ("mediastinum", "endotracheal tube"), ("spine", "rotated")],
    "A2": [("left lung", "pleural effusion"), ("right lung", "lung opacity"), ("right lung", "atelectasis"),
           ("mediastinum", "endotracheal tube")],
    "A3": [],
    "B1": [("cardiac silhouette", "enlarged cardiac silhouette"), ("right lung", "pneumonia"),
           ("right lung", "lung opacity")],
    "B2": [("cardiac silhouette", "enlarged cardiac silhouette"), ("cardiac silhouette", "cardiac pacer and wires"),
           ("mediastinum", "cardiac pacer and wires")],
    "C1": [("right lung", "pleural effusion"), ("left lung", "chest tube")],
    "C2": [("left lung", "lung opacity"), ("left lung", "low lung volumes")],
}
LABITEMS = [(50931, "glucose"), (50912, "creatinine")]
LABEVENTS = [(A, 201, 50931, "2105-01-02 06:00:00", 150.0), (A, 201, 50912, "2105-01-04 07:00:00", 1.1),
             (A, 202, 50931, "2105-12-30 12:00:00", 99.0), (B, 203, 50931, "2104-05-09 08:00:00", 180.0),
             (C, 204, 50912, "2105-06-03 09:00:00", 0.9)]


def build_db(path: Path) -> Path:
    """Write the fixture database to ``path`` and return it."""
    con = sqlite3.connect(path)
    con.executescript("""
        CREATE TABLE patients (row_id INTEGER, subject_id INTEGER, gender TEXT, dob TEXT, dod TEXT);
        CREATE TABLE admissions (row_id INTEGER, subject_id INTEGER, hadm_id INTEGER, admittime TEXT,
            dischtime TEXT, admission_type TEXT, age INTEGER);
        CREATE TABLE tb_cxr (row_id INTEGER, subject_id INTEGER, hadm_id REAL, study_id INTEGER, image_id TEXT,
            viewposition TEXT, studydatetime TEXT);
        CREATE TABLE tb_cxr_plus (row_id INTEGER, subject_id INTEGER, hadm_id REAL, study_id INTEGER,
            image_id TEXT, viewposition TEXT, studydatetime TEXT, studyorder REAL, object TEXT, relation INTEGER,
            attribute TEXT, category TEXT, ct_ratio REAL, mt_ratio REAL);
        CREATE TABLE d_labitems (row_id INTEGER, itemid INTEGER, label TEXT);
        CREATE TABLE labevents (row_id INTEGER, subject_id INTEGER, hadm_id INTEGER, itemid INTEGER,
            charttime TEXT, valuenum REAL, valueuom TEXT);
    """)
    con.executemany("INSERT INTO patients VALUES (?, ?, ?, '2060-01-01 00:00:00', NULL)",
                    [(i, s, g) for i, (s, g) in enumerate(PATIENTS)])
    con.executemany("INSERT INTO admissions VALUES (?, ?, ?, ?, ?, 'emergency', 45)",
                    [(i, *a) for i, a in enumerate(ADMISSIONS)])
    con.executemany("INSERT INTO tb_cxr VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [(i, s, h, st, im, v, t) for i, (s, h, st, im, v, t, _, _) in enumerate(STUDIES.values())])
    plus = []
    for key, affirmed in AFFIRMED.items():
        s, h, st, im, v, t, ctr, mtr = STUDIES[key]
        order = sorted(k for k in STUDIES if STUDIES[k][0] == s).index(key) + 1
        for obj, attrs in POOL.items():
            for attr in attrs:
                plus.append((len(plus), s, h, st, im, v, t, order, obj, int((obj, attr) in affirmed), attr,
                             CATEGORY[attr], ctr, mtr))
    con.executemany(f"INSERT INTO tb_cxr_plus VALUES ({','.join('?' * 14)})", plus)
    con.executemany("INSERT INTO d_labitems VALUES (?, ?, ?)", [(i, *x) for i, x in enumerate(LABITEMS)])
    con.executemany("INSERT INTO labevents VALUES (?, ?, ?, ?, ?, ?, 'mg/dl')",
                    [(i, *x) for i, x in enumerate(LABEVENTS)])
    con.commit()
    con.close()
    return path
