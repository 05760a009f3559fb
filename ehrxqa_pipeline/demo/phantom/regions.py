"""Phantom finding motifs of the pleura, airways, heart, mediastinum, diaphragm and bones."""

from __future__ import annotations

import numpy as np

from ehrxqa_pipeline.demo.phantom.anatomy import blur, heart_polygon
from ehrxqa_pipeline.demo.phantom.draw import Win, blob, ramp, sev, spline


def pleural_fluid(w: Win, rng, form: str, dens: float) -> None:
    """Effusion (meniscus rising laterally), blunting (lateral corner only), hydropneumothorax (flat level)."""
    s = sev(rng)
    px = w.c.px
    if form == "effusion":
        level = rng.uniform(0.58, 0.76)
        surface = level - 0.25 * np.clip(w.a, 0, 1) ** 2
        fluid = ramp((w.v - surface) * w.bh, 4 * px) * (0.75 + 0.25 * np.clip((w.v - surface) * 3, 0, 1))
        fluid = fluid + 0.25 * ramp(w.v - surface + 0.06, 0.12)  # haze just above the meniscus
    elif form == "blunting":
        hgt, wid = min(0.55 * w.bh, 0.12 * w.c.h), min(0.8 * w.bw, 0.12 * w.c.w)
        u = np.clip(1 - (1 - w.a) * w.bw / wid, 0, 1)  # 0 at wid from the lateral edge, 1 at it
        fluid = ramp((w.v - 1) * w.bh + hgt * u ** 1.5, 3 * px)
    else:  # hydropneumothorax: flat air-fluid level, avascular air above it laterally
        level = rng.uniform(0.5, 0.65)
        fluid = ramp((w.v - level) * w.bh, 1.5 * px)
        edge = 0.5 + 0.35 * np.clip((level - w.v) / level, 0, 1) ** 2  # collapsed lung edge, curving to the apex
        above = ramp(level - w.v, 0.02) * ramp(w.v - 0.05, 0.08)
        w.add(-ramp(w.a - edge, 0.04) * above * (w.c.vessels[w.sl] + 0.08 * w.lung) * w.inside)
        w.add(0.12 * np.exp(-(((w.a - edge) * w.bw) / (1.2 * px)) ** 2) * above * w.lung)
    w.opacify(dens * s * fluid * w.inside)


def pneumothorax(w: Win, rng, dens: float) -> None:
    """Dark avascular rim along the lateral wall and apex, with the visceral pleural line."""
    ra, rv = rng.uniform(0.65, 0.78), rng.uniform(0.75, 0.9)
    r = np.sqrt(((w.a - 0.05) / ra) ** 2 + ((w.v - 0.95) / rv) ** 2)
    rim = ramp(r - 1, 0.03) * w.inside
    lungish = w.floor + (1 - w.floor) * np.clip(w.lung * 1.4, 0, 1)
    w.add(-rim * (w.c.vessels[w.sl] + dens * sev(rng) * lungish))
    scale = min(ra * w.bw, rv * w.bh)
    w.add(0.14 * np.exp(-(((r - 1) * scale) / (1.0 * w.c.px)) ** 2) * lungish * w.inside)


def lucency(w: Win, rng, form: str, dens: float) -> None:
    """Hyperaeration (uniformly darker), emphysema (pruned vessels, patchy lucencies), cysts/bullae."""
    lungish = (w.floor + (1 - w.floor) * np.clip(w.lung * 1.3, 0, 1)) * w.inside
    if form == "hyperaeration":
        w.add(-dens * sev(rng) * lungish * (0.8 + 0.2 * w.v))
        return
    if form == "emphysema":
        holes = np.zeros(w.shape, np.float32)
        for _ in range(int(rng.integers(4, 8))):
            holes = np.maximum(holes, blob(w, rng, rng.uniform(0.15, 0.85), rng.uniform(0.15, 0.85), 0.1, 0.08, 0.5,
                                           0.5, 5))
        w.add(-lungish * (0.8 * w.c.vessels[w.sl] + dens * sev(rng) * (0.5 + holes)))
        return
    for _ in range(int(rng.integers(1, 3))):  # bullae: round lucencies with hairline walls
        ca, cv = rng.uniform(0.3, 0.7), rng.uniform(0.25, 0.6)
        R = w.radius(rng.uniform(0.16, 0.24))
        x, y = w.P(ca, cv)
        d = np.sqrt((w.gx - x) ** 2 + (w.gy - y) ** 2) / R
        inside = ramp(1 - d, 0.1)
        w.add(-inside * (w.c.vessels[w.sl] + dens * np.clip(w.lung * 1.3, 0.3, 1)))
        w.add(0.15 * np.exp(-(((d - 1) * R) / (1.1 * w.c.px)) ** 2))


