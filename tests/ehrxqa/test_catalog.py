"""The image template catalog: counts per scope, indices, wording against paper Table C11."""

from __future__ import annotations

from collections import Counter

import pytest

from ehrxqa_pipeline.questions.ehrxqa import BY_INDEX, CATALOG, TimeFilter, WithinFilter, modality, render, templates
from ehrxqa_pipeline.questions.ehrxqa.slots import by_time


def test_counts_per_scope_match_the_paper():
    assert len(CATALOG) == 174 + 168 + 75 and len(BY_INDEX) == 417
    assert Counter(t.scope for t in CATALOG) == {"TABLE-NONE": 6, "TABLE-SINGLE": 108, "TABLE-GROUP": 60,
                                                 "IMAGE-SINGLE-1": 84, "IMAGE-SINGLE-2": 48, "IMAGE-SINGLE-N": 24,
                                                 "IMAGE-GROUP-N": 12, "MULTIMODAL-SINGLE": 63, "MULTIMODAL-GROUP": 12}
    assert Counter(modality(t.scope) for t in CATALOG) == {"table": 174, "image": 168, "image+table": 75}
    assert len(templates("IMAGE-GROUP-N")) == 12
    with pytest.raises(ValueError):
        templates("IMAGE")


def test_index_ranges():
    idx = {t.index for t in CATALOG}
    assert {i for i in idx if i < 1000} == set(range(183)) - {21, 22, 23, 29, 46, 47, 85, 98, 137}  # table, 174
    assert {i for i in idx if 1000 <= i < 1100} == set(range(1000, 1040)) | {1046, 1047}
    assert {i for i in idx if 2000 <= i < 3000} == {b + j for b in (2000, 2100, 2200, 2300) for j in range(12)}
    assert {i for i in idx if 3000 <= i < 5000} == {b + j for b in (3000, 3100, 3200, 3300, 4000, 4100)
                                                    for j in range(6)}
    # image+table: +10 per event, +j the indicating predicate; "any" events and group forms use 0, 1, 3
    assert {i for i in idx if 5000 <= i < 5100} == {5000 + 10 * e + j for e in range(3) for j in range(6)} | \
        {5000 + 10 * e + j for e in (3, 4, 5) for j in (0, 1, 3)}
    assert {i for i in idx if 5100 <= i < 6000} == {b + 10 * e + j for b in (5100, 5200) for e in range(3)
                                                    for j in range(6)}
    assert {i for i in idx if i >= 6000} == {6000 + 10 * f + j for f in range(4) for j in (0, 1, 3)}


@pytest.mark.parametrize("index, text", [  # verbatim from paper Table C11 (the q_tag: lower-cased)
    (1001, "Given the [time_filter_exact1] study of patient {patient_id} [time_filter_global1], is there ${attribute} "
           "in the ${object}?"),
    (1107, "Given the study {study_id}, list all abnormality in the ${object}."),
    (1147, "Given the study {study_id}, is the width of the upper mediastinum wider than 1/3 of the thorax width?"),
    (2000, "Given the [time_filter_exact1] study of patient {patient_id} [time_filter_global1], are there any "
           "${category} that are ${comparison} in the ${object} compared to the [time_filter_exact2] study of patient "
           "{patient_id} [time_filter_global2]?"),
    (2311, "Given the {study_id1} study, list all anatomical locations related to any ${category} that are "
           "${comparison} compared to the previous study?"),
    (3000, "How many [unit_count] have passed since the [time_filter_exact1] time patient {patient_id} had a chest "
           "X-ray study indicating ${attribute} in the ${object} [time_filter_global1]?"),
    (3205, "Has {patient_id} had any chest X-ray study indicating any abnormality [time_filter_global1]?"),
    (4101, "List the IDs of patients who had any chest X-ray study indicating any ${category} in the ${object} "
           "[time_filter_global1]."),
    # paper Table C12 (its stray space before "?" dropped)
    (5000, "Has_verb patient {patient_id} been diagnosed with {diagnosis_name} [time_filter_global1] and also had a "
           "chest X-ray study indicating ${attribute} in the ${object} within the same period?"),
    (5053, "Has_verb patient {patient_id} been prescribed any medication [time_filter_global1] and also had a chest "
           "X-ray study indicating ${attribute} within the same period?"),
    (5041, "Has_verb patient {patient_id} received any procedure [time_filter_global1] and also had a chest X-ray "
           "study indicating any ${category} in the ${object} within the same period?"),
    (5112, "Has_verb patient {patient_id} had a chest X-ray study indicating any abnormality in the ${object} "
           "[time_filter_within] after having received {procedure_name} procedure [time_filter_global1]?"),
    (5225, "Has_verb patient {patient_id} been prescribed with {drug_name} [time_filter_within] after having had a "
           "chest X-ray study indicating any abnormality [time_filter_global1]?"),
    (6013, "List the IDs of patients aged [age_group] who had a chest X-ray study during hospital visit indicating "
           "${attribute} [time_filter_global1]."),
    (6021, "Count the number of {gender} patients aged [age_group] who had a chest X-ray study during hospital visit "
           "indicating any ${category} in the ${object} [time_filter_global1]."),
])
def test_paper_wording(index, text):
    """The paper's wording as the published template list writes it: lower-cased (and with its stray " ?")."""
    assert BY_INDEX[index].text.replace(" ?", "?") == text.lower()


