"""Anatomical boxes of frontal images in Chest ImaGenome's 224 x 224 space (patient's right on image left).

Grain: one box per frontal image x one of the 36 detector objects; integer coordinates.

Width design (so that the pipeline's mean +- 3 sd rule drops exactly the planted outliers): every box's
widths over all images are ONE truncated-normal sample (+-2.5 sd), so no natural width is ever farther
than ~2.6 sd from the mean. Anatomy is still coherent because the sample is handed out by rank: images are
sorted by a key (thorax size plus noise, or the finding that needs a big box) and receive the sorted draws.
That is also how cardiomegaly stays inside the distribution: enlarged-heart images receive the top of the
cardiac-width sample and the thorax width ``T`` is then chosen per image so that
CTR = cardiac width / (left lung x2 - right lung x1) lies in [0.54, 0.64] when the heart is enlarged and in
[0.36, 0.46] otherwise; a widened mediastinum likewise gets the top of the upper-mediastinum sample and a
T with MTR >= 0.35. ``T`` is a position, not a box width, so it is free.
"""

from __future__ import annotations

import math

import numpy as np

from ehrxqa_pipeline.demo.ontology import BOX_OBJECTS

SIZE = 224
CTR_NORMAL, CTR_ENLARGED, MTR_WIDE = (0.36, 0.46), (0.54, 0.64), 0.35
T_RANGE = (150, 212)
# (mean, sd) of each box's natural width in pixels; sd >= 3 so integer rounding stays small against it.
WIDTH = {
    "lung": (72, 4), "upper lung zone": (70, 4), "mid lung zone": (72, 4), "lower lung zone": (72, 4),
    "hilar structures": (32, 3), "apical zone": (58, 4), "costophrenic angle": (28, 3),
    "cardiophrenic angle": (26, 3), "hemidiaphragm": (74, 4), "trachea": (20, 3), "spine": (30, 3),
    "clavicle": (76, 4), "aortic arch": (28, 3), "mediastinum": (96, 6), "svc": (18, 3),
    "left cardiac silhouette": (52, 4), "right cardiac silhouette": (32, 3), "cavoatrial junction": (20, 3),
    "right atrium": (34, 3), "descending aorta": (22, 3), "carina": (30, 3), "upper abdomen": (80, 5),
    "abdomen": (158, 7),
}
CARDIAC = (92.0, 7.0)  # (enlarged/normal boundary, sd) of the cardiac silhouette width
UPPER_MED = (64.0, 6.0)  # (widened/normal boundary, sd) of the upper mediastinum width
# Boxes whose widths carry CTR/MTR; width outliers are planted on the other boxes only.
RATIO_BOXES = ("right lung", "left lung", "cardiac silhouette", "upper mediastinum")


def width_params(name: str) -> tuple[float, float]:
    """Natural (mean, sd) of a box's width (for the two ratio-driven boxes: boundary value, sd)."""
    if name == "cardiac silhouette":
        return CARDIAC
    if name == "upper mediastinum":
        return UPPER_MED
    if name in WIDTH:
        return WIDTH[name]
    return WIDTH[name.split(" ", 1)[1]]


def truncnorm(rng: np.random.Generator, n: int, bound: float = 2.5) -> np.ndarray:
    z = rng.standard_normal(n)
    bad = np.abs(z) > bound
    while bad.any():  # resample only the rejected draws
        z[bad] = rng.standard_normal(int(bad.sum()))
        bad = np.abs(z) > bound
    return z


