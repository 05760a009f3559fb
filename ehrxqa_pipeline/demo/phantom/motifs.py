"""Which motif draws each Chest ImaGenome attribute in a phantom radiograph.

One row per attribute: the drawing primitive (``kind``), its parameters (what makes this attribute look
unlike its neighbours: texture, shape, size, density) and its scope: ``box`` motifs stay inside the
finding's box, ``path`` motifs (tubes, lines, devices) run along a path through it from an anatomical
entry point, ``global`` motifs change the whole image. Densities are in the renderer's units (soft tissue
about 0.5, lung air takes about 0.32 off it, bone adds up to 0.3, metal up to 0.42). Attributes outside the
table fall back to a motif of their category (``CATEGORY_FALLBACK``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ehrxqa_pipeline.demo.phantom import devices as dv
from ehrxqa_pipeline.demo.phantom import draw as dr
from ehrxqa_pipeline.demo.phantom import regions as rg
from ehrxqa_pipeline.demo.phantom.anatomy import Canvas
from ehrxqa_pipeline.demo.phantom.boxes import side_of
from ehrxqa_pipeline.rng import generator

KINDS: dict[str, Callable] = {
    "opacity": dr.opacity, "collapse": dr.collapse, "vessels": dr.vessels, "reticular": dr.reticular,
    "nodules": dr.nodules, "pleural_fluid": rg.pleural_fluid, "pneumothorax": rg.pneumothorax,
    "lucency": rg.lucency, "strands": rg.strands, "heart": rg.heart, "mediastinal": rg.mediastinal,
    "diaphragm": rg.diaphragm, "bone": rg.bone, "subcutaneous_air": rg.subcutaneous_air, "tube": dv.tube,
    "device": dv.device, "technical": dv.technical,
}


@dataclass(frozen=True)
class Motif:
    kind: str
    params: dict = field(default_factory=dict)
    scope: str = "box"  # box | path | global
    side: int = 1  # lateral direction for midline objects: -1 patient's right (image left), +1 left


def _m(kind: str, scope: str = "box", side: int = 1, **params) -> Motif:
    return Motif(kind, params, scope, side)


def _tube(route: str, width: float, val: float, style: str = "solid", tip: str | None = None, side: int = -1):
    return _m("tube", "path", side, route=route, width=width, val=val, style=style, tip=tip)


MOTIFS: dict[str, Motif] = {
    # anatomicalfinding: parenchyma
    "lung opacity": _m("opacity", tex="haze", dens=0.2, size=0.75, rough=0.4),
    "airspace opacity": _m("opacity", tex="fluffy", dens=0.2, size=0.6),
    "consolidation": _m("opacity", tex="dense", dens=0.3, size=0.65, rough=0.35, at=(0.62, 0.5)),
    "infiltration": _m("opacity", tex="streaky", dens=0.18, size=0.75),
    "atelectasis": _m("collapse", shape="band", dens=0.28),
    "linear/patchy atelectasis": _m("collapse", shape="plates", dens=0.17),
    "lobar/segmental collapse": _m("collapse", shape="wedge", dens=0.26),
    "pulmonary edema/hazy opacity": _m("opacity", tex="perihilar", dens=0.2),
    "vascular congestion": _m("vessels", pattern="congestion", dens=0.2),
    "vascular redistribution": _m("vessels", pattern="redistribution", dens=0.26),
    "increased reticular markings/ild pattern": _m("reticular", cell=5.0, dens=0.14),
    "pleural effusion": _m("pleural_fluid", form="effusion", dens=0.38),
    "costophrenic angle blunting": _m("pleural_fluid", form="blunting", dens=0.38),
    "pleural/parenchymal scarring": _m("strands", form="scar", dens=0.2),
    "bronchiectasis": _m("strands", form="bronchiectasis", dens=0.26),
    "enlarged cardiac silhouette": _m("heart", form="enlarged", dens=0.05),
    "mediastinal displacement": _m("mediastinal", form="displacement", dens=0.08),
    "mediastinal widening": _m("mediastinal", form="widening", dens=0.08),
    "enlarged hilum": _m("mediastinal", form="hilum", dens=0.06),
    "tortuous aorta": _m("mediastinal", form="tortuous", dens=0.1),
    "vascular calcification": _m("mediastinal", form="calcification", dens=0.45),
    "pneumomediastinum": _m("mediastinal", form="pneumomediastinum", dens=0.2),
    "pneumothorax": _m("pneumothorax", dens=0.1),
    "hydropneumothorax": _m("pleural_fluid", form="hydropneumothorax", dens=0.3),
    "lung lesion": _m("nodules", n=1, r=0.19, dens=0.28, lobulate=0.15, edge=0.4),
    "mass/nodule (not otherwise specified)": _m("nodules", n=1, r=0.16, dens=0.3),
    "multiple masses/nodules": _m("nodules", n=(4, 7), r=0.085, dens=0.28),
    "calcified nodule": _m("nodules", n=1, r=0.075, dens=0.75, edge=0.05),
    "superior mediastinal mass/enlargement": _m("mediastinal", form="mass", dens=0.1),
    # anatomicalfinding: bones, diaphragm, soft tissue
    "rib fracture": _m("bone", form="rib", dens=0.18),
    "clavicle fracture": _m("bone", form="clavicle", dens=0.16),
    "spinal fracture": _m("bone", form="vertebra", dens=0.4),
    "hyperaeration": _m("lucency", form="hyperaeration", dens=0.09),
    "cyst/bullae": _m("lucency", form="bullae", dens=0.08),
    "elevated hemidiaphragm": _m("diaphragm", form="elevated", dens=0.06),
    "diaphragmatic eventration (benign)": _m("diaphragm", form="eventration", dens=0.1),
    "sub-diaphragmatic air": _m("diaphragm", form="free_air", dens=0.22),
    "subcutaneous air": _m("subcutaneous_air", dens=0.22),
    "hernia": _m("diaphragm", form="hernia", dens=0.2),
    "scoliosis": _m("bone", form="scoliosis", dens=0.16),
    "spinal degenerative changes": _m("bone", form="osteophytes", dens=0.3),
    "shoulder osteoarthritis": _m("bone", form="shoulder", dens=0.25),
    "bone lesion": _m("bone", form="lytic", dens=0.25),
    # disease
    "alveolar hemorrhage": _m("opacity", tex="acinar", dens=0.17, size=0.8),
    "aspiration": _m("opacity", tex="dependent", dens=0.26),
    "copd/emphysema": _m("lucency", form="emphysema", dens=0.06),
    "fluid overload/heart failure": _m("vessels", pattern="kerley", dens=0.2),
    "goiter": _m("mediastinal", form="goiter", dens=0.1),
    "granulomatous disease": _m("nodules", n=(6, 10), r=0.04, dens=0.55, edge=0.05),
    "interstitial lung disease": _m("reticular", cell=8.0, dens=0.16, honeycomb=True),
    "lung cancer": _m("nodules", n=1, r=0.24, dens=0.3, lobulate=0.12, spicules=12),
    "pericardial effusion": _m("heart", form="pericardial", dens=0.08),
    "pneumonia": _m("opacity", tex="fluffy", dens=0.27, size=0.75, rough=0.45, at=(0.55, 0.55)),
    # technicalassessment
    "artifact": _m("technical", form="artifact", dens=0.0),
    "breast/nipple shadows": _m("technical", form="breast", dens=0.1),
    "low lung volumes": _m("technical", form="low_volumes", dens=0.12),
    "rotated": _m("technical", "global", form="rotated", dens=0.12),
    "skin fold": _m("technical", form="skin_fold", dens=0.14),
    # tubesandlines
    "chest port": _tube("port", 2.5, 220, tip="port"),
    "chest tube": _tube("chest", 5.5, 230, "stripe", tip="holes"),
    "endotracheal tube": _tube("ett", 5.0, 220, "stripe"),
    "enteric tube": _tube("enteric", 3.0, 210, tip="marker", side=1),
    "ij line": _tube("ij", 2.5, 215),
    "intra-aortic balloon pump": _tube("iabp", 2.2, 200, tip="marker", side=1),
    "mediastinal drain": _tube("drain", 6.0, 200, "walls"),
    "picc": _tube("picc", 2.0, 205),
    "pigtail catheter": _tube("pigtail", 2.4, 215, tip="loop"),
    "subclavian line": _tube("subclavian", 2.6, 215),
    "swan-ganz catheter": _tube("swan", 2.5, 220, side=1),
    "tracheostomy tube": _tube("trach", 8.0, 210, "walls", tip="flange"),
    # device
    "cabg grafts": _m("device", "path", form="cabg"),
    "cardiac pacer and wires": _m("device", "path", form="pacer"),
    "prosthetic valve": _m("device", "path", form="valve"),
    "aortic graft/repair": _m("device", "path", form="graft"),
    "sternotomy wires": _m("device", "path", form="sternotomy"),
}

CATEGORY_FALLBACK: dict[str, Motif] = {
    "anatomicalfinding": _m("opacity", tex="haze", dens=0.15),
    "disease": _m("opacity", tex="fluffy", dens=0.18),
    "technicalassessment": _m("technical", form="skin_fold", dens=0.1),
    "tubesandlines": _tube("ij", 2.5, 210),
    "device": _m("device", "path", form="cabg"),
}
_ORDER = {a: i for i, a in enumerate(MOTIFS)}


def motif_for(attribute: str, category: str | None = None) -> Motif:
    return MOTIFS.get(attribute) or CATEGORY_FALLBACK.get(category or "", CATEGORY_FALLBACK["anatomicalfinding"])


def draw_findings(c: Canvas, findings: Iterable[tuple[str, str]], seed: int) -> None:
    """Draw each distinct (object, attribute) in its box; objects without a box (``unknown``) are skipped.

    Each finding draws from its own random stream and the order is fixed, so a finding looks the same
    whatever else the image shows and however the input is ordered.
    """
    pairs = {(str(o), str(a)) for o, a in findings if o is not None and a is not None}
    c.lung0 = c.lung.copy()
    for obj, attr in sorted(pairs, key=lambda f: (_ORDER.get(f[1], len(_ORDER)), f[1], f[0])):
        box = c.box.get(obj)
        if box is None:
            continue
        m = motif_for(attr)
        rng = generator(seed, f"finding:{obj}:{attr}")
        KINDS[m.kind](dr.Win(c, box, side_of(obj) or m.side), rng, **m.params)
