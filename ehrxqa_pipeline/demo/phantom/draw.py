"""Drawing primitives of the phantom findings: a box window with local coordinates, and the lung motifs.

Box-local coordinates: ``a`` runs from the box's medial edge (0) to its lateral edge (1), so one motif
serves both sides; ``v`` runs from the top (0) to the bottom (1). Every motif adds density to ``c.d``
(negative for air); metal goes to ``c.metal``.
"""

from __future__ import annotations

import cv2
import numpy as np

from ehrxqa_pipeline.demo.phantom.anatomy import Canvas, blur, p16, pts, smooth_noise


AIR = 0.32  # density the lung's air takes away from soft tissue (phantom.anatomy)


class Win:
    """The pixels around one box, with lateral/down coordinates relative to the box."""

    def __init__(self, c: Canvas, box: np.ndarray, side: int, margin: float = 0.08):
        x1, y1, x2, y2 = (float(v) for v in box)
        self.c, self.side = c, (1 if side >= 0 else -1)
        self.bw, self.bh = max(x2 - x1, 2.0), max(y2 - y1, 2.0)
        self.box = (x1, y1, x1 + self.bw, y1 + self.bh)
        mx, my = margin * self.bw + 2, margin * self.bh + 2
        X1 = int(np.clip(np.floor(x1 - mx), 0, c.w - 1))
        Y1 = int(np.clip(np.floor(y1 - my), 0, c.h - 1))
        X2 = int(np.clip(np.ceil(x1 + self.bw + mx), X1 + 1, c.w))
        Y2 = int(np.clip(np.ceil(y1 + self.bh + my), Y1 + 1, c.h))
        self.org, self.sl, self.shape = (X1, Y1), np.s_[Y1:Y2, X1:X2], (Y2 - Y1, X2 - X1)
        self.gx = np.arange(X1, X2, dtype=np.float32)[None, :] + 0.5  # canvas pixel coordinates
        self.gy = np.arange(Y1, Y2, dtype=np.float32)[:, None] + 0.5
        xs = (self.gx - x1) / self.bw
        self.a = xs if self.side > 0 else 1 - xs
        self.v = (self.gy - y1) / self.bh
        self.lung = c.lung[self.sl]
        # lung motifs draw only where there is lung, except in boxes with little lung (spine, trachea) where
        # a faint version still shows, so every (object, attribute) pair changes its box
        anatomy = (c.lung if c.lung0 is None else c.lung0)[self.sl]  # before any finding used air up
        self.floor = 0.3 * float(np.clip(1 - anatomy.mean() / 0.5, 0, 1))
        self.inside = ramp(0.47 - np.abs(self.a - 0.5), 0.1) * ramp(0.47 - np.abs(self.v - 0.5), 0.1)
        # everything a motif draws fades out just beyond its box, so no motif shows a window's edge
        self.taper = ramp(0.56 - np.abs(self.a - 0.5), 0.08) * ramp(0.56 - np.abs(self.v - 0.5), 0.08)

    def P(self, a, v) -> np.ndarray:
        """Canvas pixel coordinates of box-local points."""
        a, v = np.asarray(a, np.float64), np.asarray(v, np.float64)
        x = self.box[0] + (a if self.side > 0 else 1 - a) * self.bw
        return np.stack(np.broadcast_arrays(x, self.box[1] + v * self.bh), -1)

    def local(self, xy: np.ndarray) -> np.ndarray:
        return np.asarray(xy, np.float64) - self.org

    def lines(self, polys, thick: float, val: int = 255, closed: bool = False) -> np.ndarray:
        """Anti-aliased polylines (canvas coordinates) rasterised in this window, as a 0..1 mask."""
        m = np.zeros(self.shape, np.uint8)
        cv2.polylines(m, [pts(self.local(p)) for p in polys], closed, val, self.c.t(thick), cv2.LINE_AA, 4)
        return m.astype(np.float32) * (1 / 255)

    def poly(self, p: np.ndarray, soft: float = 1.0) -> np.ndarray:
        m = np.zeros(self.shape, np.uint8)
        cv2.fillPoly(m, [pts(self.local(p))], 255, cv2.LINE_AA, 4)
        return blur(m.astype(np.float32) * (1 / 255), soft * self.c.px)

    def noise(self, rng: np.random.Generator, cell: float) -> np.ndarray:
        return smooth_noise(rng, self.shape, max(cell * self.c.px, 1.0))

    def add(self, arr) -> None:
        self.c.d[self.sl] += arr * self.taper

    def opacify(self, amount) -> None:
        """Add tissue density where lung air is (weighted by the air left there) and use that air up, so
        opacities stacked in one region saturate near soft-tissue density instead of piling up."""
        add = amount * self.taper * (self.floor + (1 - self.floor) * np.clip(self.lung * 1.3, 0, 1))
        self.c.d[self.sl] += add
        self.lung *= np.clip(1 - add * (1 / AIR), 0, 1)

    def fill(self, m, dens: float) -> None:
        """Solid tissue over the fraction ``m`` of each pixel: replaces the lung air there and adds ``dens``."""
        m = np.clip(m * self.taper, 0, 1)
        self.c.d[self.sl] += m * (AIR * self.lung + dens)
        self.lung *= 1 - m

    def radius(self, frac: float, lo: float = 2.5) -> float:
        return max(frac * min(self.bw, self.bh), lo * self.c.px)