def strands(w: Win, rng, form: str, dens: float) -> None:
    """Scarring (irregular strands with lateral/apical pleural thickening) or bronchiectasis (tram tracks,
    ring shadows)."""
    polys, rings = [], []
    if form == "scar":
        for _ in range(int(rng.integers(3, 6))):
            p = [rng.uniform(0.3, 0.8), rng.uniform(0.2, 0.8)]
            walk = np.cumsum(np.vstack([p, rng.normal(0, 0.09, (4, 2))]), 0)
            polys.append(w.P(walk[:, 0], walk[:, 1]))
        cap = ramp(0.08 - np.minimum(1 - w.a, w.v) * 1.0, 0.05) * w.inside
        m = blur(w.lines(polys, 2.0), 0.6 * w.c.px) + 0.8 * cap
    else:
        for _ in range(int(rng.integers(3, 5))):
            a, v, ang = rng.uniform(0.2, 0.8), rng.uniform(0.45, 0.85), rng.uniform(-0.6, 0.6)
            dx, dy = np.cos(ang) * 0.3 * w.bw, np.sin(ang) * 0.3 * w.bh
            off = np.array([-np.sin(ang), np.cos(ang)]) * 2.6 * w.c.px
            p0 = w.P(a, v)
            seg = np.array([p0, p0 + [dx, dy]])
            polys += [seg + off, seg - off]
        for _ in range(int(rng.integers(4, 7))):
            rings.append(w.P(rng.uniform(0.2, 0.8), rng.uniform(0.5, 0.9)))
        m = w.lines(polys, 1.4)
        for x, y in rings:
            d = np.sqrt((w.gx - x) ** 2 + (w.gy - y) ** 2) / (3.2 * w.c.px)
            m = m + np.exp(-((d - 1) * 3) ** 2)
    w.add(dens * sev(rng) * m * w.inside)


def heart(w: Win, rng, form: str, dens: float) -> None:
    """Cardiomegaly: the cardiac outline filling its (already wider) box; pericardial effusion: a smooth
    symmetric 'water-bottle' silhouette filling it."""
    if form == "enlarged":
        outline = heart_polygon(np.array(w.box), rng.uniform(0.98, 1.04))
    else:
        u = np.array([0.3, 0.14, 0.04, 0.0, 0.06, 0.5, 0.94, 1.0, 0.96, 0.86, 0.7])
        v = np.array([0.0, 0.25, 0.5, 0.75, 0.97, 1.02, 0.97, 0.75, 0.5, 0.25, 0.0])
        outline = np.stack([w.box[0] + u * w.bw, w.box[1] + v * w.bh], 1)
    m = w.poly(outline, 1.6)
    w.fill(m, dens * sev(rng))


