"""Box layout of the phantom radiographs: the reference PA chest and the fit of missing boxes."""

from __future__ import annotations

import numpy as np

Box = tuple[float, float, float, float]

# A normal PA chest in Chest ImaGenome's 224 x 224 box space (x1, y1, x2, y2).
TEMPLATE_BOXES: dict[str, Box] = {
    "right lung": (30, 30, 108, 182), "left lung": (118, 32, 196, 186),
    "right upper lung zone": (30, 30, 108, 76), "right mid lung zone": (30, 76, 108, 130),
    "right lower lung zone": (30, 130, 108, 182), "left upper lung zone": (118, 32, 196, 78),
    "left mid lung zone": (118, 78, 196, 132), "left lower lung zone": (118, 132, 196, 186),
    "right hilar structures": (72, 78, 104, 118), "left hilar structures": (120, 80, 152, 122),
    "right apical zone": (36, 30, 100, 52), "left apical zone": (124, 32, 190, 54),
    "right costophrenic angle": (30, 158, 58, 186), "left costophrenic angle": (168, 162, 196, 190),
    "right cardiophrenic angle": (80, 158, 106, 182), "left cardiophrenic angle": (144, 162, 172, 186),
    "right hemidiaphragm": (30, 158, 110, 192), "left hemidiaphragm": (114, 162, 198, 196),
    "trachea": (102, 8, 122, 90), "spine": (98, 0, 126, 224),
    "right clavicle": (30, 30, 108, 52), "left clavicle": (116, 30, 196, 54),
    "aortic arch": (110, 58, 136, 84), "mediastinum": (80, 40, 152, 182),
    "upper mediastinum": (92, 40, 134, 100), "svc": (92, 60, 110, 106),
    "cardiac silhouette": (78, 102, 172, 184), "left cardiac silhouette": (112, 102, 172, 184),
    "right cardiac silhouette": (78, 102, 112, 184), "cavoatrial junction": (92, 100, 110, 118),
    "right atrium": (80, 112, 108, 172), "descending aorta": (114, 82, 134, 170),
    "carina": (104, 84, 124, 100), "left upper abdomen": (118, 184, 202, 224),
    "right upper abdomen": (24, 180, 110, 224), "abdomen": (24, 180, 202, 224),
}


def side_of(name: str) -> int:
    return -1 if name.startswith("right") else 1 if name.startswith("left") else 0


def _valid(b) -> bool:
    return b is not None and len(b) == 4 and all(np.isfinite(b)) and b[2] - b[0] >= 2 and b[3] - b[1] >= 2


def resolve_boxes(boxes: dict[str, Box]) -> dict[str, np.ndarray]:
    """All 36 boxes plus pseudo-boxes for report objects that have none (breasts, chest walls, ...).

    Missing boxes come from the template, fitted to the given ones by a per-axis scale and shift, so a
    missing box still sits where the rest of the anatomy says it should.
    """
    good = {k: np.clip(np.asarray(v, np.float64), -20, 244) for k, v in boxes.items()
            if k in TEMPLATE_BOXES and _valid(v)}
    out = {}
    fit = []
    for axis in (0, 1):
        t = np.array([TEMPLATE_BOXES[k][i] for k in good for i in (axis, axis + 2)], np.float64)
        g = np.array([good[k][i] for k in good for i in (axis, axis + 2)], np.float64)
        if len(good) >= 3 and np.ptp(t) > 0:
            scale, shift = np.polyfit(t, g, 1)
            fit.append((float(np.clip(scale, 0.6, 1.6)), float(shift)))
        else:
            fit.append((1.0, 0.0))
    (ax, bx), (ay, by) = fit
    for name, (x1, y1, x2, y2) in TEMPLATE_BOXES.items():
        out[name] = good.get(name, np.array([ax * x1 + bx, ay * y1 + by, ax * x2 + bx, ay * y2 + by]))
    if "mediastinum" not in good and {"upper mediastinum", "cardiac silhouette"} <= good.keys():
        um, cs = good["upper mediastinum"], good["cardiac silhouette"]
        out["mediastinum"] = np.array([min(um[0], cs[0]), min(um[1], cs[1]), max(um[2], cs[2]), max(um[3], cs[3])])
    for side, s in (("right", -1), ("left", 1)):
        x1, y1, x2, y2 = out[f"{side} lung"]
        w, h = x2 - x1, y2 - y1
        lat, med = (x1, x2) if s < 0 else (x2, x1)
        cx1, cy1, cx2, cy2 = out[f"{side} clavicle"]
        out[f"{side} breast"] = _span(lat - s * 0.05 * w, lat - s * 0.75 * w, y1 + 0.55 * h, y2 + 0.05 * h)
        out[f"{side} chest wall"] = _span(lat + s * 0.08 * w, lat - s * 0.22 * w, y1 + 0.05 * h, y2 - 0.05 * h)
        out[f"{side} shoulder"] = _span(lat + s * 0.2 * w, lat - s * 0.3 * w, cy1 - 22, cy2 + 6)
        out[f"{side} arm"] = _span(lat + s * 0.35 * w, lat + s * 0.02 * w, cy1, y1 + 0.6 * h)
    tx1, ty1, tx2, _ = out["trachea"]
    out["neck"] = np.array([tx1 - 14, ty1 - 12, tx2 + 14, ty1 + 24])
    return out


def _span(xa: float, xb: float, y1: float, y2: float) -> np.ndarray:
    return np.array([min(xa, xb), y1, max(xa, xb), y2])
