"""Phantom radiograph anatomy: the canvas and the normal frontal chest drawn from its boxes.

Everything is drawn as *density* (0 = air, about 0.5 = soft tissue, about 0.9 = metal) into float32 layers; the
renderer maps density to grey levels at the end. Patient's right lies on the image left, so the lateral
direction of a right-sided object is -x (``side`` = -1) and of a left-sided one +x (``side`` = +1).
"""

from __future__ import annotations

import cv2
import numpy as np


class Canvas:
    """Density layers of one image plus the anatomy the finding motifs need (lung air, heart, spine)."""

    def __init__(self, rows: int, cols: int, boxes224: dict[str, np.ndarray], view: str):
        self.h, self.w, self.view = rows, cols, view
        self.sx, self.sy = cols / 224.0, rows / 224.0
        self.box = {k: np.array([b[0] * self.sx, b[1] * self.sy, b[2] * self.sx, b[3] * self.sy], np.float32)
                    for k, b in boxes224.items()}
        self.d = np.zeros((rows, cols), np.float32)
        self.metal = np.zeros((rows, cols), np.uint8)  # radiopaque devices, anti-aliased
        self.lung = np.zeros((rows, cols), np.float32)  # aerated lung not hidden by heart/mediastinum
        self.lung0: np.ndarray | None = None  # the lung before findings used its air up
        self.vessels = np.zeros((rows, cols), np.float32)  # the vessel density added to d
        self.solid = np.zeros((rows, cols), np.float32)  # heart and mediastinum
        self.mid, self.clav_y = cols / 2.0, 0.2 * rows  # spine centre line and clavicle level (pixels)
        self.px = min(rows, cols) / 350.0  # one "pixel" of a 350-px image, for line widths

    def t(self, v: float) -> int:
        """A line thickness in pixels."""
        return max(1, int(round(v * self.px)))


def pts(xy) -> np.ndarray:
    """Sub-pixel polyline points for cv2 (shift=4)."""
    return np.round(np.asarray(xy, np.float64) * 16).astype(np.int32).reshape(-1, 1, 2)


def p16(xy) -> tuple[int, int]:
    """One sub-pixel point for cv2 (shift=4)."""
    return int(round(float(xy[0]) * 16)), int(round(float(xy[1]) * 16))


def blur(a: np.ndarray, sigma: float) -> np.ndarray:
    return cv2.GaussianBlur(a, (0, 0), max(sigma, 0.3))


def _lung_polygon(c: Canvas, side: int) -> np.ndarray:
    name = "right" if side < 0 else "left"
    x1, y1, x2, y2 = c.box[f"{name} lung"]
    w, h = x2 - x1, y2 - y1
    dome = float(np.clip((c.box[f"{name} hemidiaphragm"][1] - y1) / h, 0.6, 0.97))
    a_apex = np.linspace(np.pi, 0, 14)  # over the apex from medial to lateral
    apex = np.stack([0.42 - 0.32 * np.cos(a_apex), 0.2 - 0.2 * np.sin(a_apex)], 1)
    lat_v = np.linspace(0.22, 1.0, 10)
    lateral = np.stack([0.74 + 0.26 * np.sin(np.pi / 2 * (lat_v - 0.2) / 0.8) ** 0.7, lat_v], 1)
    base_a = np.linspace(0.97, 0.04, 12)
    base = np.stack([base_a, dome + (1 - dome) * np.clip((base_a - 0.45) / 0.52, 0, 1) ** 1.6
                     + 0.05 * np.clip(0.45 - base_a, 0, 1) / 0.45], 1)
    medial = np.array([[0.02, 0.5], [0.06, 0.25]])
    p = np.concatenate([apex, lateral, base, medial])
    xs = x1 + p[:, 0] * w if side > 0 else x2 - p[:, 0] * w
    return np.stack([xs, y1 + p[:, 1] * h], 1)


_VESSEL_SEGMENTS = ((3.4, 150), (2.4, 115), (1.6, 80), (1.1, 55))  # (width, density) from hilum outwards


