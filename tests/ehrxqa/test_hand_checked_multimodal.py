"""Hand-checked image+table items. Expected answers are worked out by hand from tests.ehrxqa (EVENTS,
AFFIRMED, study times, admission ages), not from the template code; both the gold SQL and the NeuralSQL
(oracle) must give them."""

from __future__ import annotations

import pytest

from ehrxqa_pipeline.questions.ehrxqa import TimeFilter as T
from ehrxqa_pipeline.questions.ehrxqa import WithinFilter as W

PNEU = "pneumonia, unspecified organism"  # two ICD codes: 486 (2104-03-01, patient 1) and j189 (2105-12-20)
LL_LO = {"object_1": "left lung", "attribute_1": "lung opacity"}
CASES = [
    # -- same period ----------------------------------------------------------------------------------------
    # 2104: diagnosis via the ICD-9 code 486 (2104-03-01) and studies 11, 12 with left-lung opacity
    (5000, {"patient_id": 1, "diagnosis_name": PNEU, "global1": T("abs-year-in", "2104"), **LL_LO},
     "had patient 1 been diagnosed with pneumonia, unspecified organism in 2104 and also had a chest x-ray study "
     "indicating lung opacity in the left lung within the same period?", [1]),
    # 2105: diagnosis via j189 (2105-12-20) but study 13 has no left-lung opacity
    (5000, {"patient_id": 1, "diagnosis_name": PNEU, "global1": T("abs-year-in", "2105"), **LL_LO}, None, [0]),
    # any medication on patient 2's first (and only discharged) visit 201 -- study 21 there has no pneumonia
    (5053, {"patient_id": 2, "global1": T("rel-hosp-first"), "attribute_1": "pneumonia"}, None, [0]),
    # ... but in 2105 study 22 (outside any admission) has pneumonia and both drugs are in 2105
    (5053, {"patient_id": 2, "global1": T("abs-year-in", "2105"), "attribute_1": "pneumonia"},
     "had patient 2 been prescribed any medication in 2105 and also had a chest x-ray study indicating pneumonia "
     "within the same period?", [1]),
    # -- CXR after a table event ------------------------------------------------------------------------------
    # diagnosis 2104-03-01 09:00 -> study 11 at 2104-03-02 10:00 (left-lung opacity): within 2 days, not within 1
    (5100, {"patient_id": 1, "diagnosis_name": PNEU, "global1": T(), "within": W("within-n_day", 2), **LL_LO},
     "has patient 1 had a chest x-ray study indicating lung opacity in the left lung within 2 day after having been "
     "diagnosed with pneumonia, unspecified organism?", [1]),
    (5100, {"patient_id": 1, "diagnosis_name": PNEU, "global1": T(), "within": W("within-n_day", 1), **LL_LO},
     None, [0]),
    # procedure 2104-03-04 12:00 (visit 101) -> study 12 (2104-03-05, visit 101) with pleural effusion
    (5113, {"patient_id": 1, "procedure_name": "insertion of endotracheal airway into trachea", "global1": T(),
            "within": W("within-hosp"), "attribute_1": "pleural effusion"}, None, [1]),
    # ... but none of it in 2105
    (5113, {"patient_id": 1, "procedure_name": "insertion of endotracheal airway into trachea",
            "global1": T("abs-year-in", "2105"), "within": W("within-hosp"), "attribute_1": "pleural effusion"},
     None, [0]),
    # -- table event after a CXR ------------------------------------------------------------------------------
    # heparin 2104-03-03 (visit 101) after study 11 (2104-03-02, visit 101, abnormal)
    (5225, {"patient_id": 1, "drug_name": "heparin", "global1": T(), "within": W("within-hosp")},
     "has patient 1 been prescribed with heparin within the same hospital visit after having had a chest x-ray "
     "study indicating any abnormality?", [1]),
    # patient 2: heparin 2105-06-05 (visit 201) follows study 21 (visit 201, not abnormal) only
    (5225, {"patient_id": 2, "drug_name": "heparin", "global1": T(), "within": W("within-hosp")}, None, [0]),
    # furosemide 2105-06-01 precedes every study of patient 2
    (5225, {"patient_id": 2, "drug_name": "furosemide", "global1": T(), "within": W("within-n_month", 12)},
     None, [0]),
    # -- group ----------------------------------------------------------------------------------------------
    # ages 50-59: visits 101 (54), 102 (55) -> studies 11, 12, 13; left-lung opacity in 11, 12 -> patient 1
    (6000, {"global1": T(), "age_group": "50s", **LL_LO},
     "count the number of patients aged 50s who had a chest x-ray study during hospital visit indicating lung "
     "opacity in the left lung.", [1]),
    # ages 40-49: visit 201 -> study 21, no opacity (study 22 has some but is outside any visit)
    (6000, {"global1": T(), "age_group": "40s", **LL_LO}, None, [0]),
    (6030, {"global1": T(), "age_group": "50s", "gender": "f", "object_1": "right lung",
            "attribute_1": "pleural effusion"}, None, [1]),
    (6030, {"global1": T(), "age_group": "50s", "gender": "m", "object_1": "right lung",
            "attribute_1": "pleural effusion"}, None, []),
    # enlarged cardiac silhouette: study 13 (visit 102, age 55) and study 31 (no visit) -> patient 1 only
    (6013, {"global1": T("abs-year-since", "2103"), "age_group": "50s", "attribute_1": "enlarged cardiac silhouette"},
     None, [1]),
]


@pytest.mark.parametrize("index, values, question, expected", CASES)
def test_hand_checked_multimodal(ask, index, values, question, expected):
    q, gold, neural = ask(index, values)
    if question is not None:
        assert q == question
    assert sorted(gold, key=str) == sorted(expected, key=str), (q, gold)
    assert sorted(neural, key=str) == sorted(expected, key=str), (q, neural)
