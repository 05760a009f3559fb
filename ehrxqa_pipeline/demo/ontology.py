"""The synthetic Chest ImaGenome ontology: objects, attributes, hierarchies, possible pairs, semantics files.

Names follow reference-builders.md 1.2 and 3.2 (36 detector boxes, 38 report objects, 75 attributes in 5
categories of which 7 are later removed). The hierarchy is written here as parent -> direct children and
published, like the real ``label_to_UMLS_mapping.json``, as ``all_children`` (label -> every descendant,
objects and attributes mixed) WITHOUT the pipeline's documented edits (hilar structures under the lungs,
aortic arch and svc under the mediastinum); ``possible_attribute_of`` lists the leaf-level places where an
attribute can occur and the pipeline closes it over both hierarchies itself.

``closed_possible()`` is the generator's own statement of that closure (edits, object then attribute
augmentation); the relation generator uses it to keep planted impossible pairs impossible and every
other row possible.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache

from ehrxqa_pipeline.sources.schema import (IMAGENOME, SEMANTICS_ATTRIBUTES, SEMANTICS_OBJECTS, SEMANTICS_UMLS,
                                            release_path)

SIDES = ("right", "left")


def _both(*names: str) -> list[str]:
    """``"*lung"`` -> right lung, left lung; other names unchanged."""
    out = []
    for n in names:
        out += [f"{s} {n[1:]}" for s in SIDES] if n.startswith("*") else [n]
    return out


BOX_OBJECTS: tuple[str, ...] = tuple(_both(
    "*lung", "*upper lung zone", "*mid lung zone", "*lower lung zone", "*hilar structures", "*apical zone",
    "*costophrenic angle", "*cardiophrenic angle", "*hemidiaphragm", "trachea", "spine", "*clavicle",
    "aortic arch", "mediastinum", "upper mediastinum", "svc", "cardiac silhouette", "*cardiac silhouette",
    "cavoatrial junction", "right atrium", "descending aorta", "carina", "*upper abdomen", "abdomen"))

REPORT_OBJECTS: tuple[str, ...] = tuple(sorted(_both(
    "abdomen", "aortic arch", "cardiac silhouette", "carina", "cavoatrial junction", "*apical zone", "*arm",
    "*breast", "*chest wall", "*clavicle", "*costophrenic angle", "*hemidiaphragm", "*hilar structures",
    "*lower lung zone", "*lung", "*mid lung zone", "*shoulder", "*upper lung zone", "mediastinum", "neck",
    "right atrium", "spine", "svc", "trachea", "upper mediastinum")))
REMOVED_OBJECTS: tuple[str, ...] = ("left arm", "right arm")
LABEL_OBJECTS: tuple[str, ...] = tuple(o for o in REPORT_OBJECTS if o not in REMOVED_OBJECTS)  # the 36

ATTRIBUTES_BY_CATEGORY: dict[str, tuple[str, ...]] = {
    "anatomicalfinding": (
        "lung opacity", "airspace opacity", "consolidation", "infiltration", "atelectasis",
        "linear/patchy atelectasis", "lobar/segmental collapse", "pulmonary edema/hazy opacity",
        "vascular congestion", "vascular redistribution", "increased reticular markings/ild pattern",
        "pleural effusion", "costophrenic angle blunting", "pleural/parenchymal scarring", "bronchiectasis",
        "enlarged cardiac silhouette", "mediastinal displacement", "mediastinal widening", "enlarged hilum",
        "tortuous aorta", "vascular calcification", "pneumomediastinum", "pneumothorax", "hydropneumothorax",
        "lung lesion", "mass/nodule (not otherwise specified)", "multiple masses/nodules", "calcified nodule",
        "superior mediastinal mass/enlargement", "rib fracture", "clavicle fracture", "spinal fracture",
        "hyperaeration", "cyst/bullae", "elevated hemidiaphragm", "diaphragmatic eventration (benign)",
        "sub-diaphragmatic air", "subcutaneous air", "hernia", "scoliosis", "spinal degenerative changes",
        "shoulder osteoarthritis", "bone lesion"),
    "disease": (
        "alveolar hemorrhage", "aspiration", "copd/emphysema", "fluid overload/heart failure", "goiter",
        "granulomatous disease", "interstitial lung disease", "lung cancer", "pericardial effusion",
        "pneumonia"),
    "technicalassessment": ("artifact", "breast/nipple shadows", "low lung volumes", "rotated", "skin fold"),
    "tubesandlines": (
        "chest port", "chest tube", "endotracheal tube", "enteric tube", "ij line", "intra-aortic balloon pump",
        "mediastinal drain", "picc", "pigtail catheter", "subclavian line", "swan-ganz catheter",
        "tracheostomy tube"),
    "device": ("cabg grafts", "cardiac pacer and wires", "prosthetic valve", "aortic graft/repair",
               "sternotomy wires"),
}
REMOVED_ATTRIBUTES: tuple[str, ...] = (
    "artifact", "bronchiectasis", "pigtail catheter", "skin fold", "aortic graft/repair",
    "diaphragmatic eventration (benign)", "sternotomy wires")
ATTRIBUTES: tuple[str, ...] = tuple(a for v in ATTRIBUTES_BY_CATEGORY.values() for a in v)  # 75
LABEL_ATTRIBUTES: tuple[str, ...] = tuple(a for a in ATTRIBUTES if a not in REMOVED_ATTRIBUTES)  # the 68
CATEGORY_OF: dict[str, str] = {a: c for c, v in ATTRIBUTES_BY_CATEGORY.items() for a in v}
# Categories the real attribute file also lists but the pipeline drops (it keeps the five above).
OTHER_CATEGORY_LINES = (("nlp", "normal"), ("nlp", "abnormal"), ("temporal", "improved"),
                        ("temporal", "worsened"), ("temporal", "no change"), ("severity", "mild"),
                        ("severity", "moderate"), ("severity", "severe"))

# Object hierarchy before the pipeline's edits: hilar structures, aortic arch and svc have no parent here.
OBJECT_CHILDREN: dict[str, list[str]] = {
    "lungs": ["right lung", "left lung"],
    **{f"{s} lung": [f"{s} upper lung zone", f"{s} mid lung zone", f"{s} lower lung zone"] for s in SIDES},
    **{f"{s} upper lung zone": [f"{s} apical zone"] for s in SIDES},
    **{f"{s} lower lung zone": [f"{s} costophrenic angle"] for s in SIDES},
    "mediastinum": ["upper mediastinum", "cardiac silhouette", "carina"],
    "upper mediastinum": ["trachea"],
    "cardiac silhouette": ["right cardiac silhouette", "left cardiac silhouette"],
    "right cardiac silhouette": ["right atrium", "cavoatrial junction"],
    "abdomen": ["right upper abdomen", "left upper abdomen"],
}
ATTRIBUTE_CHILDREN: dict[str, list[str]] = {
    "lung opacity": ["airspace opacity", "infiltration", "atelectasis", "pulmonary edema/hazy opacity",
                     "increased reticular markings/ild pattern", "lung lesion", "pleural/parenchymal scarring",
                     "bronchiectasis"],
    "airspace opacity": ["consolidation", "pneumonia", "aspiration", "alveolar hemorrhage"],
    "atelectasis": ["linear/patchy atelectasis", "lobar/segmental collapse"],
    "lung lesion": ["mass/nodule (not otherwise specified)", "multiple masses/nodules", "calcified nodule",
                    "lung cancer", "cyst/bullae"],
    "increased reticular markings/ild pattern": ["interstitial lung disease"],
    "vascular congestion": ["vascular redistribution"],
    "pleural effusion": ["hydropneumothorax"],
    "pneumothorax": ["hydropneumothorax"],
    "mediastinal widening": ["superior mediastinal mass/enlargement"],
    "superior mediastinal mass/enlargement": ["goiter"],
    "elevated hemidiaphragm": ["diaphragmatic eventration (benign)"],
    "chest tube": ["pigtail catheter"],
}

_ZONES = ("*apical zone", "*upper lung zone", "*mid lung zone", "*lower lung zone")
_PARENCHYMA = (
    "lung opacity", "airspace opacity", "consolidation", "infiltration", "atelectasis",
    "linear/patchy atelectasis", "lobar/segmental collapse", "pulmonary edema/hazy opacity",
    "increased reticular markings/ild pattern", "pleural/parenchymal scarring", "bronchiectasis", "lung lesion",
    "mass/nodule (not otherwise specified)", "multiple masses/nodules", "calcified nodule", "cyst/bullae",
    "pneumonia", "aspiration", "alveolar hemorrhage", "lung cancer", "interstitial lung disease",
    "granulomatous disease", "copd/emphysema", "pneumothorax", "vascular congestion")
_VENOUS = ("svc", "cavoatrial junction", "right atrium")
# Leaf-level places; the closure adds parent objects (lungs, mediastinum, ...) and parent attributes.
_POSSIBLE: dict[str, tuple[str, ...]] = {
    **{a: _ZONES for a in _PARENCHYMA},
    "lung opacity": (*_ZONES, "*costophrenic angle", "*hilar structures", "*cardiophrenic angle"),
    # perihilar and basilar (costophrenic) airspace disease is how reports often place it
    **{a: (*_ZONES, "*costophrenic angle", "*hilar structures") for a in (
        "airspace opacity", "consolidation", "infiltration", "pneumonia", "linear/patchy atelectasis",
        "alveolar hemorrhage", "multiple masses/nodules")},
    "aspiration": (*_ZONES, "*costophrenic angle"),
    "atelectasis": (*_ZONES, "*costophrenic angle", "*hilar structures"),
    "pleural/parenchymal scarring": (*_ZONES, "*costophrenic angle", "*hilar structures"),
    "pneumothorax": (*_ZONES, "*costophrenic angle"),
    "pulmonary edema/hazy opacity": (*_ZONES, "*hilar structures"),
    "vascular congestion": (*_ZONES, "*hilar structures"),
    "vascular redistribution": ("*upper lung zone", "*hilar structures"),
    "mass/nodule (not otherwise specified)": (*_ZONES, "*hilar structures"),
    "calcified nodule": (*_ZONES, "*hilar structures"),
    "lung cancer": (*_ZONES, "*hilar structures", "mediastinum"),
    "granulomatous disease": (*_ZONES, "*hilar structures", "mediastinum"),
    "enlarged hilum": ("*hilar structures",),
    "pleural effusion": ("*mid lung zone", "*lower lung zone", "*costophrenic angle", "*cardiophrenic angle",
                         "*hemidiaphragm"),  # layering (supine) and subpulmonic effusions
    "costophrenic angle blunting": ("*costophrenic angle", "*lower lung zone"),
    "hydropneumothorax": ("*lower lung zone", "*costophrenic angle", "*apical zone"),
    "low lung volumes": ("*lung",), "hyperaeration": ("*lung", "*hemidiaphragm"),
    "fluid overload/heart failure": ("*lung", "cardiac silhouette", "*hilar structures"),
    "enlarged cardiac silhouette": ("cardiac silhouette", "*cardiac silhouette"),
    "pericardial effusion": ("cardiac silhouette",),
    "mediastinal widening": ("mediastinum", "upper mediastinum"),
    "superior mediastinal mass/enlargement": ("upper mediastinum",),
    "goiter": ("neck", "upper mediastinum", "trachea"),
    "mediastinal displacement": ("mediastinum", "upper mediastinum", "trachea", "cardiac silhouette"),
    "pneumomediastinum": ("mediastinum", "upper mediastinum", "neck"),
    "tortuous aorta": ("aortic arch", "descending aorta"),
    "vascular calcification": ("aortic arch", "descending aorta", "cardiac silhouette"),
    "hernia": ("*hemidiaphragm", "abdomen", "cardiac silhouette", "mediastinum"),
    "elevated hemidiaphragm": ("*hemidiaphragm",),
    "diaphragmatic eventration (benign)": ("*hemidiaphragm",),
    "sub-diaphragmatic air": ("*hemidiaphragm", "abdomen", "*upper abdomen"),
    "subcutaneous air": ("*chest wall", "neck", "*shoulder", "*arm"),
    "rib fracture": ("*chest wall", "*upper lung zone", "*mid lung zone", "*lower lung zone"),
    "clavicle fracture": ("*clavicle",),
    "spinal fracture": ("spine",), "scoliosis": ("spine",), "spinal degenerative changes": ("spine",),
    "shoulder osteoarthritis": ("*shoulder",),
    "bone lesion": ("spine", "*clavicle", "*shoulder", "*chest wall", "*arm", "*upper lung zone", "*mid lung zone",
                    "*lower lung zone"),  # rib lesions project over the lung zones
    "breast/nipple shadows": ("*breast", "*mid lung zone", "*lower lung zone"),
    "rotated": ("spine", "*clavicle"),
    "artifact": ("*lung", "*chest wall"), "skin fold": ("*chest wall", "*lung"),
    "chest port": ("*chest wall", "*upper lung zone", *_VENOUS),
    "chest tube": (*_ZONES, "*costophrenic angle", "*chest wall"),
    "pigtail catheter": ("*lower lung zone", "*costophrenic angle", "*chest wall"),
    "endotracheal tube": ("trachea", "carina", "neck", "upper mediastinum"),
    "tracheostomy tube": ("trachea", "neck", "upper mediastinum"),
    "enteric tube": ("abdomen", "mediastinum", "upper mediastinum", "trachea", "neck", "left upper abdomen"),
    "ij line": ("neck", "upper mediastinum", *_VENOUS),
    "subclavian line": ("*clavicle", "*upper lung zone", "upper mediastinum", *_VENOUS),
    "picc": ("*arm", "upper mediastinum", *_VENOUS),
    "swan-ganz catheter": ("cardiac silhouette", "*hilar structures", "*mid lung zone", "*lower lung zone",
                           *_VENOUS),  # tip in a (lobar) pulmonary artery
    "intra-aortic balloon pump": ("aortic arch", "descending aorta", "mediastinum"),
    "mediastinal drain": ("mediastinum", "cardiac silhouette"),
    "cabg grafts": ("cardiac silhouette", "mediastinum"),
    "cardiac pacer and wires": ("cardiac silhouette", "*chest wall", *_VENOUS),
    "prosthetic valve": ("cardiac silhouette",),
    "aortic graft/repair": ("aortic arch", "mediastinum"),
    "sternotomy wires": ("mediastinum", "cardiac silhouette"),
}
POSSIBLE_ATTRIBUTE_OF: dict[str, tuple[str, ...]] = {a: tuple(_both(*_POSSIBLE[a])) for a in ATTRIBUTES}


def _descendants(children: dict[str, list[str]]) -> dict[str, list[str]]:
    """label -> every descendant (depth-first, first occurrence kept); raises on a cycle."""
    out: dict[str, list[str]] = {}

    def walk(node: str, path: tuple[str, ...]) -> list[str]:
        if node in path:
            raise ValueError(f"ontology cycle through {node!r}")
        if node not in out:
            acc: list[str] = []
            for c in children.get(node, []):
                for d in (c, *walk(c, (*path, node))):
                    if d not in acc:
                        acc.append(d)
            out[node] = acc
        return out[node]

    for k in children:
        walk(k, ())
    return {k: v for k, v in out.items() if v}


def all_children() -> dict[str, list[str]]:
    """The published ``all_children`` map (objects and attributes), without the pipeline's edits."""
    return {**_descendants(OBJECT_CHILDREN), **_descendants(ATTRIBUTE_CHILDREN)}


