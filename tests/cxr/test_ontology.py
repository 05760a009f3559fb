"""Ontology: counts on the synthetic semantics, documented edits, transitive closure, cycles, pool fixed point."""

from __future__ import annotations

import random

import pytest

from ehrxqa_pipeline.cxr.ontology import (REMOVED_ATTRIBUTES, REMOVED_OBJECTS, OntologyCycleError, build_ontology,
                                          close_possible, descendants_closure)
from ehrxqa_pipeline.demo import ontology as demo
from ehrxqa_pipeline.sources.semantics import Semantics, read_semantics


def _sem(objects, attributes, children, possible) -> Semantics:
    return Semantics(objects=list(objects), attributes=list(attributes), all_children=children,
                     possible_attribute_of=possible, raw={})


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    root = tmp_path_factory.mktemp("semantics")
    for rel, data in demo.semantics_files().items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return build_ontology(read_semantics(root))


def test_counts_on_synthetic_semantics(synthetic):
    o = synthetic
    assert len(o.all_objects) == 38 and len(o.objects) == 36
    assert set(o.objects) == set(demo.LABEL_OBJECTS)
    assert len(o.all_attributes) == 75 and len(o.attributes) == 68
    assert set(o.attributes) == set(demo.LABEL_ATTRIBUTES)
    assert {c: len(v) for c, v in o.attributes_by_category.items()} == {
        "anatomicalfinding": 41, "technicalassessment": 3, "disease": 10, "tubesandlines": 11, "device": 3}
    assert all(o.category_of[a] == demo.CATEGORY_OF[a] for a in o.all_attributes)
    # The generator states its own closure independently; both pools agree.
    assert o.all_pair_set == demo.closed_possible()
    assert o.n_pairs == demo.label_pair_count() == o.pairs.height
    assert o.pairs.columns == ["object", "attribute", "category"]
    assert o.pairs.sort("object", "attribute").equals(o.pairs)
    assert not o.pairs.filter(o.pairs["object"].is_in(REMOVED_OBJECTS)
                              | o.pairs["attribute"].is_in(REMOVED_ATTRIBUTES)).height
    assert o.all_pairs.height == len(o.all_pair_set)
    assert o.all_pairs["removed"].sum() == len(o.all_pair_set) - o.n_pairs
    assert o.warnings == ()


def test_documented_edits(synthetic):
    oa = synthetic.object_ancestors
    assert "left lung" in oa["left hilar structures"] and "right lung" in oa["right hilar structures"]
    assert {"mediastinum"} <= oa["aortic arch"] and {"mediastinum"} <= oa["svc"]
    # "lungs" and "hilar structures" are not report objects: they connect but never appear.
    assert all("lungs" not in v and "hilar structures" not in v for v in oa.values())
    assert synthetic.all_children["hilar structures"] == ("right hilar structures", "left hilar structures")


def test_ancestors_are_a_transitive_closure_independent_of_order():
    children = {"a": ["b"], "b": ["c"], "c": ["d"], "x": ["y"], "y": ["c"]}
    expect = {"a": {"b", "c", "d"}, "b": {"c", "d"}, "c": {"d"}, "x": {"y", "c", "d"}, "y": {"c", "d"}, "d": set()}
    for seed in range(5):
        keys = list(children)
        random.Random(seed).shuffle(keys)
        got = descendants_closure({k: children[k] for k in keys})
        assert {k: set(v) for k, v in got.items()} == expect
    # Only direct children given: the published single pass would stop at the parent.
    sem = _sem(["right lung", "right lower lung zone", "right costophrenic angle"],
               [("anatomicalfinding", "yes", "lung opacity"), ("anatomicalfinding", "yes", "airspace opacity"),
                ("disease", "yes", "pneumonia")],
               {"right lung": ["right lower lung zone"], "right lower lung zone": ["right costophrenic angle"],
                "lung opacity": ["airspace opacity"], "airspace opacity": ["pneumonia"]},
               {"pneumonia": ["right costophrenic angle"]})
    o = build_ontology(sem)
    assert o.object_ancestors["right costophrenic angle"] == {"right lung", "right lower lung zone"}
    assert o.attribute_ancestors["pneumonia"] == {"lung opacity", "airspace opacity"}
    assert ("right lung", "lung opacity") in o.pair_set and o.n_pairs == 9