def _vessel_tree(layer: np.ndarray, c: Canvas, side: int, rng: np.random.Generator) -> None:
    """Branching pulmonary vessels fanning out from the hilum, thinner and fainter towards the periphery."""
    name = "right" if side < 0 else "left"
    hx1, hy1, hx2, hy2 = c.box[f"{name} hilar structures"]
    lx1, ly1, lx2, ly2 = c.box[f"{name} lung"]
    reach = max(lx2 - lx1, 8.0)
    n = int(rng.integers(11, 16))
    ang0 = rng.uniform(-1.25, 1.35, n) + np.where(np.arange(n) % 3 == 0, 0.25, 0.0)  # 0 = lateral, + = down
    x = (hx1 + hx2) / 2 + rng.normal(0, 0.15, n) * (hx2 - hx1)
    y = (hy1 + hy2) / 2 + rng.normal(0, 0.2, n) * (hy2 - hy1)
    step = (rng.uniform(0.55, 1.0, n) * reach / 4)[:, None] * rng.uniform(0.8, 1.2, (n, 4))
    ang = ang0[:, None] + np.cumsum(rng.normal(0, 0.18, (n, 4)), 1)
    xs = np.concatenate([x[:, None], x[:, None] + side * np.cumsum(np.cos(ang) * step, 1)], 1)
    ys = np.concatenate([y[:, None], y[:, None] + np.cumsum(np.sin(ang) * step, 1)], 1)
    branch = ang + rng.choice([-1, 1], (n, 4)) * rng.uniform(0.35, 0.7, (n, 4))
    bx = xs[:, 1:] + side * np.cos(branch) * step * 0.8
    by = ys[:, 1:] + np.sin(branch) * step * 0.8
    p = np.round(np.stack([xs, ys], -1) * 16).astype(np.int64).tolist()
    q = np.round(np.stack([bx, by], -1) * 16).astype(np.int64).tolist()
    for seg, (thick, val) in enumerate(_VESSEL_SEGMENTS):
        t, tb = c.t(thick), c.t(thick * 0.7)
        for k in range(n):
            cv2.line(layer, p[k][seg], p[k][seg + 1], val, t, cv2.LINE_AA, 4)
            if seg in (1, 2):  # a side branch
                cv2.line(layer, p[k][seg + 1], q[k][seg], val * 0.8, tb, cv2.LINE_AA, 4)


def smooth_noise(rng: np.random.Generator, shape: tuple[int, int], cell: float) -> np.ndarray:
    """Zero-mean, roughly unit-variance noise with features about ``cell`` pixels wide."""
    h, w = max(int(shape[0]), 1), max(int(shape[1]), 1)
    small = rng.standard_normal((max(2, int(h / cell) + 2), max(2, int(w / cell) + 2)), dtype=np.float32)
    return cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC) * 1.6


def heart_polygon(cs: np.ndarray, f: float) -> np.ndarray:
    """Cardiac outline in its box: right atrial border on the image left, left ventricle and apex on the right."""
    u = np.array([0.34, 0.22, 0.1, 0.05, 0.07, 0.16, 0.5, 0.84, 0.95, 0.99, 0.93, 0.78, 0.62])
    v = np.array([0.0, 0.2, 0.42, 0.62, 0.84, 1.0, 1.04, 1.0, 0.86, 0.62, 0.36, 0.16, 0.0])
    u, v = 0.55 + (u - 0.55) * f, 1.0 - (1.0 - v) * f
    return np.stack([cs[0] + u * (cs[2] - cs[0]), cs[1] + v * (cs[3] - cs[1])], 1)


def _body(c: Canvas, mid: float, clav_y: float) -> np.ndarray:
    h, w = c.h, c.w
    rl, ll = c.box["right lung"], c.box["left lung"]
    nw = 0.13 * w
    body = np.zeros((h, w), np.uint8)
    half = []  # each side of the outline from the neck down; the right side reversed to close the polygon
    for s, lat in ((1, float(ll[2])), (-1, float(rl[0]))):
        wall = lat + s * 0.07 * w
        edge = w + 5.0 if s > 0 else -5.0
        q = [[mid + s * nw, -5], [mid + s * nw * 1.1, clav_y - 0.08 * h], [edge, clav_y - 0.01 * h],
             [edge, clav_y + 0.07 * h], [wall, clav_y + 0.16 * h], [wall, float(ll[3] if s > 0 else rl[3])],
             [wall + s * 0.04 * w, h + 5.0]]
        half.append(q if s > 0 else q[::-1])
    cv2.fillPoly(body, [pts(half[0] + half[1])], 255, cv2.LINE_AA, 4)
    return blur(body.astype(np.float32), 2.5 * c.px) * (1 / 255)