def _ndtri(p: np.ndarray) -> np.ndarray:
    """Inverse standard normal CDF (Acklam's rational approximation, relative error < 1.2e-9)."""
    a = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02, 1.383577518672690e02,
         -3.066479806614716e01, 2.506628277459239e00)
    b = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02, 6.680131188771972e01,
         -1.328068155288572e01)
    c = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00, -2.549732539343734e00,
         4.374664141464968e00, 2.938163982698783e00)
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)
    q = np.minimum(p, 1 - p)
    r = np.sqrt(-2 * np.log(np.maximum(q, 1e-300)))
    tail = (((((c[0] * r + c[1]) * r + c[2]) * r + c[3]) * r + c[4]) * r + c[5]) / \
        ((((d[0] * r + d[1]) * r + d[2]) * r + d[3]) * r + 1)
    x = p - 0.5
    t = x * x
    mid = (((((a[0] * t + a[1]) * t + a[2]) * t + a[3]) * t + a[4]) * t + a[5]) * x / \
        (((((b[0] * t + b[1]) * t + b[2]) * t + b[3]) * t + b[4]) * t + 1)
    return np.where(q < 0.02425, np.where(p < 0.5, tail, -tail), mid)


def stratified_truncnorm(rng: np.random.Generator, n: int, bound: float = 2.5) -> np.ndarray:
    """Sorted truncated-normal sample with one draw per 1/n probability stratum: random, but its mean and
    sd are (almost) exactly those of the distribution at any n -- and so stay so for any large subset."""
    lo = 0.5 * (1 + math.erf(-bound / math.sqrt(2)))
    u = lo + (np.arange(n) + rng.random(n)) / max(n, 1) * (1 - 2 * lo)
    return _ndtri(u)


def by_rank(rng: np.random.Generator, key: np.ndarray) -> np.ndarray:
    """A sorted truncated-normal sample handed out in the order of ``key`` (marginal stays exact)."""
    z = stratified_truncnorm(rng, len(key))
    out = np.empty(len(key))
    out[np.argsort(key, kind="stable")] = z
    return out


def _top_assign(rng, flag: np.ndarray, key: np.ndarray, boundary: float, sd: float) -> np.ndarray:
    """Widths from one truncated normal, the flagged images taking the top, shifted so that the cut
    between flagged and unflagged draws falls on ``boundary``."""
    z = by_rank(rng, np.where(flag, 2.0, 0.0) + key)
    zs = np.sort(z)
    k = int(flag.sum())
    cut = zs[-1] + 0.01 if k == 0 else zs[0] - 0.01 if k == len(z) else (zs[-k - 1] + zs[-k]) / 2
    return np.rint(boundary + sd * (z - cut))


def _thorax(rng, enlarged, widened, wc, wu) -> np.ndarray:
    """Integer thorax width satisfying the CTR band of each image, MTR >= 0.35 when widened, and (softly)
    MTR <= 0.32 otherwise."""
    c_lo = np.where(enlarged, CTR_ENLARGED[0], CTR_NORMAL[0])
    c_hi = np.where(enlarged, CTR_ENLARGED[1], CTR_NORMAL[1])
    lo = np.ceil(np.maximum(T_RANGE[0], wc / c_hi))
    hi = np.floor(np.minimum(np.minimum(T_RANGE[1], wc / c_lo), np.where(widened, wu / MTR_WIDE, np.inf)))
    bad = lo > hi
    if bad.any():
        raise RuntimeError(f"{int(bad.sum())} image(s) have no thorax width meeting their CTR/MTR band")
    lo = np.where(widened, lo, np.maximum(lo, np.minimum(np.ceil(wu / 0.32), hi)))
    pref = wc / rng.uniform(c_lo + 0.02, c_hi - 0.02)
    return np.clip(np.rint(pref), lo, hi)


def _widths_cardiac(rng, enlarged, widened) -> tuple[np.ndarray, np.ndarray]:
    n = len(enlarged)
    # Widened-mediastinum images with a normal heart take small hearts, so that both bands fit one thorax.
    wc = _top_assign(rng, enlarged, rng.random(n) * np.where(widened & ~enlarged, 0.3, 1.0), *CARDIAC)
    wu = _top_assign(rng, widened, rng.random(n), *UPPER_MED)
    clash = np.flatnonzero(widened & ~enlarged & (wc / CTR_NORMAL[1] > wu / MTR_WIDE))
    if len(clash):  # swap with the smallest hearts of plain images (keeps the sample, fixes the clash)
        plain = np.flatnonzero(~widened & ~enlarged)
        donors = plain[np.argsort(wc[plain], kind="stable")][: len(clash)]
        wc[clash], wc[donors] = wc[donors].copy(), wc[clash].copy()
    return wc, wu