def ramp(x, edge: float):
    """Soft step: 0 below -edge/2, 1 above +edge/2."""
    return np.clip(x / edge + 0.5, 0.0, 1.0)


def spline(p: np.ndarray, n: int = 10) -> np.ndarray:
    """Catmull-Rom curve through the control points."""
    p = np.asarray(p, np.float64)
    if len(p) < 3:
        return p
    q = np.concatenate([p[:1], p, p[-1:]])
    t = np.linspace(0, 1, n, endpoint=False)[:, None]
    out = []
    for i in range(1, len(q) - 2):
        p0, p1, p2, p3 = q[i - 1], q[i], q[i + 1], q[i + 2]
        out.append(0.5 * (2 * p1 + (-p0 + p2) * t + (2 * p0 - 5 * p1 + 4 * p2 - p3) * t ** 2
                          + (-p0 + 3 * p1 - 3 * p2 + p3) * t ** 3))
    return np.concatenate(out + [p[-1:]])


def sev(rng: np.random.Generator) -> float:
    return float(rng.uniform(0.7, 1.25))


def blob(w: Win, rng, ca, cv, ra, rv, rough=0.3, edge=0.2, cell=10.0) -> np.ndarray:
    r = np.sqrt(((w.a - ca) / ra) ** 2 + ((w.v - cv) / rv) ** 2)
    if rough:
        r = r + rough * 0.3 * w.noise(rng, cell)
    return ramp(1 - r, edge)


def _bronchograms(w: Win, rng, ca, cv) -> np.ndarray:
    polys = []
    for _ in range(3):
        ang = rng.uniform(-0.6, 0.6)
        a = ca - 0.25 + 0.5 * np.arange(5) / 4
        polys.append(w.P(a, cv + np.tan(ang) * (a - ca) + rng.normal(0, 0.02, 5)))
    return blur(w.lines(polys, 2.2), 0.8 * w.c.px)