def edited_object_children() -> dict[str, list[str]]:
    """Object descendants after the documented edits (reference-builders 3.2); the generator's view."""
    d = _descendants(OBJECT_CHILDREN)
    d["lungs"] += ["hilar structures", "right hilar structures", "left hilar structures"]
    d["left lung"] += ["left hilar structures"]
    d["right lung"] += ["right hilar structures"]
    d["hilar structures"] = ["right hilar structures", "left hilar structures"]
    d["mediastinum"] += ["aortic arch", "svc"]
    return d


def _ancestors(desc: dict[str, list[str]]) -> dict[str, set[str]]:
    anc: dict[str, set[str]] = {}
    for parent, kids in desc.items():
        for k in kids:
            anc.setdefault(k, set()).add(parent)
    return anc


@cache
def object_ancestors() -> dict[str, frozenset[str]]:
    """Report object -> its ancestors among the report objects (edited hierarchy)."""
    anc = _ancestors(edited_object_children())
    return {o: frozenset(a for a in anc.get(o, ()) if a in REPORT_OBJECTS) for o in REPORT_OBJECTS}


@cache
def attribute_ancestors() -> dict[str, frozenset[str]]:
    anc = _ancestors(_descendants(ATTRIBUTE_CHILDREN))
    return {a: frozenset(anc.get(a, ())) for a in ATTRIBUTES}