def test_cycle_is_a_clear_error_and_self_reference_is_ignored():
    with pytest.raises(OntologyCycleError, match="a -> b -> c -> a"):
        descendants_closure({"a": ["b"], "b": ["c"], "c": ["a"]})
    assert set(descendants_closure({"a": ["a", "b"]})["a"]) == {"b"}
    sem = _sem(["spine"], [("anatomicalfinding", "yes", "scoliosis"), ("anatomicalfinding", "yes", "hernia")],
               {"scoliosis": ["hernia"], "hernia": ["scoliosis"]}, {"scoliosis": ["spine"]})
    with pytest.raises(OntologyCycleError, match="cycle"):
        build_ontology(sem)


def test_pool_is_a_fixed_point_and_closed_upwards(synthetic):
    o = synthetic
    anc = {**{k: v for k, v in o.object_ancestors.items()}, **o.attribute_ancestors}
    again = close_possible({a: [p for p, aa in o.all_pair_set if aa == a] for a in o.all_attributes}, anc)
    assert again == o.all_pair_set
    for obj, att in o.pair_set:
        for po in (obj, *o.object_ancestors[obj]):
            for pa in (att, *o.attribute_ancestors[att]):
                if po in o.objects and pa in o.attributes:
                    assert (po, pa) in o.pair_set


def test_attribute_list_quirks():
    sem = _sem(["spine", "left arm"],
               [("anatomicalfinding", "yes", "scoliosis"), ("device", "yes", "sternotomy wires"),
                ("device", "yes", "sternotomy wires"), ("disease", "yes", "scoliosis"), ("nlp", "yes", "normal"),
                ("temporal", "yes", "worsened")],
               {}, {"scoliosis": ["spine", "left arm"], "sternotomy wires": ["spine"], "normal": ["spine"]})
    o = build_ontology(sem)
    assert o.all_attributes == ("scoliosis", "sternotomy wires") and o.attributes == ("scoliosis",)
    assert o.category_of["scoliosis"] == "anatomicalfinding"
    assert any("scoliosis" in w and "disease" in w for w in o.warnings)
    assert o.pair_set == {("spine", "scoliosis")}
    assert o.all_pair_set == {("spine", "scoliosis"), ("left arm", "scoliosis"), ("spine", "sternotomy wires")}



def test_the_tables_of_the_ontology_give_it_back(synthetic):
    """What cxr_labels/ontology writes (pairs_all plus ontology_tables) is what the label and database steps read
    back with read_ontology: the same labels in file order, removed flags, categories, ancestors and pool, so
    the lookup tables the label SQL joins against are equal frame for frame."""
    import duckdb

    from ehrxqa_pipeline.cxr.labels import ontology_frames
    from ehrxqa_pipeline.cxr.ontology import ontology_tables, read_ontology
    from ehrxqa_pipeline.warehouse import replace_tables

    con = duckdb.connect()
    replace_tables(con, "cxr_labels", {"pairs_all": synthetic.all_pairs, **ontology_tables(synthetic)})
    back = read_ontology(con, "cxr_labels")
    assert (back.all_objects, back.all_attributes) == (synthetic.all_objects, synthetic.all_attributes)
    assert back.category_of == synthetic.category_of and back.all_pair_set == synthetic.all_pair_set
    assert back.object_ancestors == synthetic.object_ancestors
    assert back.attribute_ancestors == synthetic.attribute_ancestors
    assert (set(back.removed_objects), set(back.removed_attributes)) == (set(REMOVED_OBJECTS), set(REMOVED_ATTRIBUTES))
    assert back.pairs.equals(synthetic.pairs) and back.n_pairs == demo.label_pair_count()
    want, got = ontology_frames(synthetic), ontology_frames(back)
    assert {name: frame.equals(want[name]) for name, frame in got.items()} == dict.fromkeys(want, True)
