"""Synthetic Chest ImaGenome ontology: lists, hierarchy, possible pairs, semantics files round trip."""

from __future__ import annotations

import json

from ehrxqa_pipeline.demo import ontology as ont
from ehrxqa_pipeline.sources.schema import (IMAGENOME, SEMANTICS_ATTRIBUTES, SEMANTICS_OBJECTS, SEMANTICS_UMLS,
                                            release_path)
from ehrxqa_pipeline.sources.semantics import read_semantics


def test_lists():
    assert len(ont.BOX_OBJECTS) == len(set(ont.BOX_OBJECTS)) == 36
    assert len(ont.REPORT_OBJECTS) == len(set(ont.REPORT_OBJECTS)) == 38
    assert set(ont.REMOVED_OBJECTS) <= set(ont.REPORT_OBJECTS) and len(ont.LABEL_OBJECTS) == 36
    sizes = {c: len(v) for c, v in ont.ATTRIBUTES_BY_CATEGORY.items()}
    assert sizes == {"anatomicalfinding": 43, "disease": 10, "technicalassessment": 5, "tubesandlines": 12,
                     "device": 5}
    assert len(set(ont.ATTRIBUTES)) == 75 and set(ont.REMOVED_ATTRIBUTES) <= set(ont.ATTRIBUTES)
    assert len(ont.LABEL_ATTRIBUTES) == 68
    # Box-only and report-only objects as in Chest ImaGenome (cardiophrenic angles have boxes, no labels).
    assert {"right cardiophrenic angle", "descending aorta"} <= set(ont.BOX_OBJECTS) - set(ont.REPORT_OBJECTS)
    assert {"neck", "left breast", "right arm"} <= set(ont.REPORT_OBJECTS) - set(ont.BOX_OBJECTS)


def test_semantics_files_parse_back(tmp_path):
    files = ont.semantics_files()
    objects, attributes, umls = (release_path(IMAGENOME, r) for r in (SEMANTICS_OBJECTS, SEMANTICS_ATTRIBUTES,
                                                                       SEMANTICS_UMLS))
    assert set(files) == {objects, attributes, umls}
    for rel, data in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    assert all(line.endswith(",") for line in files[objects].decode().splitlines())
    assert all(line.endswith(",") for line in files[attributes].decode().splitlines())
    sem = read_semantics(tmp_path)
    assert sem.objects == list(ont.REPORT_OBJECTS)
    target = [(c, a) for c, _, a in sem.attributes if c in ont.ATTRIBUTES_BY_CATEGORY]
    assert [a for _, a in target] == list(ont.ATTRIBUTES)
    assert all(ont.CATEGORY_OF[a] == c for c, a in target)
    assert {c for c, _, _ in sem.attributes} - set(ont.ATTRIBUTES_BY_CATEGORY)  # nlp etc. to be dropped
    assert set(sem.possible_attribute_of) == set(ont.ATTRIBUTES)
    umls = json.loads(files[umls])
    assert {"all_children", "possible_attribute_of", "label_to_UMLS"} <= set(umls)
    assert all(v.startswith("C") and len(v) == 8 for v in umls["label_to_UMLS"].values())


def test_all_children_unedited_and_transitive():
    ch = ont.all_children()
    assert {"lungs", "left lung", "right lung", "mediastinum", "lung opacity"} <= set(ch)
    # The pipeline applies these edits itself; the published file must not contain them already.
    assert "hilar structures" not in ch
    assert "left hilar structures" not in ch["left lung"] and "right hilar structures" not in ch["lungs"]
    assert "aortic arch" not in ch["mediastinum"] and "svc" not in ch["mediastinum"]
    assert {"right apical zone", "right costophrenic angle", "right lower lung zone"} <= set(ch["right lung"])
    assert {"upper mediastinum", "cardiac silhouette"} <= set(ch["mediastinum"])
    assert {"consolidation", "atelectasis", "pulmonary edema/hazy opacity", "pneumonia"} <= set(ch["lung opacity"])
    assert {"mass/nodule (not otherwise specified)", "lung cancer"} <= set(ch["lung lesion"])
    for parent, kids in ch.items():
        assert parent not in kids, f"cycle through {parent}"
        for k in kids:  # all_children lists ALL descendants
            assert set(ch.get(k, [])) <= set(kids), (parent, k)


def test_possible_pairs():
    raw = ont.POSSIBLE_ATTRIBUTE_OF
    placed = {o for objs in raw.values() for o in objs}
    assert set(ont.BOX_OBJECTS) <= placed, set(ont.BOX_OBJECTS) - placed
    assert placed <= set(ont.BOX_OBJECTS) | set(ont.REPORT_OBJECTS)
    assert "pleural effusion" in raw and "right costophrenic angle" in raw["pleural effusion"]
    assert raw["enlarged cardiac silhouette"][0] == "cardiac silhouette"
    assert "upper lung zone" not in " ".join(raw["pleural effusion"])
    closed = ont.closed_possible()
    for a in ont.LABEL_ATTRIBUTES:
        assert any((o, a) in closed for o in ont.LABEL_OBJECTS), a
    # Closure: objects gain parents' rows, parent attributes gain children's objects.
    assert ("right lung", "pleural effusion") in closed and ("mediastinum", "endotracheal tube") in closed
    assert ("right lower lung zone", "lung opacity") in closed
    n = ont.label_pair_count()
    assert 480 <= n <= 620, n  # the paper reports 563 over 36 objects x 68 attributes