def _ribs_and_clavicles(c: Canvas, mid: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    h, w = c.h, c.w
    rib = np.zeros((h, w), np.uint8)
    bone = np.zeros((h, w), np.uint8)
    for s, name in ((-1, "right"), (1, "left")):
        lung = c.box[f"{name} lung"]
        lat = float(lung[0] if s < 0 else lung[2])
        span = abs(mid - lat)
        spacing = (lung[3] - lung[1]) / 9.6
        y0 = lung[1] - 0.03 * h + rng.normal(0, 0.004 * h)
        for k in range(10):  # posterior ribs: up from the spine, over a crest, down to the lateral wall
            ry = (0.085 + 0.006 * k) * h
            cx = mid + s * 0.25 * span
            a0, a1 = (180, 290) if s < 0 else (250, 360)
            yk = y0 + k * spacing + ry
            cv2.ellipse(rib, p16([cx, yk]), p16([0.9 * span, ry]), 0, a0, a1, 70,
                        c.t(7), cv2.LINE_AA, 4)
            cv2.ellipse(rib, p16([cx, yk + 3.2 * c.px]), p16([0.9 * span, ry]), 0, a0,
                        a1, 105, c.t(1.4), cv2.LINE_AA, 4)
            if 1 < k < 8:  # anterior rib: fainter, running down and medially from the lateral wall
                arx = span * 0.55
                cv2.ellipse(rib, p16([lat - s * arx, y0 + k * spacing - 0.02 * h]),
                            p16([arx, 0.1 * h]), 0, 100 if s < 0 else 5, 175 if s < 0 else 80, 32,
                            c.t(6), cv2.LINE_AA, 4)
        cl = c.box[f"{name} clavicle"]
        clw, clh = cl[2] - cl[0], cl[3] - cl[1]
        aa = np.linspace(0.02, 1.0, 14)
        xs = cl[2] - aa * clw if s < 0 else cl[0] + aa * clw
        ys = cl[1] + clh * (0.75 - 0.5 * aa + 0.1 * np.sin(2 * np.pi * aa))
        cv2.polylines(bone, [pts(np.stack([xs, ys], 1))], False, 120, c.t(min(9.0, 0.3 * clh / c.px)),
                      cv2.LINE_AA, 4)
        head = [lat + s * 0.035 * w, cl[1] + 0.08 * h]
        cv2.circle(bone, p16(head), int(16 * 0.085 * w), 35, -1, cv2.LINE_AA, 4)
        cv2.circle(bone, p16(head), int(16 * 0.085 * w), 60, c.t(2), cv2.LINE_AA, 4)
    return rib, bone


def _spine(bone: np.ndarray, c: Canvas, mid: float, rng: np.random.Generator) -> None:
    sp = c.box["spine"]
    spw = 0.62 * (sp[2] - sp[0])
    vh = 0.052 * c.h
    y = float(rng.uniform(-vh, 0))
    while y < c.h:
        cv2.rectangle(bone, p16([mid - spw / 2, y]), p16([mid + spw / 2, y + vh * 0.8]),
                      45, -1, cv2.LINE_AA, 4)
        for s in (-1, 1):  # pedicles
            cv2.ellipse(bone, p16([mid + s * spw * 0.34, y + vh * 0.35]),
                        p16([spw * 0.1, vh * 0.2]), 0, 0, 360, 85, c.t(1.5), cv2.LINE_AA, 4)
        cv2.ellipse(bone, p16([mid, y + vh * 0.55]), p16([spw * 0.06, vh * 0.22]), 0, 0,
                    360, 70, -1, cv2.LINE_AA, 4)
        y += vh


def draw_frontal(c: Canvas, rng: np.random.Generator, ap: bool) -> None:
    h, w = c.h, c.w
    b = c.box
    mid = float((b["spine"][0] + b["spine"][2]) / 2)
    c.mid = mid
    clav_y = float(min(b["right clavicle"][1], b["left clavicle"][1]))
    c.clav_y = clav_y
    body = _body(c, mid, clav_y)
    c.d += body * rng.uniform(0.48, 0.53)
    # lungs, cut by heart and mediastinum
    lungs = np.zeros((h, w), np.uint8)
    abd = np.zeros((h, w), np.uint8)  # liver and spleen under the domes
    medial = []
    for s in (-1, 1):
        poly = _lung_polygon(c, s)
        cv2.fillPoly(lungs, [pts(poly)], 255, cv2.LINE_AA, 4)
        base = poly[24:36]
        lat = base[0, 0] + s * 0.15 * w
        cv2.fillPoly(abd, [pts(np.vstack([base, [[base[-1, 0], h + 5], [lat, h + 5], [lat, base[0, 1]]]]))], 255,
                     cv2.LINE_AA, 4)
        medial.append(base[-1])
    cv2.fillPoly(abd, [pts([medial[0], medial[1], [medial[1][0], h + 5], [medial[0][0], h + 5]])], 255,
                 cv2.LINE_AA, 4)
    solid = np.zeros((h, w), np.uint8)
    cs = b["cardiac silhouette"]
    heart_f = rng.uniform(0.84, 0.9) * (1.06 if ap else 1.0)  # AP magnifies the heart
    cv2.fillPoly(solid, [pts(heart_polygon(cs, heart_f))], 255, cv2.LINE_AA, 4)
    um = b["upper mediastinum"]
    umw = um[2] - um[0]
    cv2.fillPoly(solid, [pts([[um[0] + 0.14 * umw, um[1] - 0.06 * h], [um[2] - 0.24 * umw, um[1] - 0.06 * h],
                              [um[2] - 0.12 * umw, cs[1] + 0.25 * (cs[3] - cs[1])],
                              [um[0] + 0.06 * umw, cs[1] + 0.25 * (cs[3] - cs[1])]])], 255, cv2.LINE_AA, 4)
    ar = b["aortic arch"]
    cv2.circle(solid, p16([ar[0] + 0.6 * (ar[2] - ar[0]), (ar[1] + ar[3]) / 2]),
               int(16 * 0.42 * min(ar[2] - ar[0], ar[3] - ar[1])), 255, -1, cv2.LINE_AA, 4)
    lungf = blur(lungs.astype(np.float32) * (1 / 255), 1.8 * c.px)
    solidf = blur(solid.astype(np.float32) * (1 / 255), 1.8 * c.px)
    c.solid = solidf
    c.lung = lungf * (1 - solidf)
    yy = np.linspace(0, 1, h, dtype=np.float32)[:, None]
    mottle = 1 + 0.04 * smooth_noise(rng, (h, w), 12 * c.px)
    c.d -= c.lung * (0.27 + 0.1 * yy) * mottle * rng.uniform(0.92, 1.08)
    c.d += solidf * 0.1 + blur(abd.astype(np.float32), 2.0 * c.px) * (0.07 / 255) * body
    # hila and vessels
    ves = np.zeros((h, w), np.uint8)
    for s, name in ((-1, "right"), (1, "left")):
        hx1, hy1, hx2, hy2 = b[f"{name} hilar structures"]
        cv2.ellipse(ves, p16([(hx1 + hx2) / 2, (hy1 + hy2) / 2]),
                    p16([0.3 * (hx2 - hx1), 0.42 * (hy2 - hy1)]), 0, 0, 360, 110, -1, cv2.LINE_AA, 4)
        _vessel_tree(ves, c, s, rng)
    c.vessels = blur(ves.astype(np.float32), 1.1 * c.px) * (0.17 / 255) * np.clip(c.lung * 1.3, 0, 1)
    c.d += c.vessels
    # trachea and main bronchi (air)
    tr, ca = b["trachea"], b["carina"]
    tx = (tr[0] + tr[2]) / 2
    cy = float(ca[1] + 0.3 * (ca[3] - ca[1]))
    air = np.zeros((h, w), np.uint8)
    tw = c.t(0.45 * (tr[2] - tr[0]) / c.px)
    cv2.line(air, p16([tx, tr[1] - 10]), p16([tx, cy]), 255, tw, cv2.LINE_AA, 4)
    for s in (-1, 1):
        cv2.line(air, p16([tx, cy]), p16([tx + s * 0.05 * w, cy + 0.06 * h]), 200,
                 max(1, int(tw * 0.7)), cv2.LINE_AA, 4)
    c.d -= blur(air.astype(np.float32), 1.4 * c.px) * (0.1 / 255)
    # bones
    rib, bone = _ribs_and_clavicles(c, mid, rng)
    _spine(bone, c, mid, rng)
    c.d += blur(bone.astype(np.float32) * (1 - 0.75 * solidf)
                + rib.astype(np.float32) * (0.2 + 0.8 * np.clip(c.lung * 1.2, 0, 1)), 0.95 * c.px) * (0.3 / 255)
    # abdomen: a gastric bubble under the left dome
    ld = b["left hemidiaphragm"]
    if rng.random() < 0.75:
        gb = np.zeros((h, w), np.uint8)
        gw = ld[2] - ld[0]
        cv2.ellipse(gb, p16([ld[0] + rng.uniform(0.35, 0.6) * gw, ld[3] + 0.03 * h]),
                    p16([rng.uniform(0.12, 0.2) * gw, 0.03 * h]), 0, 0, 360, 255, -1, cv2.LINE_AA, 4)
        c.d -= blur(gb.astype(np.float32), 2 * c.px) * (0.1 / 255) * (1 - lungf)
