"""Phantom tubes, lines, devices and technical findings.

Tubes run from an anatomical entry point (mouth, neck, arm, chest wall, groin) along a smooth path that
ends inside the finding's box; they are drawn into the anti-aliased metal layer.
"""

from __future__ import annotations

import cv2
import numpy as np

from ehrxqa_pipeline.demo.phantom.anatomy import p16, pts
from ehrxqa_pipeline.demo.phantom.draw import Win, blob, ramp, sev, spline

AA = cv2.LINE_AA


def _line(c, p, width: float, val: float, closed: bool = False) -> None:
    cv2.polylines(c.metal, [pts(p)], closed, int(val), c.t(width), AA, 4)


def draw_tube(c, path, width: float, val: float, style: str = "solid") -> np.ndarray:
    """A catheter along the control points: solid wire, walls around a lucent lumen, or a faint tube with a
    radiopaque stripe."""
    p = spline(path, 10)
    if style == "walls":
        _line(c, p, width, val)
        _line(c, p, max(1.0, width - 3.0), val * 0.45)
    elif style == "stripe":
        _line(c, p, width, val * 0.4)
        _line(c, p, 1.6, val)
    else:
        _line(c, p, width, val)
    return p


def _route(w: Win, rng, route: str) -> list:
    c, s = w.c, w.side
    H, W, mid, clav = c.h, c.w, c.mid, c.clav_y
    j = lambda: rng.normal(0, 0.02)  # noqa: E731
    cx = (w.box[0] + w.box[2]) / 2 + rng.normal(0, 0.03) * w.bw
    if route == "ett":
        return [(cx, -5), (cx, w.box[1] + 0.3 * w.bh), (cx, w.box[1] + rng.uniform(0.68, 0.82) * w.bh)]
    if route == "trach":
        return [(cx, w.box[1] - 0.03 * H), (cx, w.box[1] + 0.2 * w.bh), (cx + 0.01 * W, w.box[1] + 0.45 * w.bh)]
    if route == "enteric":
        return [(mid, -5), (mid + j() * W, 0.75 * w.box[1]), w.P(0.5 + j(), 0.1), w.P(0.6, 0.5), w.P(0.8, 0.7),
                w.P(0.65 + j(), 0.88)]
    if route == "ij":
        return [(mid + s * 0.09 * W, -5), (mid + s * 0.06 * W, clav - 0.02 * H), w.P(0.5 + j(), 0.05),
                w.P(0.5 + j(), rng.uniform(0.65, 0.85))]
    if route == "subclavian":
        return [(mid + s * 0.32 * W, clav + 0.05 * H), (mid + s * 0.14 * W, clav + 0.035 * H), w.P(0.5 + j(), 0.08),
                w.P(0.5 + j(), rng.uniform(0.6, 0.8))]
    if route == "picc":
        return [(-5 if s < 0 else W + 5, 0.2 * H), (mid + s * 0.36 * W, clav + 0.05 * H),
                (mid + s * 0.13 * W, clav + 0.05 * H), w.P(0.5 + j(), 0.1), w.P(0.5 + j(), rng.uniform(0.7, 0.85))]
    if route == "port":
        return [(mid + s * 0.22 * W, clav + 0.1 * H), (mid + s * 0.15 * W, clav), (mid + s * 0.08 * W, clav + 0.01 * H),
                w.P(0.5 + j(), 0.1), w.P(0.5 + j(), rng.uniform(0.65, 0.8))]
    if route == "swan":
        return [(mid - 0.09 * W, -5), (mid - 0.06 * W, clav - 0.02 * H), w.P(0.25, 0.02), w.P(0.22, 0.55),
                w.P(0.45, 0.85), w.P(0.7, 0.6), w.P(0.62, 0.25), w.P(0.8 + j(), 0.08)]
    if route == "iabp":
        return [(cx, H + 5), w.P(0.5, 0.95), w.P(0.5 + j(), rng.uniform(0.1, 0.2))]
    if route == "drain":
        return [(mid + 0.03 * W, H + 5), w.P(0.5, 1.0), w.P(0.45 + j(), 0.6), w.P(0.5 + j(), 0.3)]
    if route == "chest":
        return [w.P(1.25, 1.1), w.P(0.95, 0.85), w.P(0.85 + j(), 0.45), w.P(0.7, 0.15), w.P(0.5, 0.12),
                w.P(0.42 + j(), 0.28)]
    return [w.P(1.3, 1.05), w.P(0.85, 0.85), w.P(0.6 + j(), 0.62)]  # pigtail


