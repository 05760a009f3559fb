"""Hand-built database for the table-template tests: every table created with the real DDL
(``ehr.ddl.create_sql``), foreign keys enforced while loading, a few patients whose answers can be worked out
by hand. "Now" is 2105-12-31 23:59:00.

Patients: 1 f (dob 2050-05-05, alive), 2 m (2060-01-01, died 2105-03-01), 3 f (2070-07-07, alive),
4 m (2040-04-04, died 2102-06-01).
Admissions (hadm: patient, admit -> discharge, type, location, insurance, marital, age):
  11: 1, 2104-01-10 08:00 -> 2104-01-20 08:00, emergency, emergency room, medicare, married, 53
  12: 1, 2105-12-25 10:00 -> (current), elective, physician referral, medicare, widowed, 55
  21: 2, 2103-02-01 00:00 -> 2103-02-05 12:00, urgent, emergency room, medicaid, single, 43
  22: 2, 2105-02-20 06:00 -> 2105-02-28 18:00, emergency, transfer from hospital, medicaid, single, 45
  31: 3, 2105-06-01 12:00 -> 2105-06-03 12:00, elective, physician referral, private, married, 34
  41: 4, 2101-05-01 00:00 -> 2101-05-10 00:00, emergency, emergency room, medicare, married, 61
ICU stays: 111 (1, hadm 11, 2104-01-11 00:00 -> 01-13 12:00), 112 (1, 11, 2104-01-15 00:00 -> 01-16 00:00),
121 (1, 12, 2105-12-30 23:59 -> current), 221 (2, 22, 2105-02-21 00:00 -> 02-24 00:00).
Diagnoses are charted at admission; "pneumonia, unspecified organism" has two ICD codes (486, j189) and
"insertion of endotracheal airway" two procedure codes (0bh17ez, 9604). Costs: one fixed cost per code /
item / drug (COSTS), charged at the event time; admission totals: 11: 459, 12: 358, 21: 13, 22: 265,
31: 27, 41: 148.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ehrxqa_pipeline.ehr import ddl

PATIENTS = [(1, "f", "2050-05-05 00:00:00", None), (2, "m", "2060-01-01 00:00:00", "2105-03-01 00:00:00"),
            (3, "f", "2070-07-07 00:00:00", None), (4, "m", "2040-04-04 00:00:00", "2102-06-01 00:00:00")]
ADMISSIONS = [  # subject, hadm, admittime, dischtime, type, location, discharge, insurance, language, marital, age
    (1, 11, "2104-01-10 08:00:00", "2104-01-20 08:00:00", "emergency", "emergency room", "home", "medicare",
     "english", "married", 53),
    (1, 12, "2105-12-25 10:00:00", None, "elective", "physician referral", None, "medicare", "english", "widowed",
     55),
    (2, 21, "2103-02-01 00:00:00", "2103-02-05 12:00:00", "urgent", "emergency room", "home", "medicaid", "english",
     "single", 43),
    (2, 22, "2105-02-20 06:00:00", "2105-02-28 18:00:00", "emergency", "transfer from hospital", "died", "medicaid",
     "english", "single", 45),
    (3, 31, "2105-06-01 12:00:00", "2105-06-03 12:00:00", "elective", "physician referral", "home", "private",
     "english", "married", 34),
    (4, 41, "2101-05-01 00:00:00", "2101-05-10 00:00:00", "emergency", "emergency room", "home", "medicare",
     "english", "married", 61),
]
D_DIAGNOSES = [("486", "pneumonia, unspecified organism"), ("j189", "pneumonia, unspecified organism"),
               ("i10", "essential hypertension"), ("e119", "type 2 diabetes"), ("n179", "acute kidney failure")]
D_PROCEDURES = [("0bh17ez", "insertion of endotracheal airway"), ("9604", "insertion of endotracheal airway"),
                ("5a1955z", "mechanical ventilation"), ("02hv33z", "insertion of infusion device")]
D_LABITEMS = [(50912, "creatinine"), (51222, "hemoglobin"), (50931, "glucose")]
D_ITEMS = [(220045, "heart rate", "hr", "chartevents"), (220277, "o2 saturation pulseoxymetry", "spo2", "chartevents"),
           (223762, "temperature celsius", "temperature c", "chartevents"),
           (220210, "respiratory rate", "rr", "chartevents"),
           (226512, "admission weight (kg)", "admission weight (kg)", "chartevents"),
           (226730, "height (cm)", "height (cm)", "chartevents"),
           (220949, "dextrose 5%", "dextrose 5%", "inputevents"), (225158, "nacl 0.9%", "nacl 0.9%", "inputevents"),
           (225798, "vancomycin", "vancomycin", "inputevents"),
           (220970, "fresh frozen plasma", "ffp", "inputevents"),
           (226559, "foley", "foley", "outputevents"), (226560, "void", "void", "outputevents")]
DIAGNOSES = [(1, 11, "i10", "2104-01-10 08:00:00"), (1, 11, "486", "2104-01-10 08:00:00"),
             (1, 12, "j189", "2105-12-25 10:00:00"), (1, 12, "e119", "2105-12-25 10:00:00"),
             (2, 21, "i10", "2103-02-01 00:00:00"),
             (2, 22, "n179", "2105-02-20 06:00:00"), (2, 22, "j189", "2105-02-20 06:00:00"),
             (3, 31, "e119", "2105-06-01 12:00:00"),
             (4, 41, "i10", "2101-05-01 00:00:00"), (4, 41, "n179", "2101-05-01 00:00:00")]
PROCEDURES = [(1, 11, "0bh17ez", "2104-01-11 00:00:00"), (1, 11, "5a1955z", "2104-01-11 00:00:00"),
              (1, 11, "9604", "2104-01-15 00:00:00"), (1, 12, "02hv33z", "2105-12-26 00:00:00"),
              (2, 22, "5a1955z", "2105-02-21 00:00:00"), (4, 41, "0bh17ez", "2101-05-02 00:00:00")]
LABS = [  # subject, hadm, itemid, charttime, value
    (1, 11, 50912, "2104-01-10 10:00:00", 1.0), (1, 11, 51222, "2104-01-10 10:00:00", 12.0),
    (1, 11, 50912, "2104-01-12 10:00:00", 1.5), (1, 11, 50912, "2104-01-15 10:00:00", 1.2),
    (1, 12, 50912, "2105-12-26 06:00:00", 2.0), (1, 12, 50931, "2105-12-26 06:00:00", 150.0),
    (1, 12, 50912, "2105-12-30 06:00:00", 2.5),
    (2, 22, 50912, "2105-02-21 06:00:00", 1.5), (2, 22, 51222, "2105-02-21 06:00:00", 9.0),
    (3, 31, 50931, "2105-06-02 06:00:00", 110.0), (4, 41, 50912, "2101-05-02 06:00:00", 3.0)]
PRESCRIPTIONS = [  # subject, hadm, starttime, drug, dose, unit, route
    (1, 11, "2104-01-10 09:00:00", "aspirin", "81", "mg", "po"),
    (1, 11, "2104-01-10 09:00:00", "heparin", "5000", "unit", "sc"),
    (1, 11, "2104-01-12 09:00:00", "aspirin", "81", "mg", "po"),
    (1, 11, "2104-01-14 09:00:00", "furosemide", "40", "mg", "iv"),
    (1, 12, "2105-12-25 12:00:00", "aspirin", "162", "mg", "po"),
    (1, 12, "2105-12-30 08:00:00", "vancomycin", "1000", "mg", "iv"),
    (2, 21, "2103-02-02 10:00:00", "furosemide", "20", "mg", "po"),
    (2, 22, "2105-02-21 10:00:00", "heparin", "5000", "unit", "sc"),
    (2, 22, "2105-02-21 10:00:00", "aspirin", "81", "mg", "po"),
    (3, 31, "2105-06-02 08:00:00", "metformin", "500", "mg", "po"),
    (4, 41, "2101-05-02 08:00:00", "furosemide", "40", "mg", "iv")]
MICRO = [  # subject, hadm, charttime, specimen, test, organism
    (1, 11, "2104-01-11 08:00:00", "blood culture", "blood culture, routine", None),
    (1, 11, "2104-01-13 08:00:00", "sputum", "respiratory culture", "staph aureus"),
    (1, 11, "2104-01-13 08:00:00", "sputum", "gram stain", None),
    (1, 11, "2104-01-15 08:00:00", "blood culture", "blood culture, routine", "e. coli"),
    (1, 12, "2105-12-27 08:00:00", "urine", "urine culture", "e. coli"),
    (2, 22, "2105-02-22 08:00:00", "sputum", "respiratory culture", "klebsiella"),
    (3, 31, "2105-06-02 09:00:00", "urine", "urine culture", None)]
ICUSTAYS = [(1, 11, 111, "micu", "micu", "2104-01-11 00:00:00", "2104-01-13 12:00:00"),
            (1, 11, 112, "sicu", "sicu", "2104-01-15 00:00:00", "2104-01-16 00:00:00"),
            (1, 12, 121, "micu", "micu", "2105-12-30 23:59:00", None),
            (2, 22, 221, "ccu", "ccu", "2105-02-21 00:00:00", "2105-02-24 00:00:00")]
CHART = [  # subject, hadm, stay, charttime, itemid, value, unit
    (1, 11, 111, "2104-01-11 00:30:00", 226512, 70.0, "kg"), (1, 11, 111, "2104-01-11 00:30:00", 226730, 165.0, "cm"),
    (1, 11, 111, "2104-01-11 01:00:00", 220045, 110.0, "bpm"), (1, 11, 111, "2104-01-11 01:00:00", 220277, 97.0, "%"),
    (1, 11, 111, "2104-01-11 01:00:00", 223762, 38.5, "°c"), (1, 11, 111, "2104-01-11 05:00:00", 220045, 90.0, "bpm"),
    (1, 11, 111, "2104-01-12 01:00:00", 220045, 80.0, "bpm"), (1, 11, 111, "2104-01-12 01:00:00", 223762, 37.0, "°c"),
    (1, 11, 112, "2104-01-15 00:30:00", 226512, 68.5, "kg"), (1, 11, 112, "2104-01-15 01:00:00", 220045, 70.0, "bpm"),
    (1, 12, 121, "2105-12-31 00:30:00", 226512, 66.0, "kg"), (1, 12, 121, "2105-12-31 01:00:00", 220045, 95.0, "bpm"),
    (2, 22, 221, "2105-02-21 00:30:00", 226512, 80.0, "kg"), (2, 22, 221, "2105-02-21 01:00:00", 220045, 130.0, "bpm"),
    (2, 22, 221, "2105-02-21 01:00:00", 220210, 20.0, "insp/min"),
    (2, 22, 221, "2105-02-22 01:00:00", 220045, 120.0, "bpm")]
INPUTS = [(1, 11, 111, "2104-01-11 02:00:00", 220949, 100.0), (1, 11, 111, "2104-01-11 02:00:00", 225158, 250.0),
          (1, 11, 111, "2104-01-12 02:00:00", 220949, 50.0), (1, 12, 121, "2105-12-31 02:00:00", 225158, 500.0),
          (1, 12, 121, "2105-12-31 04:00:00", 225798, 200.0), (2, 22, 221, "2105-02-21 02:00:00", 225158, 1000.0),
          (2, 22, 221, "2105-02-22 02:00:00", 220970, 300.0)]
OUTPUTS = [(1, 11, 111, "2104-01-11 06:00:00", 226559, 300.0), (1, 11, 111, "2104-01-12 06:00:00", 226559, 200.0),
           (1, 11, 111, "2104-01-12 18:00:00", 226560, 100.0), (1, 12, 121, "2105-12-31 06:00:00", 226559, 400.0),
           (2, 22, 221, "2105-02-21 06:00:00", 226559, 500.0)]
TRANSFERS = [  # subject, hadm, transfer_id, eventtype, careunit, intime, outtime
    (1, 11, 1001, "ed", "emergency department", "2104-01-10 06:00:00", "2104-01-10 08:00:00"),
    (1, 11, 1002, "admit", "medicine", "2104-01-10 08:00:00", "2104-01-11 00:00:00"),
    (1, 11, 1003, "transfer", "micu", "2104-01-11 00:00:00", "2104-01-13 12:00:00"),
    (1, 11, 1004, "transfer", "medicine", "2104-01-13 12:00:00", "2104-01-15 00:00:00"),
    (1, 11, 1005, "transfer", "sicu", "2104-01-15 00:00:00", "2104-01-16 00:00:00"),
    (1, 11, 1006, "discharge", None, "2104-01-20 08:00:00", None),
    (1, 12, 1007, "admit", "medicine", "2105-12-25 10:00:00", "2105-12-30 23:59:00"),
    (1, 12, 1008, "transfer", "micu", "2105-12-30 23:59:00", None),
    (2, 21, 1009, "admit", "medicine", "2103-02-01 00:00:00", "2103-02-05 12:00:00"),
    (2, 22, 1010, "admit", "cardiology", "2105-02-20 06:00:00", "2105-02-21 00:00:00"),
    (2, 22, 1011, "transfer", "ccu", "2105-02-21 00:00:00", "2105-02-24 00:00:00"),
    (2, 22, 1012, "transfer", "cardiology", "2105-02-24 00:00:00", "2105-02-28 18:00:00"),
    (3, 31, 1013, "admit", "medicine", "2105-06-01 12:00:00", "2105-06-03 12:00:00"),
    (4, 41, 1014, "admit", "medicine", "2101-05-01 00:00:00", "2101-05-10 00:00:00")]
COSTS = {"diagnoses_icd": {"i10": 10.0, "486": 20.0, "j189": 21.0, "e119": 15.0, "n179": 30.0},
         "procedures_icd": {"0bh17ez": 100.0, "9604": 101.0, "5a1955z": 200.0, "02hv33z": 300.0},
         "labevents": {50912: 5.0, 51222: 6.0, 50931: 7.0},
         "prescriptions": {"aspirin": 1.0, "heparin": 2.0, "furosemide": 3.0, "vancomycin": 4.0, "metformin": 5.0}}


def _insert(con: sqlite3.Connection, table: str, rows: list[tuple]) -> None:
    names = ddl.BY_NAME[table].names
    con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(names))})",
                    [(i, *r) for i, r in enumerate(rows)])


def _costs() -> list[tuple]:
    out = []
    for table, rows, key, time in (("diagnoses_icd", DIAGNOSES, 2, 3), ("procedures_icd", PROCEDURES, 2, 3),
                                   ("labevents", LABS, 2, 3), ("prescriptions", PRESCRIPTIONS, 3, 2)):
        for i, r in enumerate(rows):
            out.append((r[0], r[1], table, i, r[time], COSTS[table][r[key]]))
    return out


def build_table_db(path: Path) -> Path:
    con = sqlite3.connect(path)
    con.execute("PRAGMA foreign_keys = ON")
    for t in (*ddl.TABLES, ddl.ANSWER_TABLE):
        con.execute(ddl.create_sql(t, "sqlite"))
    _insert(con, "patients", PATIENTS)
    _insert(con, "admissions", ADMISSIONS)
    _insert(con, "d_icd_diagnoses", D_DIAGNOSES)
    _insert(con, "d_icd_procedures", D_PROCEDURES)
    _insert(con, "d_labitems", D_LABITEMS)
    _insert(con, "d_items", D_ITEMS)
    _insert(con, "diagnoses_icd", DIAGNOSES)
    _insert(con, "procedures_icd", PROCEDURES)
    _insert(con, "labevents", [(s, h, i, t, v, "mg/dl") for s, h, i, t, v in LABS])
    _insert(con, "prescriptions", [(s, h, t, None, d, x, u, r) for s, h, t, d, x, u, r in PRESCRIPTIONS])
    _insert(con, "cost", _costs())
    _insert(con, "icustays", ICUSTAYS)
    _insert(con, "chartevents", CHART)
    _insert(con, "inputevents", INPUTS)
    _insert(con, "outputevents", OUTPUTS)
    _insert(con, "microbiologyevents", MICRO)
    _insert(con, "transfers", TRANSFERS)
    for t in (*ddl.TABLES, ddl.ANSWER_TABLE):
        for stmt in ddl.index_sql(t):
            con.execute(stmt)
    con.commit()
    con.close()
    return path