def mediastinal(w: Win, rng, form: str, dens: float) -> None:
    """Widening, superior mass, goitre, displacement, enlarged hilum, tortuous aorta, calcification,
    pneumomediastinum."""
    s = sev(rng)
    px = w.c.px
    if form == "widening":
        m = ramp(0.46 - np.abs(w.a - 0.5), 0.06) * ramp(0.8 - w.v, 0.15) * ramp(w.v, 0.05)
        w.fill(m, dens * s)
    elif form == "mass":
        m = blob(w, rng, rng.uniform(0.62, 0.78), rng.uniform(0.3, 0.45), 0.32, 0.3, 0.35, 0.15, 10)
        w.fill(m, dens * s)
    elif form == "goiter":
        m = np.maximum(blob(w, rng, 0.27, 0.18, 0.26, 0.2, 0.2, 0.2), blob(w, rng, 0.73, 0.2, 0.26, 0.2, 0.2, 0.2))
        trach = np.exp(-(((w.a - 0.5 - 0.08 * np.sin(np.pi * w.v)) * w.bw) / (2 * px)) ** 2) * ramp(0.5 - w.v, 0.1)
        w.fill(m, dens * s)
        w.add(-0.08 * trach)
    elif form == "displacement":
        w.fill(ramp(0.25 - np.abs(w.a - 0.82), 0.08) * w.inside, dens * s)  # tissue shifted into the lung
        w.add(-0.35 * dens * s * ramp(0.15 - np.abs(w.a - 0.15), 0.08) * w.inside)  # and away from here
    elif form == "hilum":
        m = np.maximum(blob(w, rng, 0.45, 0.4, 0.3, 0.25, 0.3, 0.3, 8),
                       blob(w, rng, 0.5, 0.68, 0.26, 0.22, 0.3, 0.3, 8))
        w.fill(0.4 * m, 2.5 * dens * s)
    elif form == "tortuous":
        p = w.P([0.3, 0.72, 0.3, 0.7], [0.0, 0.33, 0.66, 1.0])
        m = blur(w.lines([spline(p)], max(3.0, 0.22 * w.bw / px)), 1.5 * px)
        w.fill(m, dens * s)
    elif form == "calcification":
        x0, y0 = w.P(0.5, 0.6)
        ang = np.linspace(np.pi * 1.05, np.pi * 1.95, 16)
        arc = np.stack([x0 + np.cos(ang) * 0.35 * w.bw, y0 + np.sin(ang) * 0.4 * w.bh], 1)
        w.add(dens * s * w.lines([arc], 1.6))
    else:  # pneumomediastinum: air streaks outlining both mediastinal borders
        m = np.zeros(w.shape, np.float32)
        for a0 in (0.12, 0.88):
            a_line = a0 + 0.03 * np.sin(w.v * 7 + rng.uniform(0, 6))
            dist = (w.a - a_line) * w.bw / px
            m += np.exp(-(dist / 2.2) ** 2) * ramp(0.9 - w.v, 0.1)
            w.add(0.1 * np.exp(-((dist - np.sign(0.5 - a0) * 3.5) / 1.0) ** 2) * ramp(0.9 - w.v, 0.1))
        w.add(-dens * s * m)


def diaphragm(w: Win, rng, form: str, dens: float) -> None:
    """Elevated dome, focal eventration, free air under the dome, hiatal hernia."""
    s = sev(rng)
    if form == "elevated":
        dome = 0.03 + 1.1 * (w.a - 0.45) ** 2
        m = ramp((w.v - dome) * w.bh, 2.5 * w.c.px) * w.inside
        w.fill(m, dens * s)
    elif form == "eventration":
        m = blob(w, rng, rng.uniform(0.35, 0.6), 0.85, 0.25, 0.78, 0.0, 0.05)
        w.fill(m * w.inside, dens * s)
    elif form == "free_air":
        crest = rng.uniform(0.5, 0.65) + 0.6 * (w.a - 0.5) ** 2
        band = np.exp(-(((w.v - crest) * w.bh) / (3.0 * w.c.px)) ** 2) * ramp(0.4 - np.abs(w.a - 0.5), 0.15)
        w.add(-dens * s * band)
    else:  # hernia: round gas bubble with an air-fluid level behind the heart
        x, y = w.P(rng.uniform(0.4, 0.6), rng.uniform(0.45, 0.6))
        R = w.radius(0.24)
        d = np.sqrt((w.gx - x) ** 2 + (w.gy - y) ** 2) / R
        inside = ramp(1 - d, 0.12)
        above = ramp(y + 0.1 * R - w.gy, 1.5 * w.c.px)
        w.add(inside * (-dens * s * above + 0.05 * (1 - above)) + 0.1 * np.exp(-(((d - 1) * R) / 1.2) ** 2))


