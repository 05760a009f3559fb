"""The image template catalog: counts per scope, indices, wording against paper Table C11."""

from __future__ import annotations

from collections import Counter

import pytest

from ehrxqa_pipeline.questions.ehrxqa import BY_INDEX, CATALOG, TimeFilter, render, templates
from ehrxqa_pipeline.questions.ehrxqa.slots import by_time


def test_counts_per_scope_match_the_paper():
    assert len(CATALOG) == 168 and len(BY_INDEX) == 168
    assert Counter(t.scope for t in CATALOG) == {"IMAGE-SINGLE-1": 84, "IMAGE-SINGLE-2": 48, "IMAGE-SINGLE-N": 24,
                                                 "IMAGE-GROUP-N": 12}
    assert len(templates("IMAGE-GROUP-N")) == 12
    with pytest.raises(ValueError):
        templates("IMAGE")


def test_index_ranges():
    idx = {t.index for t in CATALOG}
    assert {i for i in idx if i < 1100} == set(range(1000, 1040)) | {1046, 1047}
    assert {i for i in idx if 2000 <= i < 3000} == {b + j for b in (2000, 2100, 2200, 2300) for j in range(12)}
    assert {i for i in idx if i >= 3000} == {b + j for b in (3000, 3100, 3200, 3300, 4000, 4100) for j in range(6)}


@pytest.mark.parametrize("index, text", [  # verbatim from paper Table C11
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
])
def test_paper_wording(index, text):
    assert BY_INDEX[index].text == text


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
