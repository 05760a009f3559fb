"""Hand-checked answers of every table template on the hand-built database ``tests.ehrxqa.table_db``.

Each expected answer is worked out by hand from the rows in table_db (the comment says how), never from the
template code; the gold SQL and the same SQL run through the NeuralSQL executor must both give it. Lists are
compared as multisets; floats to 1e-6. Now = 2105-12-31 23:59:00.
"""

from __future__ import annotations

import pytest

from ehrxqa_pipeline.questions.ehrxqa import TimeFilter as T
from ehrxqa_pipeline.questions.ehrxqa import WithinFilter as W
from ehrxqa_pipeline.questions.ehrxqa.table_templates import TABLE_TEMPLATES

P1, P2, P3, P4 = ({"patient_id": i} for i in (1, 2, 3, 4))
FIRST, LAST, SECOND, SECOND_LAST = ({"exact1": e} for e in ("first", "last", "second", "second to last"))
HOSP_FIRST, HOSP_LAST, HOSP_CUR = ({"global1": T(f"rel-hosp-{w}")} for w in ("first", "last", "cur"))
Y2104, Y2105 = {"global1": T("abs-year-in", "2104")}, {"global1": T("abs-year-in", "2105")}
PNEU, HTN, DM, AKF = ("pneumonia, unspecified organism", "essential hypertension", "type 2 diabetes",
                      "acute kidney failure")
AIRWAY, VENT, INFUSION = "insertion of endotracheal airway", "mechanical ventilation", "insertion of infusion device"
NOW_MINUS_12_25 = 6 + 839 / 1440  # 2105-12-25 10:00 -> now: 6 days 13:59