@cache
def closed_possible() -> frozenset[tuple[str, str]]:
    """(object, attribute) pairs possible after the pipeline's closure over the 38 report objects.

    Attribute list = the 75 minus ``sternotomy wires`` (dropped when the list is read), so that one keeps
    its raw objects only; every other attribute first gains its objects' parents, then each parent
    attribute gains its descendants' objects.
    """
    in_list = [a for a in ATTRIBUTES if a != "sternotomy wires"]
    obj_anc = object_ancestors()
    poss = {a: {o for o in POSSIBLE_ATTRIBUTE_OF[a] if o in REPORT_OBJECTS} for a in ATTRIBUTES}
    for a in in_list:
        poss[a] |= {p for o in list(poss[a]) for p in obj_anc[o]}
    att_anc = attribute_ancestors()
    grown = {a: set(poss[a]) for a in ATTRIBUTES}
    for a in in_list:
        for p in att_anc[a]:
            grown[p] |= poss[a]
    return frozenset((o, a) for a, objs in grown.items() for o in objs)


def label_pair_count() -> int:
    """Possible pairs over the 36 label objects x 68 label attributes (the paper reports 563)."""
    return sum(1 for o, a in closed_possible() if o in LABEL_OBJECTS and a in LABEL_ATTRIBUTES)