def tube(w: Win, rng, route: str, width: float, val: float, style: str = "solid", tip: str | None = None) -> None:
    c = w.c
    path = _route(w, rng, route)
    p = draw_tube(c, path, width, val, style)
    end = np.asarray(path[-1], np.float64)
    if tip == "flange":  # tracheostomy: the neck plate across the tube
        y = w.box[1] + 0.08 * w.bh
        _line(c, [(end[0] - 0.05 * c.w, y), (end[0] + 0.05 * c.w, y)], 3.5, val)
    elif tip == "marker":  # radiopaque tip marker (balloon pump, feeding tube)
        _line(c, [end, end + [0, 6 * c.px]], 4.0, 250)
    elif tip == "loop":  # pigtail curl
        r = max(0.08 * min(w.bw, w.bh), 4 * c.px)
        cv2.circle(c.metal, p16(end + [-w.side * r, -0.2 * r]), int(16 * r), int(val), c.t(2.2), AA, 4)
    elif tip == "port":  # reservoir: dense ring around a lucent septum
        r = 0.03 * c.w
        cv2.circle(c.metal, p16(path[0]), int(16 * r), 220, -1, AA, 4)
        cv2.circle(c.metal, p16(path[0]), int(16 * r * 0.55), 120, -1, AA, 4)
    elif tip == "holes":  # chest tube side holes: gaps in the radiopaque stripe
        for k in (len(p) - 8, len(p) - 16):
            if k > 0:
                cv2.circle(c.metal, p16(p[k]), int(16 * 2.2 * c.px), int(val * 0.4), -1, AA, 4)


def device(w: Win, rng, form: str) -> None:
    """Pacemaker, prosthetic valve, sternotomy wires, CABG clips, aortic stent graft."""
    c, px = w.c, w.c.px
    if form == "pacer":
        s = w.side
        gen = np.array([c.mid + s * 0.27 * c.w, c.clav_y + 0.08 * c.h])
        cv2.ellipse(c.metal, p16(gen), p16([0.055 * c.w, 0.04 * c.h]), 0, 0, 360, 245, -1,
                    AA, 4)
        cv2.ellipse(c.metal, p16(gen), p16([0.035 * c.w, 0.022 * c.h]), 0, 0, 360, 200,
                    -1, AA, 4)
        via = [gen, (c.mid + s * 0.12 * c.w, c.clav_y + 0.03 * c.h), (c.mid - 0.02 * c.w, c.clav_y + 0.12 * c.h)]
        for route in ([w.P(0.25, 0.1), w.P(0.18, 0.3), w.P(0.24, 0.42)], [w.P(0.35, 0.25), w.P(0.72, 0.85)]):
            p = draw_tube(c, via + route, 2.6, 235)
            cv2.circle(c.metal, p16(p[-1]), int(16 * 3 * px), 250, -1, AA, 4)
    elif form == "valve":
        x, y = w.P(rng.uniform(0.4, 0.6), rng.uniform(0.45, 0.6))
        ax, ay = max(0.13 * w.bw, 5 * px), max(0.08 * w.bh, 3 * px)
        ang = rng.uniform(20, 60)
        cv2.ellipse(c.metal, p16([x, y]), p16([ax, ay]), ang, 0, 360, 240, c.t(3), AA, 4)
        for t in (0, 120, 240):
            r = np.deg2rad(t + ang)
            _line(c, [(x, y), (x + np.cos(r) * ax, y + np.sin(r) * ay)], 1.5, 220)
    elif form == "sternotomy":
        x = c.mid if w.box[0] < c.mid < w.box[2] else (w.box[0] + w.box[2]) / 2
        n = int(np.clip(w.bh / (0.05 * c.h), 2, 6))
        for v in np.linspace(0.12, 0.88, n) + rng.normal(0, 0.02, n):
            y = w.box[1] + v * w.bh
            cv2.ellipse(c.metal, p16([x, y]), p16([0.03 * c.w, 0.012 * c.h]),
                        rng.uniform(-10, 10), 0, 360, 245, c.t(2), AA, 4)
            _line(c, [(x + 0.026 * c.w, y - 0.004 * c.h), (x + 0.042 * c.w, y + 0.008 * c.h)], 2.0, 245)
    elif form == "cabg":
        for a0 in (0.25, 0.5, 0.75):  # grafts with clips along each
            p = spline([w.P(a0, 0.05), w.P(a0 + rng.normal(0, 0.08), 0.4), w.P(a0 + rng.normal(0, 0.1), 0.8)], 5)
            for k in range(1, len(p), 2):
                d = p[k] - p[k - 1]
                n = np.array([-d[1], d[0]]) / (np.hypot(*d) + 1e-6) * 4 * px
                cv2.ellipse(c.metal, p16(p[k]), p16([5 * px, 3 * px]),
                            np.degrees(np.arctan2(n[1], n[0])), 200, 340, 240, c.t(2.2), AA, 4)
            cv2.circle(c.metal, p16(p[0]), int(16 * 4.5 * px), 220, c.t(1.8), AA, 4)
    else:  # aortic stent graft: two walls with a zigzag stent between them
        path = spline([w.P(0.5, 0.0), w.P(0.55 + rng.normal(0, 0.05), 0.5), w.P(0.5, 1.0)], 8)
        off = np.array([max(0.18 * w.bw, 3.5 * px), 0])
        _line(c, path - off, 1.5, 200)
        _line(c, path + off, 1.5, 200)
        zig = np.array([q + (off if i % 2 else -off) for i, q in enumerate(path[::2])])
        _line(c, zig, 1.2, 190)