CASES = [
    # -- TABLE-NONE ---------------------------------------------------------------------------------------
    (0, {"drug_name": "furosemide"}, "what is the intake method of furosemide?", ["iv", "po"]),  # p1/p4 iv, p2 po
    (1, {"procedure_name": AIRWAY}, None, [100.0, 101.0]),  # two codes 0bh17ez (100), 9604 (101)
    (2, {"lab_name": "creatinine"}, None, [5.0]),
    (3, {"drug_name": "heparin"}, None, [2.0]),
    (4, {"diagnosis_name": PNEU}, "what is the cost of diagnosing pneumonia, unspecified organism?", [20.0, 21.0]),
    (5, {"abbreviation": "ffp"}, "what does ffp stand for?", ["fresh frozen plasma"]),
    # -- TABLE-SINGLE: demographics, stays ----------------------------------------------------------------
    (6, P2, "what is the gender of patient 2?", ["m"]),
    (7, P3, None, ["2070-07-07 00:00:00"]),
    (8, {**P1, **FIRST}, "what was the first length of hospital stay of patient 1?", [10.0]),  # 11; 12 is open
    (8, {**P2, **LAST}, None, [8.5]),  # 22: 02-20 06:00 -> 02-28 18:00
    (65, {**P1, **FIRST}, None, [2.5]),  # stay 111: 01-11 00:00 -> 01-13 12:00
    (65, {**P1, **LAST}, None, [1.0]),  # last finished stay 112 (121 is open)
    # weight in visit 11: 70.0 (01-11), 68.5 (01-15): last - first
    (9, {**P1, "exact2": "last", "global2": T("rel-hosp-first"), **FIRST, **HOSP_FIRST},
     "what is the change in the weight of patient 1 from the last value measured on the first hospital visit "
     "compared to the first value measured on the first hospital visit?", [-1.5]),
    # creatinine in visit 11: 1.0, 1.5, 1.2 -> last 1.2 - first 1.0
    (10, {**P1, "lab_name": "creatinine", "exact2": "last", "global2": T("rel-hosp-first"), **FIRST, **HOSP_FIRST},
     None, [0.2]),
    (11, {**P2, "vital_name": "heart rate", "exact2": "last", **FIRST}, None, [-10.0]),  # 120 - 130
    # creatinine: last of the current visit 2.5 > last of the first visit 1.2
    (12, {**P1, "lab_name": "creatinine", "exact2": "last", "global2": T("rel-hosp-cur"), "comparison": "greater",
          **LAST, **HOSP_FIRST},
     "is the value of creatinine of patient 1 last measured on the current hospital visit greater than the last "
     "value measured on the first hospital visit?", [1]),
    (12, {**P1, "lab_name": "creatinine", "exact2": "last", "global2": T("rel-hosp-cur"), "comparison": "less",
          **LAST, **HOSP_FIRST}, None, [0]),
    # heart rate: first of the current ICU stay 121 (95) < first of the first ICU stay 111 (110)
    (13, {**P1, "vital_name": "heart rate", "exact2": "first", "global2": T("rel-icu-cur"), "comparison": "less",
          **FIRST, "global1": T("rel-icu-first")}, None, [1]),
    (14, {**P1, **HOSP_CUR}, "what is the age of patient 1 on the current hospital visit?", [55]),
    (14, {**P1, **HOSP_FIRST}, "what was the age of patient 1 on the first hospital visit?", [53]),
    (15, {**P3, **HOSP_LAST}, None, ["private"]),
    (16, {**P2, **HOSP_FIRST}, None, ["single"]),
    # age 53 = admission 11 only; its creatinine values 1.0, 1.2, 1.5: 1.2 is second of 3 -> (2-1)/(3-1)
    (17, {**P1, "lab_name": "creatinine", "lab_value": 1.2, **HOSP_FIRST},
     "what percentile is the value of 1.2 in a creatinine lab test among patients of the same age as patient 1 on "
     "the first hospital visit?", [0.5]),
    # -- TABLE-SINGLE: time since ... on the current visit -----------------------------------------------
    (18, {**P1, "unit_count": "days"}, None, [NOW_MINUS_12_25]),  # admitted 2105-12-25 10:00
    (19, {**P1, "unit_count": "hours"}, "how many hours have passed since patient 1 was admitted to the icu "
                                        "currently?", [24.0]),  # stay 121 from 2105-12-30 23:59
    (20, {**P1, "careunit": "micu", "unit_count": "days", **FIRST}, None, [1.0]),  # transfer 1008 12-30 23:59
    (20, {**P1, "careunit": "medicine", "unit_count": "hours", **FIRST}, None, [24 * NOW_MINUS_12_25]),  # 1007
    (24, {**P1, "diagnosis_name": DM, "unit_count": "days", **FIRST}, None, [NOW_MINUS_12_25]),
    (25, {**P1, "drug_name": "vancomycin", "unit_count": "hours", **FIRST}, None, [24 + 15 + 59 / 60]),  # 12-30 08:00
    (26, {**P1, "lab_name": "creatinine", "unit_count": "days", **LAST}, None, [1 + 1079 / 1440]),  # 12-30 06:00
    (27, {**P1, "intake_name": "nacl 0.9%", "unit_count": "hours", **FIRST}, None, [21 + 59 / 60]),  # 12-31 02:00
    # -- TABLE-SINGLE: the [exact] event ------------------------------------------------------------------
    (28, {**P1, **FIRST}, "what was the first hospital admission type of patient 1?", ["emergency"]),
    (28, {**P1, **LAST}, None, ["elective"]),
    (30, {**P2, **LAST, **HOSP_LAST}, None, ["cardiology"]),  # visit 22: cardiology, ccu, cardiology
    (30, {**P2, **SECOND, **HOSP_LAST}, None, ["ccu"]),
    (31, {**P1, **FIRST}, None, [165.0]),
    (32, {**P1, **LAST, **Y2104}, None, [68.5]),
    (32, {**P1, **LAST}, None, [66.0]),
    (33, {**P1, **FIRST}, "what was the name of the diagnosis that patient 1 first received?", [HTN, PNEU]),  # tie
    (33, {**P1, **LAST}, None, [PNEU, DM]),
    (34, {**P1, **FIRST, **HOSP_FIRST}, None, [AIRWAY, VENT]),  # both at 2104-01-11 00:00
    (34, {**P1, **SECOND, **HOSP_FIRST}, None, [AIRWAY]),  # 9604 at 01-15
    (35, {**P1, "drug_route": "iv", **FIRST}, None, ["furosemide"]),  # iv: furosemide 2104, vancomycin 2105
    (36, {**P1, **FIRST}, None, ["aspirin", "heparin"]),  # both 2104-01-10 09:00
    (36, {**P1, **SECOND}, None, ["aspirin"]),  # 2104-01-12
    (39, {**P1, "drug_name": "aspirin", **LAST}, None, ["162"]),
    (39, {**P1, "drug_name": "aspirin", **FIRST}, None, ["81"]),
    (43, {**P1, "lab_name": "creatinine", **SECOND}, None, [1.5]),  # 1.0, 1.5, 1.2, 2.0, 2.5 by time
    (43, {**P1, "lab_name": "creatinine", **SECOND_LAST}, None, [2.0]),
    (44, {**P1, **FIRST}, None, ["creatinine", "hemoglobin"]),
    (44, {**P3, **FIRST}, None, ["glucose"]),
    # first sputum test (01-13): respiratory culture found staph aureus, gram stain nothing
    (48, {**P1, "culture_name": "sputum", **FIRST}, None, ["staph aureus"]),
    (48, {**P1, "culture_name": "blood culture", **FIRST}, None, []),  # 01-11: no organism
    (48, {**P1, "culture_name": "blood culture", **LAST}, None, ["e. coli"]),
    (49, {**P1, "test_name": "urine culture", **FIRST}, None, ["e. coli"]),
    (50, {**P1, **FIRST}, None, ["blood culture"]),
    (50, {**P1, **SECOND}, None, ["sputum"]),
    (51, {**P1, **SECOND}, None, ["gram stain", "respiratory culture"]),
    (52, {**P1, **FIRST}, None, ["dextrose 5%", "nacl 0.9%"]),  # both 2104-01-11 02:00
    (55, {**P1, **LAST, **HOSP_FIRST}, None, ["void"]),  # 2104-01-12 18:00
    (59, {**P1, "vital_name": "heart rate", **FIRST, "global1": T("rel-icu-last")}, None, [70.0]),  # stay 112
    # -- TABLE-SINGLE: pairs, totals, aggregates ----------------------------------------------------------
    # hypertension 2104-01-10 08:00 -> drugs until 01-12 08:00: aspirin, heparin (01-10 09:00)
    (37, {**P1, "diagnosis_name": HTN, "within": W("within-n_day", 2)},
     "what was the name of the drug that patient 1 was prescribed within 2 day after having been diagnosed with "
     "essential hypertension?", ["aspirin", "heparin"]),
    (37, {**P1, "diagnosis_name": HTN, "within": W("within-hosp")}, None, ["aspirin", "heparin", "furosemide"]),
    # ventilation 2104-01-11 00:00 -> drugs until 01-13 00:00: aspirin 01-12
    (38, {**P1, "procedure_name": VENT, "within": W("within-n_day", 2)}, None, ["aspirin"]),
    (40, {**P1, "drug_name": "aspirin"}, None, [324.0]),  # 81 + 81 + 162
    (40, {**P1, "drug_name": "aspirin", **Y2104}, None, [162.0]),
    (41, {**P1, "n_times": "two times"}, None, []),  # aspirin 3, others once
    (41, {**P1, "n_times": "two times", **Y2104}, None, ["aspirin"]),
    (41, {**P1, "n_times": "two or more times"}, None, ["aspirin"]),
    # current visit: aspirin, vancomycin; first visit: aspirin, heparin, furosemide
    (42, {**P1, "global2": T("rel-hosp-cur"), **HOSP_FIRST},
     "what is the new prescription of patient 1 on the current hospital visit compared to the prescription on the "
     "first hospital visit?", ["vancomycin"]),
    (45, {**P1, "lab_name": "creatinine", "agg_function": "maximum", **HOSP_FIRST},
     "what was the maximum creatinine value of patient 1 on the first hospital visit?", [1.5]),
    (45, {**P1, "lab_name": "creatinine", "agg_function": "average"}, None, [8.2 / 5]),
    (53, {**P1, "intake_name": "dextrose 5%"}, None, [150.0]),  # 100 + 50
    (54, {**P1, **HOSP_FIRST}, None, [400.0]),  # 100 + 250 + 50
    (54, P1, None, [1100.0]),  # + 500 + 200
    (56, {**P1, "output_name": "foley"}, None, [900.0]),  # 300 + 200 + 400
    (57, P2, None, [500.0]),
    (58, {**P1, **HOSP_FIRST}, None, [-200.0]),  # 400 - 600
    (58, P2, None, [800.0]),  # 1300 - 500
    (60, {**P2, "vital_name": "heart rate", "agg_function": "minimum"}, None, [120.0]),
    (60, {**P1, "vital_name": "heart rate", "agg_function": "average", **Y2104}, None, [87.5]),  # 110 90 80 70
    (61, {**P1, **HOSP_FIRST}, "what was the total hospital cost of patient 1 on the first hospital visit?", [459.0]),
    (61, P1, "what is the total hospital cost of patient 1?", [817.0]),  # 459 + 358
    (61, {**P2, **HOSP_LAST}, None, [265.0]),
    # -- TABLE-SINGLE: when -------------------------------------------------------------------------------
    (62, {**P1, **FIRST}, None, ["2104-01-10 08:00:00"]),
    (62, {**P1, **LAST}, None, ["2105-12-25 10:00:00"]),
    (63, {**P2, "admission_route": "emergency room", **FIRST}, None, ["2103-02-01 00:00:00"]),
    (63, {**P1, "admission_route": "physician referral", **FIRST}, None, ["2105-12-25 10:00:00"]),
    (64, {**P2, **LAST}, None, ["2105-02-28 18:00:00"]),
    (64, {**P1, **LAST}, None, ["2104-01-20 08:00:00"]),  # the current visit has no discharge
    (66, {**P1, "diagnosis_name": PNEU, **LAST}, None, ["2105-12-25 10:00:00"]),  # j189
    (66, {**P1, "diagnosis_name": PNEU, **FIRST}, None, ["2104-01-10 08:00:00"]),  # 486
    (67, {**P1, **LAST, **HOSP_FIRST}, None, ["2104-01-15 00:00:00"]),
    (68, {**P1, "procedure_name": AIRWAY, **LAST}, None, ["2104-01-15 00:00:00"]),  # 9604
    (69, {**P2, **FIRST}, None, ["2103-02-02 10:00:00"]),
    (70, {**P1, "drug_name": "furosemide", **FIRST}, None, ["2104-01-14 09:00:00"]),
    (71, {**P1, "drug_name1": "aspirin", "drug_name2": "heparin", "within": W("within-same"), **FIRST},
     "when was the first time that patient 1 was prescribed aspirin and heparin at the same time?",
     ["2104-01-10 09:00:00"]),
    # same visit: aspirin of visit 11 (01-10, 01-12) has heparin there; visit 12 has none
    (71, {**P1, "drug_name1": "aspirin", "drug_name2": "heparin", "within": W("within-hosp"), **LAST}, None,
     ["2104-01-12 09:00:00"]),
    (72, {**P1, "drug_route": "po", **LAST}, None, ["2105-12-25 12:00:00"]),
    (73, {**P3, **FIRST}, None, ["2105-06-02 06:00:00"]),
    (74, {**P1, "lab_name": "creatinine", **LAST, **HOSP_FIRST}, None, ["2104-01-15 10:00:00"]),
    (75, {**P1, "lab_name": "creatinine", "sort": "maximum", **FIRST, **HOSP_FIRST},
     "when was the first time that patient 1 had the maximum value of creatinine on the first hospital visit?",
     ["2104-01-12 10:00:00"]),  # 1.5
    (75, {**P1, "lab_name": "creatinine", "sort": "minimum", **FIRST}, None, ["2104-01-10 10:00:00"]),  # 1.0
    (76, {**P1, **LAST}, None, ["2105-12-27 08:00:00"]),
    (77, {**P1, "culture_name": "blood culture", **FIRST}, None, ["2104-01-11 08:00:00"]),
    (78, {**P2, "test_name": "respiratory culture", **LAST}, "when was patient 2's last respiratory culture test?",
     ["2105-02-22 08:00:00"]),
    (79, {**P1, "intake_name": "nacl 0.9%", **LAST}, None, ["2105-12-31 02:00:00"]),
    (80, {**P2, **FIRST}, None, ["2105-02-21 02:00:00"]),
    (81, {**P1, "output_name": "void", **FIRST}, None, ["2104-01-12 18:00:00"]),
    (82, {**P1, "vital_name": "temperature celsius", **LAST}, None, ["2104-01-12 01:00:00"]),
    # heart rate of p1: 110 (01-11 01:00), 90 (01-11 05:00), 80, 70, 95
    (83, {**P1, "vital_name": "heart rate", "comparison": "less", "vital_value": 100, **FIRST},
     "when was the first time that the heart rate of patient 1 was less than 100?", ["2104-01-11 05:00:00"]),
    (83, {**P1, "vital_name": "heart rate", "comparison": "greater", "vital_value": 100, **LAST}, None,
     ["2104-01-11 01:00:00"]),
    (84, {**P2, "vital_name": "heart rate", "sort": "minimum", **FIRST}, None, ["2105-02-22 01:00:00"]),  # 120
    # -- TABLE-SINGLE: has -------------------------------------------------------------------------------
    (86, {**P1, **Y2105}, "had patient 1 been admitted to the hospital in 2105?", [1]),
    (86, {**P1, "global1": T("abs-year-in", "2103")}, "had patient 1 been admitted to the hospital in 2103?", [0]),
    (87, P1, None, [1]),  # visit 11 from the emergency room
    (87, {**P1, "global1": T("rel-year-this")}, None, [0]),  # visit 12: physician referral
    (88, P3, None, [0]),
    (88, P1, None, [1]),
    (89, {**P1, "procedure_name": VENT, **Y2105}, None, [0]),
    (89, {**P2, "procedure_name": VENT, **Y2105}, None, [1]),
    (91, {**P3, **HOSP_FIRST}, None, [1]),
    (91, {**P3, **Y2104}, None, [0]),
    (92, {**P1, "diagnosis_name": DM, **HOSP_FIRST}, None, [0]),
    (92, {**P1, "diagnosis_name": DM, **HOSP_CUR}, None, [1]),
    (93, {**P3, "drug_name1": "aspirin", "drug_name2": "heparin", "drug_name3": "metformin"},
     "has patient 3 been prescribed aspirin, heparin, or metformin?", [1]),
    (93, {**P3, "drug_name1": "aspirin", "drug_name2": "heparin", "drug_name3": "furosemide"}, None, [0]),
    (94, {**P3, **Y2104}, None, [0]),
    (94, P3, None, [1]),
    (95, {**P2, "drug_name": "furosemide", **HOSP_LAST}, None, [0]),
    (95, {**P2, "drug_name": "furosemide", **HOSP_FIRST}, None, [1]),
    (96, P4, None, [1]),
    (96, {**P4, "global1": T("abs-year-since", "2102")}, None, [0]),
    (97, {**P1, "lab_name": "glucose", **HOSP_FIRST}, None, [0]),
    (97, {**P1, "lab_name": "glucose", **HOSP_CUR}, None, [1]),
    (99, P4, None, [0]),
    (99, P3, None, [1]),
    (100, {**P1, "culture_name": "urine", **HOSP_FIRST}, None, [0]),
    (100, {**P1, "culture_name": "urine"}, None, [1]),
    (101, {**P2, "test_name": "urine culture"}, None, [0]),
    (101, {**P1, "test_name": "urine culture"}, None, [1]),
    (102, {**P1, "culture_name": "blood culture", **FIRST}, None, [0]),  # 01-11: none found
    (102, {**P1, "culture_name": "blood culture", **LAST}, None, [1]),  # 01-15: e. coli
    (103, {**P3, "test_name": "urine culture", **FIRST}, None, [0]),
    (103, {**P1, "test_name": "urine culture", **FIRST}, None, [1]),
    (104, {**P1, "intake_name": "vancomycin", **HOSP_FIRST}, None, [0]),
    (104, {**P1, "intake_name": "vancomycin", "global1": T("rel-icu-cur")}, None, [1]),
    (105, {**P2, "output_name": "foley"}, None, [1]),
    (105, {**P2, "output_name": "void"}, None, [0]),
    (106, {**P1, "vital_name": "heart rate", "comparison": "greater", "vital_value": 100},
     "has the heart rate of patient 1 been ever greater than 100?", [1]),
    (106, {**P1, "vital_name": "heart rate", "comparison": "greater", "vital_value": 120}, None, [0]),
    (106, {**P2, "vital_name": "heart rate", "comparison": "less", "vital_value": 125}, None, [1]),
    # normal heart rate 60-100: stay 112 (70) yes; stay 111 (110, 90, 80) no
    (107, {**P1, "vital_name": "heart rate", "global1": T("rel-icu-last")},
     "had the heart rate of patient 1 been normal on the last icu visit?", [1]),
    (107, {**P1, "vital_name": "heart rate", "global1": T("rel-icu-first")}, None, [0]),
    (107, {**P1, "vital_name": "temperature celsius", "global1": T("rel-icu-first")}, None, [0]),  # 38.5 > 38.1
    (107, {**P2, "vital_name": "respiratory rate"}, None, [0]),  # 20 > 18
    # -- TABLE-SINGLE: lists and counts -------------------------------------------------------------------
    (108, P1, None, ["2104-01-10 08:00:00", "2105-12-25 10:00:00"]),
    (108, {**P1, **Y2105}, None, ["2105-12-25 10:00:00"]),
    (109, {**P1, "lab_name": "creatinine", "unit_average": "daily", "agg_function": "maximum"}, None,
     [1.0, 1.5, 1.2, 2.0, 2.5]),
    (109, {**P1, "lab_name": "creatinine", "unit_average": "yearly", "agg_function": "average"},
     "list the yearly average creatinine lab value of patient 1.", [3.7 / 3, 2.25]),
    (110, {**P1, "unit_average": "monthly", "agg_function": "minimum"}, None, [68.5, 66.0]),
    (111, {**P1, "intake_name": "nacl 0.9%", "unit_average": "yearly", "agg_function": "maximum"}, None,
     [250.0, 500.0]),
    (112, {**P1, "output_name": "foley", "unit_average": "daily", "agg_function": "average", **HOSP_FIRST}, None,
     [300.0, 200.0]),
    (113, {**P2, "vital_name": "heart rate", "unit_average": "daily", "agg_function": "maximum"}, None,
     [130.0, 120.0]),
    (114, P1, None, [2]),
    (114, {**P1, **Y2104}, None, [1]),
    (115, P1, None, [3]),
    (115, {**P1, **HOSP_FIRST}, None, [2]),
    (116, {**P1, "procedure_name": AIRWAY}, None, [2]),  # 0bh17ez + 9604
    (117, P1, None, [4]),  # aspirin, heparin, furosemide, vancomycin
    (117, {**P1, **HOSP_FIRST}, None, [3]),
    (118, {**P1, "drug_name": "aspirin"}, None, [3]),
    (119, {**P1, "lab_name": "creatinine", **Y2105}, None, [2]),
    (120, {**P1, "intake_name": "dextrose 5%"}, None, [2]),
    (121, {**P1, "output_name": "foley", **HOSP_FIRST}, None, [2]),
    (90, {**P1, "n_times": "two times"}, None, [AIRWAY]),  # by title: 0bh17ez + 9604
    # -- TABLE-GROUP ----------------------------------------------------------------------------------------
    (122, {}, "count the number of current patients.", [1]),
    (123, {"age_group": "50s"}, None, [1]),  # visit 12, age 55
    (123, {"age_group": "30s"}, None, [0]),
    # hypertension first diagnosed: p4 2101-05-01 (died after 396 days), p2 2103-02-01 (died after 759 days),
    # p1 2104-01-10 (alive; 721 days ago, not observable for 2 years)
    (124, {"diagnosis_name": HTN, "n_survival_period": "one year"},
     "what is the one year survival rate of patients diagnosed with essential hypertension?", [100.0]),
    (124, {"diagnosis_name": HTN, "n_survival_period": "two year"}, None, [50.0]),
    (125, {"diagnosis_name": HTN, "drug_name": "furosemide", "n_survival_period": "two year"}, None, [50.0]),
    (125, {"diagnosis_name": HTN, "drug_name": "furosemide", "n_survival_period": "one year"}, None, [100.0]),
    # 2 years: kidney failure p4 dead (100); hypertension p4 dead, p2 alive (50); pneumonia not observable
    (126, {"n_rank": "three", "n_survival_period": "two year"},
     "what are the top three diagnoses that have the highest two year mortality rate?", [AKF, HTN]),
    (127, {"procedure_name": AIRWAY, "agg_function": "average"}, None, [303.5]),  # visits 11 (459), 41 (148)
    (127, {"procedure_name": AIRWAY, "agg_function": "maximum"},
     "what is the maximum total hospital cost that involves a procedure named insertion of endotracheal airway?",
     [459.0]),
    (128, {"lab_name": "glucose", "agg_function": "average"}, None, [192.5]),  # visits 12 (358), 31 (27)
    (129, {"drug_name": "heparin", "agg_function": "maximum"}, None, [459.0]),  # 11, 22
    (130, {"diagnosis_name": PNEU, "agg_function": "average"}, None, [1082 / 3]),  # 459, 358, 265
    (130, {"diagnosis_name": PNEU, "agg_function": "average", **Y2105}, None, [311.5]),  # 358, 265 charged in 2105
    (131, {"diagnosis_name": PNEU}, None, [1, 2]),
    (131, {"diagnosis_name": PNEU, **Y2104}, None, [1]),
    # pneumonia visits per year: 2104: 11; 2105: 12, 22
    (132, {"diagnosis_name": PNEU, "agg_function": "average", "unit_average": "yearly"},
     "what is the average yearly number of patient records diagnosed with pneumonia, unspecified organism?", [1.5]),
    (132, {"diagnosis_name": PNEU, "agg_function": "maximum", "unit_average": "yearly"}, None, [2]),
    # kidney failure first: p2 2105-02-20 (died 2105-03-01), p4 2101-05-01 (died 2102-06-01)
    (133, {"diagnosis_name": AKF, "within": W("within-n_day", 10)}, None, [1]),
    (133, {"diagnosis_name": AKF, "within": W("within-n_month", 14)}, None, [2]),
    (133, {"diagnosis_name": AKF, "within": W("within-month")}, None, [0]),
    # hypertension first: p1 2104-01-10 (back 2105-12-25), p2 2103-02-01 (back 2105-02-20), p4 (never back)
    (134, {"diagnosis_name": HTN, "within": W("within-n_month", 12)}, None, [3]),
    (134, {"diagnosis_name": HTN, "within": W("within-n_month", 24)},
     "count the number of patients who did not come back to the hospital within 24 month after diagnosed with "
     "essential hypertension.", [2]),
    (134, {"diagnosis_name": HTN, "within": W("within-n_month", 24), **Y2104}, None, [0]),
    (135, Y2105, None, [3]),
    (135, {}, None, [4]),
    (136, Y2105, None, [2]),  # 22 and 31 (12 is open)
    (138, {"careunit": "micu"}, None, [1]),
    (138, {"careunit": "medicine"}, None, [4]),
    # airway p1 2104-01-11 -> pneumonia p1 2105-12-25 (23.5 months)
    (139, {"procedure_name": AIRWAY, "diagnosis_name": PNEU, "within": W("within-n_month", 24)}, None, [1]),
    (139, {"procedure_name": AIRWAY, "diagnosis_name": PNEU, "within": W("within-n_month", 12)}, None, [0]),
    # hypertension p2 2103-02-01 -> kidney failure 2105-02-20 06:00 (p4: same time, not after)
    (140, {"diagnosis_name1": HTN, "diagnosis_name2": AKF, "within": W("within-n_month", 25)},
     "count the number of patients who were diagnosed with acute kidney failure within 25 month after having been "
     "diagnosed with essential hypertension.", [1]),
    (140, {"diagnosis_name1": HTN, "diagnosis_name2": AKF, "within": W("within-n_month", 24)}, None, [0]),
    (141, {"diagnosis_name": DM}, None, [2]),
    (141, {"diagnosis_name": DM, "global1": T("rel-year-last")}, None, [0]),
    (142, {"procedure_name": VENT}, None, [2]),
    (143, {"procedure_name": AIRWAY, "n_times": "two or more times"}, None, [1]),  # p1 twice, p4 once
    (143, {"procedure_name": AIRWAY, "n_times": "two or more times", "global1": T("abs-year-in", "2101")},
     None, [0]),
    # ventilation 01-11 00:00 -> airway (9604) 01-15, same visit 11
    (144, {"procedure_name1": VENT, "procedure_name2": AIRWAY, "within": W("within-hosp")}, None, [1]),
    (144, {"procedure_name1": VENT, "procedure_name2": AIRWAY, "within": W("within-n_day", 2)}, None, [0]),
    (145, {"diagnosis_name": DM, "procedure_name": INFUSION, "within": W("within-hosp")}, None, [1]),
    (146, {"procedure_name": AIRWAY}, None, [3]),
    (146, {"procedure_name": AIRWAY, **Y2104}, None, [2]),
    (147, {"drug_name": "aspirin"}, None, [2]),
    (148, {"drug_name": "aspirin"}, "count the number of aspirin prescription cases.", [4]),
    # infusion device 2105-12-26 00:00 -> vancomycin 12-30 08:00 (4 days 8 hours)
    (149, {"procedure_name": INFUSION, "drug_name": "vancomycin", "within": W("within-n_day", 7)}, None, [1]),
    (149, {"procedure_name": INFUSION, "drug_name": "vancomycin", "within": W("within-n_day", 4)}, None, [0]),
    # hypertension -> furosemide in the same visit: p1 (11), p2 (21), p4 (41)
    (150, {"diagnosis_name": HTN, "drug_name": "furosemide", "within": W("within-hosp")}, None, [3]),
    (150, {"diagnosis_name": HTN, "drug_name": "furosemide", "within": W("within-hosp"),
           "global1": T("abs-year-since", "2103")}, None, [2]),
    (151, {"lab_name": "creatinine"}, None, [3]),
    (152, {"culture_name": "sputum"}, None, [2]),
    (153, {"test_name": "urine culture"}, None, [2]),
    (154, {"intake_name": "nacl 0.9%"}, None, [2]),
    (154, {"intake_name": "fresh frozen plasma"}, None, [1]),
    # 2105 diagnoses: pneumonia 2, diabetes 2, kidney failure 1 -> ranks 1, 1, 2
    (155, {"n_rank": "three", **Y2105}, "what were the top three frequent diagnoses in 2105?", [PNEU, DM, AKF]),
    (155, {"n_rank": "three", "global1": T("abs-year-in", "2103")}, "what were the top three frequent diagnoses in "
                                                                      "2103?", [HTN]),
    (156, {"n_rank": "three", "age_group": "60 or above"}, None, [AKF, HTN]),  # visit 41
    (156, {"n_rank": "three", "age_group": "50s"}, None, [PNEU, HTN, DM]),  # visits 11, 12
    # airway (p1 01-11, 01-15; p4 2101-05-02) -> diagnoses of p1 on 2105-12-25
    (157, {"n_rank": "three", "procedure_name": AIRWAY, "within": W("within-n_month", 24)}, None, [PNEU, DM]),
    (158, {"n_rank": "three", "diagnosis_name": HTN, "within": W("within-n_month", 24)}, None, [PNEU, DM]),
    (159, {"n_rank": "three"}, None, [AIRWAY, VENT, INFUSION]),
    (160, {"n_rank": "three", "age_group": "40s"}, None, [VENT]),  # visit 22
    (161, {"n_rank": "three", "procedure_name": VENT, "within": W("within-hosp")}, None, [AIRWAY]),
    (162, {"n_rank": "three", "diagnosis_name": DM, "within": W("within-hosp")}, None, [INFUSION]),
    # aspirin 4, furosemide 3, heparin 2, vancomycin 1, metformin 1
    (163, {"n_rank": "three"}, "what are the top three frequently prescribed drugs?", ["aspirin", "furosemide",
                                                                                        "heparin"]),
    (164, {"n_rank": "three", "age_group": "40s"}, None, ["aspirin", "furosemide", "heparin"]),  # visits 21, 22
    (165, {"n_rank": "three", "drug_name": "aspirin", "within": W("within-same")}, None,
     ["heparin"]),  # p1 2104-01-10, p2 2105-02-21
    # aspirin 01-10 -> aspirin 01-12, furosemide 01-14; aspirin 12-25 -> vancomycin 12-30
    (166, {"n_rank": "three", "drug_name": "aspirin", "within": W("within-hosp")}, None,
     ["aspirin", "furosemide", "vancomycin"]),
    # ventilation: p1 -> aspirin 01-12, furosemide 01-14; p2 -> heparin, aspirin 02-21 (aspirin 2: rank 1)
    (167, {"n_rank": "three", "procedure_name": VENT, "within": W("within-n_day", 7)}, None,
     ["aspirin", "furosemide", "heparin"]),
    (168, {"n_rank": "three", "diagnosis_name": AKF, "within": W("within-n_day", 2)}, None,
     ["aspirin", "furosemide", "heparin"]),
    (168, {"n_rank": "three", "diagnosis_name": AKF, "within": W("within-n_day", 1)}, None, []),  # 28 hours later
    (169, {"n_rank": "three", "diagnosis_name": AKF, "within": W("within-n_day", 2), "age_group": "60 or above"},
     None, ["furosemide"]),  # p4, visit 41 (61)
    (170, {"n_rank": "three", "diagnosis_name": AKF, "within": W("within-n_day", 2), "age_group": "40s",
           "gender": "m"},
     "what are the top three frequently prescribed drugs that male patients aged 40s were prescribed within 2 day "
     "after having been diagnosed with acute kidney failure?", ["aspirin", "heparin"]),
    (170, {"n_rank": "three", "diagnosis_name": AKF, "within": W("within-n_day", 2), "age_group": "40s",
           "gender": "f"}, None, []),
    (171, {"n_rank": "three"}, None, ["creatinine", "glucose", "hemoglobin"]),
    (172, {"n_rank": "three", "age_group": "30s"}, None, ["glucose"]),
    # diabetes p1 12-25 -> creatinine 12-26, glucose 12-26, creatinine 12-30; p3 06-01 -> glucose 06-02
    (173, {"n_rank": "three", "diagnosis_name": DM, "within": W("within-hosp")}, None, ["creatinine", "glucose"]),
    (174, {"n_rank": "three", "procedure_name": INFUSION, "within": W("within-n_day", 1)}, None,
     ["creatinine", "glucose"]),
    (175, {"n_rank": "three"}, None, ["sputum", "blood culture", "urine"]),
    (176, {"n_rank": "three", **Y2105}, None, ["urine culture", "respiratory culture"]),
    (177, {"n_rank": "three", "diagnosis_name": HTN, "within": W("within-hosp")}, None, ["blood culture", "sputum"]),
    (178, {"n_rank": "three", "diagnosis_name": PNEU, "within": W("within-hosp")}, None,
     ["blood culture, routine", "respiratory culture", "gram stain", "urine culture"]),
    # ventilation p1 01-11 00:00 -> blood culture 01-11 08:00 (sputum 01-13 08:00 too late); p2 -> sputum 02-22
    (179, {"n_rank": "three", "procedure_name": VENT, "within": W("within-n_day", 2)}, None,
     ["blood culture", "sputum"]),
    (180, {"n_rank": "three", "procedure_name": INFUSION, "within": W("within-n_day", 3)}, None, ["urine culture"]),
    # 2105: nacl 2, vancomycin 1, fresh frozen plasma 1
    (181, {"n_rank": "three", **Y2105}, None, ["nacl 0.9%", "vancomycin", "fresh frozen plasma"]),
    (182, {"n_rank": "three"}, "what are the top three frequent output events?", ["foley", "void"]),
]


def _same(got: list, expected: list) -> bool:
    if len(got) != len(expected):
        return False
    def key(x):
        return isinstance(x, str), x
    for a, b in zip(sorted(got, key=key), sorted(expected, key=key)):
        if isinstance(b, float) or isinstance(a, float):
            if a != pytest.approx(b, abs=1e-6):
                return False
        elif a != b:
            return False
    return True


def test_every_table_template_has_a_hand_checked_case():
    assert {t.index for t in TABLE_TEMPLATES} == {c[0] for c in CASES}


@pytest.mark.parametrize("index, values, question, expected", CASES)
def test_hand_checked_table(ask_table, index, values, question, expected):
    q, gold, neural = ask_table(index, values)
    if question is not None:
        assert q == question
    assert _same(gold, expected), (q, gold)
    assert _same(neural, expected), (q, neural)