def test_render_fills_every_slot():
    v = {"patient_id": 7, "exact1": "last", "global1": TimeFilter("abs-month-in", "2105-03"),
         "object_1": "left lung", "category_1": "anatomicalfinding", "comparison": "resolved", "study_id1": 5}
    assert render(BY_INDEX[1000].text, v) == ("given the last study of patient 7 in 03/2105, are there any anatomical "
                                             "findings in the left lung?")
    assert render(BY_INDEX[2306].text, v) == ("given the 5 study, list all anatomical findings that are resolved in "
                                             "the left lung compared to the previous study?")
    assert render(BY_INDEX[1000].text, {**v, "global1": TimeFilter()}).startswith(
        "given the last study of patient 7, are")


def test_time_filter_sql_and_words():
    assert TimeFilter("abs-day-in", "2105-03-04").nl == "on 03/04/2105"
    assert TimeFilter("rel-year-last").sql() == ("datetime(tb_cxr.studydatetime, 'start of year') = "
                                                 "datetime(current_time, 'start of year', '-1 year')")
    with pytest.raises(ValueError):
        TimeFilter("rel-hosp-cur").sql()
    with pytest.raises(ValueError):
        TimeFilter("bogus")
    with pytest.raises(ValueError):
        by_time(1, "third", TimeFilter())


def test_comparison_labels():
    assert BY_INDEX[2001].comparisons == ("still present", "still absent", "newly detected", "resolved")
    assert "still absent" not in BY_INDEX[2006].comparisons
    with pytest.raises(ValueError):
        BY_INDEX[2206].queries({"study_id1": 12, "study_id2": 11, "object_1": "left lung",
                                "category_1": "disease", "comparison": "still absent"})


def test_time_filter_grammar():
    assert TimeFilter("abs-month-until", "2104-11").nl == "until 11/2104"
    assert TimeFilter("abs-day-since", "2104-11-02").nl == "since 11/02/2104"
    assert TimeFilter("mix-day-last_year", "04-17").nl == "on 04/17/last year"
    assert TimeFilter("mix-day-this_month", "21").nl == "on this month/21"
    assert TimeFilter("rel-day-last").nl == "yesterday"
    assert TimeFilter("rel-month-until", 3).sql(column="x.t") == "datetime(x.t) <= datetime(current_time, '-3 month')"
    assert TimeFilter("rel-hosp-cur").sql(7, "diagnoses_icd.charttime") == (
        "diagnoses_icd.hadm_id in (select admissions.hadm_id from admissions where admissions.subject_id = 7 and "
        "admissions.dischtime is null)")
    assert "icustays.intime desc limit 1" in TimeFilter("rel-icu-last").sql(7, "chartevents.charttime")
    assert WithinFilter("within-n_month", 2).nl == "within 2 month"
    assert WithinFilter("within-hosp").sql("a.t", "b.t", "a.h", "b.h") == "a.h = b.h"
    with pytest.raises(ValueError):
        WithinFilter("within-n_day")
    # tense follows the global filter: present when the period reaches now
    v = {"patient_id": 3, "drug_name": "heparin", "object_1": "left lung", "attribute_1": "pneumonia"}
    assert render(BY_INDEX[5020].text, {**v, "global1": TimeFilter("rel-hosp-cur")}).startswith("has patient 3 been")
    assert render(BY_INDEX[5020].text, {**v, "global1": TimeFilter("abs-year-in", "2104")}).startswith(
        "had patient 3 been prescribed with heparin in 2104 and")
    assert render(BY_INDEX[6020].text, {**v, "global1": TimeFilter(), "gender": "f", "age_group": "30s"}).startswith(
        "count the number of female patients aged 30s who")