def bone(w: Win, rng, form: str, dens: float) -> None:
    """Cortical breaks, lytic lesion, osteophytes, scoliosis, shoulder osteoarthritis."""
    s, px = sev(rng), w.c.px
    if form in ("rib", "clavicle"):
        v0, tilt = rng.uniform(0.35, 0.65), rng.uniform(-0.2, 0.2)
        a = np.linspace(0.1, 0.9, 9)
        left, right = w.P(a[:5], v0 + tilt * (a[:5] - 0.5)), w.P(a[4:], v0 + tilt * (a[4:] - 0.5))
        step = np.array([0, rng.choice([-1, 1]) * 2.5 * px])
        thick = 6.0 if form == "rib" else 8.0
        m = 0.5 * w.lines([left, right + step], thick) + 0.6 * w.lines([left, right + step], 1.3)
        gap_x, gap_y = w.P(0.5 + rng.uniform(-0.03, 0.03), v0)
        m *= 1 - np.exp(-((w.gx - gap_x) / (1.6 * px)) ** 2)  # the fracture line
        callus = np.exp(-((w.gx - gap_x) ** 2 + (w.gy - gap_y) ** 2) / (2 * (6 * px) ** 2))
        w.add(dens * s * (m + 0.35 * callus))
    elif form == "lytic":
        x, y = w.P(rng.uniform(0.35, 0.65), rng.uniform(0.35, 0.65))
        R = w.radius(0.14, 4)
        d = np.sqrt((w.gx - x) ** 2 + (w.gy - y) ** 2) / R
        w.add(-dens * s * ramp(1 - d, 0.15) + 0.6 * dens * np.exp(-(((d - 1.05) * R) / (1.5 * px)) ** 2))
    elif form == "vertebra":  # compression fracture: a short, sclerotic, wedged body
        v0 = rng.uniform(0.35, 0.65)
        hgt = 0.025 * w.c.h / w.bh
        p = w.P([0.2, 0.8, 0.8, 0.2], [v0, v0 + 0.3 * hgt, v0 + hgt, v0 + hgt])
        m = w.poly(p, 1.0)
        w.add(dens * s * m - 0.5 * dens * w.lines([w.P([0.15, 0.85], [v0 - 0.012, v0 - 0.012])], 1.6))
    elif form == "osteophytes":
        polys = []
        for v in np.sort(rng.uniform(0.1, 0.9, int(rng.integers(4, 7)))):
            for a0, a1 in ((0.18, 0.02), (0.82, 0.98)):
                polys.append(w.P([a0, a1, a0], [v - 0.01, v + 0.004, v + 0.02]))
            polys.append(w.P([0.2, 0.8], [v + 0.02, v + 0.02]))
        w.add(dens * s * w.lines(polys, 2.0))
    elif form == "scoliosis":
        amp = rng.uniform(0.26, 0.32) * rng.choice([-1, 1])
        centre = 0.5 + amp * np.sin(np.pi * 2 * w.v)
        seg = 0.8 + 0.2 * np.cos(2 * np.pi * w.v * w.bh / (0.052 * w.c.h))
        col = ramp(0.24 - np.abs(w.a - centre), 0.06) * seg - 0.8 * ramp(0.28 - np.abs(w.a - 0.5), 0.06)
        w.add(dens * s * col * ramp(0.5 - np.abs(w.v - 0.5), 0.04))
    else:  # shoulder osteoarthritis: sclerotic joint margin and marginal spurs
        x, y = w.P(0.6, 0.45)
        R = w.radius(0.3, 6)
        d = np.sqrt((w.gx - x) ** 2 + (w.gy - y) ** 2) / R
        spur = blob(w, rng, 0.85, 0.75, 0.12, 0.1, 0.3, 0.3, 4) + blob(w, rng, 0.35, 0.15, 0.1, 0.1, 0.3, 0.3, 4)
        w.add(dens * s * (0.4 * ramp(1 - d, 0.1) + np.exp(-(((d - 1) * R) / (2.0 * px)) ** 2) + spur))


def subcutaneous_air(w: Win, rng, dens: float) -> None:
    """Feathery gas streaks dissecting the soft tissues of the chest wall."""
    polys = []
    for _ in range(int(rng.integers(8, 14))):
        a, v = rng.uniform(0.3, 1.0), rng.uniform(0.05, 0.8)
        ang = rng.uniform(1.1, 2.0)
        polys.append(w.P(a + np.cos(ang) * np.array([0, 0.1, 0.2]) + rng.normal(0, 0.02, 3),
                         v + np.sin(ang) * np.array([0, 0.1, 0.2])))
    w.add(-dens * sev(rng) * blur(w.lines(polys, 2.0), 0.5 * w.c.px) * w.inside)
