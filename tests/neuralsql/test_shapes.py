"""NeuralSQL shapes: the published ways func_vqa reaches an image (P1-P4) are recognised, anything else is named."""

import pytest

from ehrxqa_pipeline.questions.neuralsql.shapes import ShapeError, shape, shape_counts, template_shape

STUDY = "select tb_cxr.study_id from tb_cxr where tb_cxr.subject_id = 1 order by tb_cxr.studydatetime desc limit 1"
VQA = 'func_vqa("is there pneumonia in the left lung?", t1.study_id)'
P1 = f"select {VQA} from ({STUDY}) as t1"
P2 = f"select count(distinct t1.study_id) from (select * from tb_cxr where tb_cxr.subject_id = 1) as t1 where {VQA} = true"
P3 = (f"select (select count(*) > 0 from diagnoses_icd where diagnoses_icd.subject_id = 1) and "
      f"(select count(*) > 0 from ({STUDY}) as t1 where {VQA} = true)")
P4 = ("select count(*) > 0 from (select diagnoses_icd.charttime as event_time from diagnoses_icd) as t1 join "
      "(select tb_cxr.studydatetime from tb_cxr where tb_cxr.study_id in (select distinct t1.study_id from "
      f"(select tb_cxr.study_id from tb_cxr where tb_cxr.subject_id = 1) as t1 where {VQA} = true)) as t2 "
      "where t1.event_time < t2.studydatetime")


@pytest.mark.parametrize("query, expected", [
    ("select count(*) from patients", "table"), (P1, "P1"), (P1 + " except " + P1.replace("t1", "t2"), "P1"),
    (P2, "P2"), (P2.replace("= true", "= false"), "P2"), (P2 + " order by t1.studydatetime asc limit 1", "P2"),
    (P3, "P3"), (P4, "P4")])
def test_published_shapes(query, expected):
    assert shape(query) == expected == template_shape(query) == template_shape(query.replace("= 1", "= 12345"))


@pytest.mark.parametrize("query, words", [
    # func_vqa in a where directly over tb_cxr (the published executor: "Unsupported select column type")
    (f"select count(distinct tb_cxr.study_id) from tb_cxr where tb_cxr.subject_id = 1 and "
     f"{VQA.replace('t1.', 'tb_cxr.')} = true", "outside the published shapes"),
    # "> 0" outside the subqueries (AssertionError in the published executor)
    (f"select (select count(*) from ({STUDY}) as t1 where {VQA} = true) > 0 and (select count(*) from patients) > 0",
     "each side must be"),
    # count over a set operation ("Unsupported FROM clause type: Except")
    (f"select count(*) > 0 from ({P1} except {P1.replace('t1', 't2')})", "outside the published shapes"),
    # a set operation with a side that is not a P1 select
    (f"{P1} except {P2}", "set operation"),
    # a P3 side without count(...) > 0
    (f"select ({P2}) and (select count(*) > 0 from patients)", "each side must be"),
    # the VQA asked of another column than the derived table's study_id
    (P1.replace("t1.study_id)", "t1.subject_id)"), "outside the published shapes"),
])
def test_other_shapes_are_refused_with_the_reason(query, words):
    with pytest.raises(ShapeError, match=words):
        shape(query)
    with pytest.raises(ShapeError) as refused:  # worked out on the query itself: the same reason
        template_shape(query)
    with pytest.raises(ShapeError) as own:
        shape(query)
    assert str(refused.value) == str(own.value)


def test_shape_counts_name_every_refused_record():
    records = {"train": [{"id": 0, "q_tag": "a", "query": P1}, {"id": 1, "q_tag": "b", "query": "select 1"},
                         {"id": 2, "q_tag": "c", "query": None}],
               "test": [{"id": 0, "q_tag": "d", "query": P1.replace("from (", "from tb_cxr where tb_cxr.study_id in (")}]}
    counts, refused = shape_counts(records)
    assert counts == {"P1": 1, "refused": 1, "table": 1}
    assert [(r["split"], r["id"], r["q_tag"]) for r in refused] == [("test", 0, "d")]


def test_the_items_of_a_template_share_one_worked_out_shape():
    """Two patients' P3 queries: one shape worked out (``count(*) > 0`` keeps its 0, which P3 reads)."""
    from ehrxqa_pipeline.questions.neuralsql.shapes import _shape_of_template

    first, second = (P3.replace("subject_id = 1", f"subject_id = {n}") for n in (12345, 67890))
    before = _shape_of_template.cache_info()
    assert template_shape(first) == template_shape(second) == "P3"
    after = _shape_of_template.cache_info()
    assert after.misses - before.misses <= 1 and after.hits - before.hits >= 1
