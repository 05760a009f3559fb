"""Hand-checked items per scope family. Expected answers are worked out by hand from tests.ehrxqa
(AFFIRMED, study times, ratios), not from the template code; both the gold SQL and the NeuralSQL (oracle)
must give them."""

from __future__ import annotations

import pytest

from ehrxqa_pipeline.questions.ehrxqa import TimeFilter

T = TimeFilter
CASES = [
    # -- IMAGE-SINGLE-1 -----------------------------------------------------------------------------------
    # last study of patient 1 in 2104 = study 12 (2104-03-05); it has lung opacity in the left lung
    (1001, {"patient_id": 1, "exact1": "last", "global1": T("abs-year-in", "2104"), "object_1": "left lung",
            "attribute_1": "lung opacity"},
     "given the last study of patient 1 in 2104, is there lung opacity in the left lung?", [1]),
    # first study of patient 1 on the first hospital visit (101) = study 11: no pleural effusion in the left lung
    (1001, {"patient_id": 1, "exact1": "first", "global1": T("rel-hosp-first"), "object_1": "left lung",
            "attribute_1": "pleural effusion"}, None, [0]),
    # study 13: right lung anatomical findings = pleural effusion
    (1106, {"study_id": 13, "object_1": "right lung", "category_1": "anatomicalfinding"},
     "given the study 13, list all anatomical findings in the right lung.", ["pleural effusion"]),
    # study 13 abnormalities: low lung volumes is a technical assessment, not abnormal
    (1126, {"study_id": 13}, "given the study 13, list all abnormality.",
     ["enlarged cardiac silhouette", "pleural effusion"]),
    # first study of patient 2 = 21 with CTR exactly 0.5: not wider than 1/2
    (1046, {"patient_id": 2, "exact1": "first", "global1": T()}, None, [0]),
    # study 22: which of left lung / cardiac silhouette is related to pneumonia -> left lung
    (1131, {"study_id": 22, "attribute_1": "pneumonia", "object_1": "left lung", "object_2": "cardiac silhouette"},
     None, ["left lung"]),
    # -- IMAGE-SINGLE-2 -----------------------------------------------------------------------------------
    # study 12 vs previous (11), left lung diseases: pneumonia in 11 only -> resolved
    (2306, {"study_id1": 12, "object_1": "left lung", "category_1": "disease", "comparison": "resolved"},
     "given the 12 study, list all diseases that are resolved in the left lung compared to the previous study?",
     ["pneumonia"]),
    (2306, {"study_id1": 12, "object_1": "left lung", "category_1": "anatomicalfinding",
            "comparison": "still present"}, None, ["lung opacity"]),
    # study 13 vs 11: pneumonia in the left lung resolved (yes), pleural effusion in the left lung still absent
    (2201, {"study_id1": 13, "study_id2": 11, "object_1": "left lung", "attribute_1": "pneumonia",
            "comparison": "resolved"}, None, [1]),
    (2201, {"study_id1": 13, "study_id2": 11, "object_1": "left lung", "attribute_1": "pleural effusion",
            "comparison": "still absent"}, None, [1]),
    (2201, {"study_id1": 13, "study_id2": 11, "object_1": "left lung", "attribute_1": "pleural effusion",
            "comparison": "newly detected"}, None, [0]),
    # last study of patient 1 (13) vs first study of patient 1 (11): pleural effusion newly in the right lung
    (2010, {"patient_id": 1, "exact1": "last", "global1": T(), "exact2": "first", "global2": T(),
            "attribute_1": "pleural effusion", "comparison": "newly detected"},
     "given the last study of patient 1, list all anatomical locations related to pleural effusion that are newly "
     "detected compared to the first study of patient 1?", ["right lung"]),
    # last study of patient 2 in 2105 (22) vs previous (21): any diseases newly detected -> pneumonia: yes
    (2103, {"patient_id": 2, "exact1": "last", "global1": T("abs-year-in", "2105"), "category_1": "disease",
            "comparison": "newly detected"}, None, [1]),
    # "are there any ... that are <label>": the published meaning asks the yes/no question of both studies.
    # 12 vs previous 11: abnormalities of 12 {lung opacity, pleural effusion, picc}, of 11 {lung opacity,
    # pneumonia}: yes in both -> still present [1], newly detected [0], resolved [0] (a set difference of the two
    # lists would say newly detected {pleural effusion, picc} and resolved {pneumonia}: [1], [1])
    (2304, {"study_id1": 12, "comparison": "newly detected"},
     "given the 12 study, are there any abnormality that are newly detected compared to the previous study?", [0]),
    (2304, {"study_id1": 12, "comparison": "resolved"}, None, [0]),
    (2304, {"study_id1": 12, "comparison": "still present"}, None, [1]),
    (2304, {"study_id1": 12, "comparison": "still absent"}, None, [0]),
    # anatomical findings: 12 {lung opacity, pleural effusion}, 11 {lung opacity}: yes in both (set: newly {effusion})
    (2303, {"study_id1": 12, "category_1": "anatomicalfinding", "comparison": "newly detected"}, None, [0]),
    (2303, {"study_id1": 12, "category_1": "anatomicalfinding", "comparison": "still present"}, None, [1]),
    # 13 vs previous 12, left lung: 13 only low lung volumes (a technical assessment, not an abnormality), 12 lung
    # opacity -> abnormality in the left lung resolved (no, yes)
    (2302, {"study_id1": 13, "object_1": "left lung", "comparison": "resolved"},
     "given the 13 study, are there any abnormality that are resolved in the left lung compared to the previous "
     "study?", [1]),
    (2302, {"study_id1": 13, "object_1": "left lung", "comparison": "still absent"}, None, [0]),
    # 13 vs 11 by id, diseases in the left lung: none in 13, pneumonia in 11 -> resolved; technical assessments
    # in the left lung: low lung volumes in 13 only -> newly detected
    (2200, {"study_id1": 13, "study_id2": 11, "object_1": "left lung", "category_1": "disease",
            "comparison": "resolved"}, None, [1]),
    (2200, {"study_id1": 13, "study_id2": 11, "object_1": "left lung", "category_1": "technicalassessment",
            "comparison": "newly detected"}, None, [1]),
    # -- IMAGE-SINGLE-N -----------------------------------------------------------------------------------
    # patient 1 studies with lung opacity in the left lung: 11, 12
    (3300, {"patient_id": 1, "global1": T(), "object_1": "left lung", "attribute_1": "lung opacity"},
     "count the number of times that patient 1 had chest x-ray studies indicating lung opacity in the left lung.", [2]),
    (3300, {"patient_id": 1, "global1": T("abs-year-in", "2105"), "object_1": "left lung",
            "attribute_1": "lung opacity"}, None, [0]),
    # first study of patient 2 with pneumonia anywhere: 22
    (3103, {"patient_id": 2, "exact1": "first", "global1": T(), "attribute_1": "pneumonia"},
     "when was the first time that patient 2 had a chest x-ray study indicating pneumonia?", ["2105-11-15 07:30:00"]),
    # last left-lung lung opacity of patient 1 = 12 at 2104-03-05 08:00; to 2105-12-31 23:59: 365 + 301 days
    # + 15 h 59 min = 666 + 959/1440 days
    (3000, {"patient_id": 1, "exact1": "last", "global1": T(), "unit_count": "days", "object_1": "left lung",
            "attribute_1": "lung opacity"}, None, [round(666 + 959 / 1440, 6)]),
    (3000, {"patient_id": 1, "exact1": "last", "global1": T(), "unit_count": "hours", "object_1": "left lung",
            "attribute_1": "lung opacity"}, None, [round(24 * (666 + 959 / 1440), 6)]),
    # patient 2: 21 (06/2105) has no abnormality, 22 (11/2105) has
    (3205, {"patient_id": 2, "global1": T("abs-year-in", "2105")},
     "has 2 had any chest x-ray study indicating any abnormality in 2105?", [1]),
    (3205, {"patient_id": 2, "global1": T("abs-month-in", "2105-06")}, None, [0]),
    # -- IMAGE-GROUP-N ------------------------------------------------------------------------------------
    # pneumonia in the left lung: 11 (patient 1), 22 (patient 2)
    (4000, {"global1": T(), "object_1": "left lung", "attribute_1": "pneumonia"},
     "count the number of patients who had any chest x-ray study indicating pneumonia in the left lung.", [2]),
    # tubes/lines since 2104: picc in 12 (patient 1); 31 (2103) excluded
    (4104, {"global1": T("abs-year-since", "2104"), "category_1": "tubesandlines"},
     "list the ids of patients who had any chest x-ray study indicating any tubes/lines since 2104.", [1]),
    (4104, {"global1": T(), "category_1": "tubesandlines"}, None, [1, 3]),
]


@pytest.mark.parametrize("index, values, question, expected", CASES)
def test_hand_checked(ask, index, values, question, expected):
    q, gold, neural = ask(index, values)
    if question is not None:
        assert q == question
    assert sorted(gold, key=str) == sorted(expected, key=str), (q, gold)
    assert sorted(neural, key=str) == sorted(expected, key=str), (q, neural)