def cui(label: str) -> str:
    """A made-up, stable UMLS-like concept id."""
    return "C" + str(int(hashlib.sha256(label.encode()).hexdigest()[:12], 16) % 10_000_000).zfill(7)


def semantics_files() -> dict[str, bytes]:
    """The three ``semantics/`` files in the real formats, keyed by their paths under SOURCE_ROOT."""
    objects = "".join(f"{o},\n" for o in REPORT_OBJECTS)
    lines = [f"{CATEGORY_OF[a]}|yes|{a}," for a in ATTRIBUTES]
    lines += [f"{c}|yes|{a}," for c, a in OTHER_CATEGORY_LINES]
    labels = sorted({*BOX_OBJECTS, *REPORT_OBJECTS, *ATTRIBUTES, "lungs", "normal", "abnormal"})
    umls = {
        "all_children": all_children(),
        "possible_attribute_of": {a: list(v) for a, v in POSSIBLE_ATTRIBUTE_OF.items()},
        "label_to_UMLS": {label: cui(label) for label in labels},
    }
    return {
        release_path(IMAGENOME, SEMANTICS_OBJECTS): objects.encode(),
        release_path(IMAGENOME, SEMANTICS_ATTRIBUTES): ("\n".join(lines) + "\n").encode(),
        release_path(IMAGENOME, SEMANTICS_UMLS): (json.dumps(umls, indent=2) + "\n").encode(),
    }