def opacity(w: Win, rng, tex: str, dens: float, size: float = 0.7, rough: float = 0.3, at=(0.62, 0.48)) -> None:
    """Parenchymal opacities; ``tex`` picks the texture so each attribute has its own look."""
    ca, cv = at[0] + rng.uniform(-0.08, 0.08), at[1] + rng.uniform(-0.08, 0.08)
    ra, rv = size * 0.5 * rng.uniform(0.85, 1.15), size * 0.5 * rng.uniform(0.85, 1.15)
    if tex == "haze":  # ill-defined ground glass
        m = blob(w, rng, ca, cv, ra * 1.2, rv * 1.2, rough, edge=0.7, cell=20) * (1 + 0.1 * w.noise(rng, 6))
    elif tex == "fluffy":  # confluent airspace nodules with fuzzy margins
        m = blob(w, rng, ca, cv, ra, rv, rough + 0.2, edge=0.45, cell=12)
        m = m * np.clip(0.8 + 0.22 * w.noise(rng, 10), 0.4, 1.3)
    elif tex == "dense":  # homogeneous, sharply marginated, air bronchograms
        m = blob(w, rng, ca, cv, ra, rv, rough, edge=0.3, cell=14) * (1 - 0.4 * _bronchograms(w, rng, ca, cv))
    elif tex == "streaky":  # interstitial streaks, elongated horizontally
        small = rng.standard_normal((max(2, w.shape[0] // max(1, w.c.t(5)) + 2), 3), dtype=np.float32)
        streak = cv2.resize(small, (w.shape[1], w.shape[0]), interpolation=cv2.INTER_CUBIC)
        m = blob(w, rng, ca, cv, ra, rv, rough, edge=0.4) * np.clip(0.55 + 0.9 * streak, 0, 1.8)
    elif tex == "perihilar":  # bat-wing: densest medially, fading to the periphery
        m = ramp(0.8 - w.a * 1.1, 0.6) * ramp(0.45 - np.abs(w.v - cv), 0.5) * (1 + 0.15 * w.noise(rng, 10))
    elif tex == "acinar":  # diffuse small rosettes over ground glass
        spots = np.clip((w.noise(rng, 4.0) - 0.8) * 1.2, 0, 1)
        m = blob(w, rng, ca, cv, ra * 1.2, rv * 1.2, rough, edge=0.5) * (0.35 + spots)
    elif tex == "dependent":  # several patchy foci, gravitating to the base
        m = np.zeros(w.shape, np.float32)
        for _ in range(int(rng.integers(3, 6))):
            m = np.maximum(m, blob(w, rng, rng.uniform(0.4, 0.85), rng.uniform(0.45, 0.8), 0.16, 0.12, 0.4, 0.4, 6))
    else:
        raise ValueError(tex)
    w.opacify(dens * sev(rng) * m * w.inside)


def collapse(w: Win, rng, shape: str, dens: float) -> None:
    """Atelectasis: a basal band, thin plate-like lines, or a lobar wedge pointing at the hilum."""
    if shape == "band":
        edge = 0.45 + rng.uniform(-0.08, 0.08) + 0.15 * rng.choice([-1, 1]) * (w.a - 0.5)
        m = ramp((w.v - edge) * w.bh, 2.5 * w.c.px) * ramp(0.35 - np.abs(w.a - 0.6), 0.2) * ramp(0.9 - w.v, 0.1)
        m = m * (0.85 + 0.15 * w.noise(rng, 8))
    elif shape == "plates":
        polys = []
        for k in range(int(rng.integers(2, 4))):
            v = rng.uniform(0.35, 0.8)
            a = np.linspace(rng.uniform(0.3, 0.5), rng.uniform(0.8, 0.95), 4)
            polys.append(w.P(a, v + (a - 0.5) * rng.uniform(-0.15, 0.15) + rng.normal(0, 0.01, 4)))
        m = blur(w.lines(polys, 3.0), 0.8 * w.c.px) * 1.6
    else:  # wedge
        apex = rng.uniform(0.35, 0.55)
        m = w.poly(w.P([0.04, 0.96, 0.96], [apex, 0.12, 0.95]), 1.5)
    w.opacify(dens * sev(rng) * np.clip(m, 0, 1.6) * w.inside)


def vessels(w: Win, rng, pattern: str, dens: float) -> None:
    """Vascular congestion (thick indistinct vessels), redistribution (upper-zone vessels) and the
    heart-failure pattern (perihilar haze with Kerley B lines)."""
    polys, thick = [], 4.5
    if pattern == "congestion":
        for _ in range(7):
            v0, ang = rng.uniform(0.25, 0.75), rng.uniform(-0.5, 0.6)
            polys.append(w.P([0.0, 0.35, 0.7], [v0, v0 + 0.35 * np.sin(ang), v0 + 0.7 * np.sin(ang)]))
        m = blur(w.lines(polys, thick), 1.8 * w.c.px) + 0.25 * ramp(0.6 - w.a, 0.6)
    elif pattern == "redistribution":
        thick = 3.8
        for _ in range(6):
            a0 = rng.uniform(0.05, 0.4)
            polys.append(w.P([a0, a0 + 0.2, a0 + 0.35 + rng.uniform(0, 0.2)], [0.55, 0.3, rng.uniform(0.02, 0.12)]))
        m = blur(w.lines(polys, thick), 1.0 * w.c.px) * ramp(0.62 - w.v, 0.1)
    else:  # kerley: short horizontal septal lines at the lateral base + perihilar haze
        for _ in range(int(rng.integers(5, 8))):
            v = rng.uniform(0.55, 0.95)
            polys.append(w.P([1.0, 1.0 - rng.uniform(0.1, 0.18)], [v, v]))
        m = w.lines(polys, 1.6) * 1.2 + 0.35 * ramp(0.7 - w.a, 0.6) * ramp(0.4 - np.abs(w.v - 0.5), 0.4)
    w.opacify(dens * sev(rng) * m * w.inside)


def reticular(w: Win, rng, cell: float, dens: float, honeycomb: bool = False) -> None:
    """A net of fine (ILD pattern) or coarse lines; honeycombing adds small basal rings."""
    n = w.noise(rng, cell)
    net = np.exp(-(n / 0.3) ** 2) * ramp(0.46 - np.abs(w.v - 0.5), 0.2) * ramp(0.46 - np.abs(w.a - 0.5), 0.2)
    if honeycomb:
        net = net * (0.6 + 0.6 * w.v)
        rings = np.zeros(w.shape, np.uint8)
        for _ in range(int(rng.integers(8, 14))):
            x, y = w.local(w.P(rng.uniform(0.1, 0.9), rng.uniform(0.6, 0.95)))
            cv2.circle(rings, p16([x, y]), int(16 * rng.uniform(2.5, 4.5) * w.c.px), 255, w.c.t(1.3),
                       cv2.LINE_AA, 4)
        net = net + rings.astype(np.float32) * (0.9 / 255)
    w.opacify(dens * sev(rng) * net)


def nodules(w: Win, rng, n, r: float, dens: float, lobulate: float = 0.0, spicules: int = 0,
            edge: float = 0.15) -> None:
    """Round dense spots: one nodule or mass, several, tiny calcified granulomas, a spiculated cancer."""
    count = int(rng.integers(n[0], n[1] + 1)) if isinstance(n, tuple) else n
    out = np.zeros(w.shape, np.float32)
    for _ in range(count):
        R = w.radius(r * rng.uniform(0.8, 1.2))
        cx, cy = w.local(w.P(rng.uniform(0.25, 0.75), rng.uniform(0.25, 0.75)))
        d = np.sqrt((w.gx - w.org[0] - cx) ** 2 + (w.gy - w.org[1] - cy) ** 2) / R
        if lobulate:
            d = d + lobulate * w.noise(rng, max(R / w.c.px / 1.5, 2))
        m = np.sqrt(np.clip(1 - d ** 2, 0, 1)) * 0.7 + 0.3 * ramp(1 - d, edge)
        if spicules:
            ang = rng.uniform(0, 2 * np.pi, spicules)
            ln = R * rng.uniform(1.5, 2.3, spicules)
            polys = [np.array([[cx, cy], [cx + np.cos(t) * L, cy + np.sin(t) * L]]) + w.org for t, L in zip(ang, ln)]
            m = m + 0.45 * w.lines(polys, 1.3)
        out = np.maximum(out, m)
    w.add(dens * sev(rng) * out)