def make_boxes(rng: np.random.Generator, enlarged: np.ndarray, widened: np.ndarray) -> np.ndarray:
    """Truth boxes, int array (n_images, 36, 4) as x1, y1, x2, y2 in BOX_OBJECTS order."""
    n = len(enlarged)
    wc, wu = _widths_cardiac(rng, enlarged, widened)
    t = _thorax(rng, enlarged, widened, wc, wu)
    size = (t - t.mean()) / max(t.std(), 1e-9)

    def noisy(spread: float) -> np.ndarray:  # rank key: body size plus noise, so anatomy co-varies loosely
        return size + rng.normal(0, spread, n)

    def w(name: str, key: np.ndarray) -> np.ndarray:
        mu, sd = width_params(name)
        return np.rint(mu + sd * by_rank(rng, key))

    cx = np.rint(SIZE / 2 + 2 * truncnorm(rng, n))
    y0 = np.rint(26 + 3 * truncnorm(rng, n))
    h = np.minimum(np.rint(150 + 8 * by_rank(rng, noisy(0.5))), SIZE - 32 - y0)
    out = np.zeros((n, len(BOX_OBJECTS), 4))
    col = {b: i for i, b in enumerate(BOX_OBJECTS)}

    def put(name, x1, width, ya, yb):
        ya, yb = np.broadcast_to(ya, (n,)), np.broadcast_to(yb, (n,))
        out[:, col[name]] = np.stack([x1, np.rint(ya), x1 + width, np.rint(yb)], 1)

    rx1 = np.rint(cx - t / 2)
    lx2 = rx1 + t
    wr, wl = w("right lung", noisy(0.3)), w("left lung", noisy(0.3))
    put("right lung", rx1, wr, y0, y0 + h)
    put("left lung", lx2 - wl, wl, y0 + 2, y0 + h + 4)
    cx1 = np.rint(cx - 0.38 * wc)
    put("cardiac silhouette", cx1, wc, y0 + 0.45 * h, y0 + h - 4)
    put("upper mediastinum", np.rint(cx + 2 - wu / 2), wu, y0 + 0.05 * h, y0 + 0.42 * h)
    heart = (wc - wc.mean()) / max(wc.std(), 1e-9)
    for side, sgn, edge, dy in (("right", -1, rx1, 0), ("left", 1, lx2, 2)):
        def lat(width, off=0.0):  # x1 of a box flush with this side's lateral edge, ``off`` px outside
            return edge - off if sgn < 0 else edge + off - width
        for zone, frac in (("upper", (0, 1 / 3)), ("mid", (1 / 3, 2 / 3)), ("lower", (2 / 3, 1))):
            ww = w(f"{side} {zone} lung zone", noisy(0.4))
            put(f"{side} {zone} lung zone", lat(ww, -1), ww, y0 + dy + frac[0] * h, y0 + dy + frac[1] * h)
        lung_c = rx1 + wr / 2 if sgn < 0 else lx2 - wl / 2
        ww = w(f"{side} apical zone", noisy(0.5))
        put(f"{side} apical zone", np.rint(lung_c - ww / 2), ww, y0 + dy, y0 + dy + 0.16 * h)
        ww = w(f"{side} costophrenic angle", noisy(0.8))
        put(f"{side} costophrenic angle", lat(ww, 1), ww, y0 + dy + h - 26, y0 + dy + h + 3)
        ww = w(f"{side} hemidiaphragm", noisy(0.4))
        put(f"{side} hemidiaphragm", lat(ww, 1), ww, y0 + dy + h - 14, y0 + dy + h + 14)
        ww = w(f"{side} upper abdomen", noisy(0.6))
        put(f"{side} upper abdomen", lat(ww, 4), ww, y0 + h + 6, SIZE)
        ww = w(f"{side} hilar structures", noisy(0.8))
        inner = rx1 + wr if sgn < 0 else lx2 - wl
        put(f"{side} hilar structures", np.rint(inner - sgn * 14 - ww / 2), ww, y0 + 0.32 * h, y0 + 0.58 * h)
        ww = w(f"{side} clavicle", noisy(0.5))
        put(f"{side} clavicle", np.rint((edge + cx) / 2 - ww / 2), ww, y0 - 8, y0 + 14)
        ww = w(f"{side} cardiophrenic angle", heart + rng.normal(0, 0.6, n))
        anchor = cx1 + 12 if sgn < 0 else cx1 + wc - 12
        put(f"{side} cardiophrenic angle", np.rint(anchor - ww / 2), ww, y0 + h - 22, y0 + h + 2)
    for name, key, center, ya, yb in (
        ("trachea", noisy(0.8), cx - 1, np.maximum(0, y0 - 20), y0 + 0.36 * h),
        ("spine", noisy(0.8), cx, 0, SIZE),
        ("aortic arch", noisy(0.8), cx + 14, y0 + 0.2 * h, y0 + 0.36 * h),
        ("mediastinum", heart + rng.normal(0, 0.3, n), cx1 + wc / 2, y0 + 0.05 * h, y0 + h),
        ("svc", noisy(0.9), cx - 12, y0 + 0.18 * h, y0 + 0.45 * h),
        ("cavoatrial junction", noisy(0.9), cx - 10, y0 + 0.42 * h, y0 + 0.52 * h),
        ("descending aorta", noisy(0.9), cx + 14, y0 + 0.33 * h, y0 + 0.9 * h),
        ("carina", noisy(0.9), cx, y0 + 0.34 * h, y0 + 0.44 * h),
        ("abdomen", noisy(0.4), cx, y0 + h + 6, SIZE),
    ):
        ww = w(name, key)
        put(name, np.rint(center - ww / 2), ww, ya, yb)
    for name, left_edge in (("right cardiac silhouette", True), ("left cardiac silhouette", False)):
        ww = w(name, heart + rng.normal(0, 0.3, n))
        put(name, cx1 if left_edge else cx1 + wc - ww, ww, y0 + 0.45 * h, y0 + h - 4)
    ww = w("right atrium", heart + rng.normal(0, 0.6, n))
    put("right atrium", cx1 + 1, ww, y0 + 0.52 * h, y0 + 0.85 * h)
    return fit_inside(out).astype(np.int32)


def fit_inside(b: np.ndarray) -> np.ndarray:
    """Shift boxes horizontally into [0, 224] (keeping widths) and clip them vertically."""
    shift = np.where(b[..., 0] < 0, -b[..., 0], 0) + np.where(b[..., 2] > SIZE, SIZE - b[..., 2], 0)
    b = b.copy()
    b[..., 0] += shift
    b[..., 2] += shift
    b[..., 1] = np.clip(b[..., 1], 0, SIZE - 2)
    b[..., 3] = np.clip(np.maximum(b[..., 3], b[..., 1] + 2), 0, SIZE)
    return b


def ratios(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(CTR, MTR) per image from boxes in BOX_OBJECTS order, as the VQA program computes them."""
    i = {k: BOX_OBJECTS.index(k) for k in RATIO_BOXES}
    thorax = b[:, i["left lung"], 2] - b[:, i["right lung"], 0]
    return ((b[:, i["cardiac silhouette"], 2] - b[:, i["cardiac silhouette"], 0]) / thorax,
            (b[:, i["upper mediastinum"], 2] - b[:, i["upper mediastinum"], 0]) / thorax)