def technical(w: Win, rng, form: str, dens: float) -> None:
    """Low lung volumes, rotation, breast shadows, skin folds, external artifacts."""
    c, px, s = w.c, w.c.px, sev(rng)
    if form == "low_volumes":  # crowded basal markings and a high base
        polys = [w.P([0.05, rng.uniform(0.5, 0.95)], [0.55, rng.uniform(0.6, 0.98)]) for _ in range(9)]
        m = w.lines(polys, 2.4) + ramp(w.v - 0.8, 0.1) * 1.5 + 0.4 * ramp(w.v - 0.55, 0.3)
        w.opacify(dens * s * m * w.inside)
    elif form == "rotated":  # global: one side denser; spinous processes off the midline of the box
        rot = rng.choice([-1, 1])
        c.d += (dens * rot * (np.arange(c.w, dtype=np.float32) - c.mid) / c.w)[None, :]
        x = (w.box[0] + w.box[2]) / 2 + rot * 0.25 * w.bw
        for y in np.arange(w.box[1], w.box[3], 0.05 * c.h):
            cv2.ellipse(c.metal, p16([x, y]), p16([2.5 * px, 5 * px]), 0, 0, 360, 110, -1,
                        AA, 4)
    elif form == "breast":
        m = blob(w, rng, 0.55, 0.78, 0.55, 0.42, 0.0, 0.06) * (0.6 + 0.4 * w.v)
        x, y = w.P(0.5, 0.7)
        nip = np.exp(-((w.gx - x) ** 2 + (w.gy - y) ** 2) / (2 * (2.5 * px) ** 2))
        w.add(dens * s * (m + 0.8 * nip) * w.inside)
    elif form == "skin_fold":
        a_f = rng.uniform(0.4, 0.7) + 0.08 * np.sin(w.v * 3 + rng.uniform(0, 6))
        dist = (w.a - a_f) * w.bw / px
        fold = np.exp(np.minimum(dist, 0) / 10) * ramp(-dist, 1.5) - 0.6 * np.exp(-((dist - 2) / 1.5) ** 2)
        w.add(dens * s * fold * ramp(0.45 - np.abs(w.v - 0.5), 0.1))
    else:  # artifact: ECG electrodes with their leads
        for _ in range(int(rng.integers(2, 4))):
            x, y = w.P(rng.uniform(0.2, 0.8), rng.uniform(0.2, 0.8))
            cv2.circle(c.metal, p16([x, y]), int(16 * 5 * px), 230, c.t(2), AA, 4)
            cv2.circle(c.metal, p16([x, y]), int(16 * 1.5 * px), 250, -1, AA, 4)
            ang = rng.uniform(0, 2 * np.pi)
            draw_tube(c, [(x, y), (x + np.cos(ang) * 0.3 * w.bw, y + np.sin(ang) * 0.3 * w.bh),
                          (x + np.cos(ang) * 0.5 * w.bw + 10, y + np.sin(ang + 0.5) * 0.6 * w.bh)], 1.2, 170)
