"""A generic lateral chest radiograph (anterior on the image left); boxes and findings are not used."""

from __future__ import annotations

import cv2
import numpy as np

from ehrxqa_pipeline.demo.phantom.anatomy import Canvas, blur, p16, pts, smooth_noise
from ehrxqa_pipeline.demo.phantom.draw import spline

_BODY = [(0.3, -0.05), (0.64, -0.05), (0.72, 0.08), (0.94, 0.18), (0.98, 1.05), (0.05, 1.05), (0.07, 0.35),
         (0.16, 0.16)]
_LUNG = [(0.46, 0.07), (0.62, 0.1), (0.78, 0.28), (0.84, 0.55), (0.88, 0.86), (0.8, 0.84), (0.62, 0.75),
         (0.42, 0.71), (0.24, 0.74), (0.14, 0.77), (0.13, 0.5), (0.18, 0.28), (0.3, 0.12)]


def _fill(c: Canvas, pts_frac, jit: np.ndarray, soft: float) -> np.ndarray:
    m = np.zeros((c.h, c.w), np.uint8)
    p = spline(np.asarray(pts_frac + pts_frac[:1], np.float64), 6) * jit[:2] + jit[2:]
    cv2.fillPoly(m, [pts(p * [c.w, c.h])], 255, cv2.LINE_AA, 4)
    return blur(m.astype(np.float32) * (1 / 255), soft * c.px)


def draw_lateral(c: Canvas, rng: np.random.Generator) -> None:
    h, w = c.h, c.w
    jit = np.array([rng.uniform(0.95, 1.05), rng.uniform(0.95, 1.05), rng.normal(0, 0.015), rng.normal(0, 0.015)])
    P = lambda x, y: (np.array([x, y]) * jit[:2] + jit[2:]) * [w, h]  # noqa: E731
    body = _fill(c, _BODY, jit, 3)
    c.d += body * rng.uniform(0.5, 0.55)
    lung = _fill(c, _LUNG, jit, 2)
    heart = np.zeros((h, w), np.uint8)
    cv2.ellipse(heart, p16(P(0.34, 0.62)), p16([0.2 * w, 0.16 * h]), -40, 0, 360, 255,
                -1, cv2.LINE_AA, 4)
    aorta = spline(np.array([P(0.4, 0.46), P(0.47, 0.3), P(0.6, 0.26), P(0.68, 0.36), P(0.72, 0.72)]), 8)
    cv2.polylines(heart, [pts(aorta)], False, 90, c.t(13), cv2.LINE_AA, 4)
    hf = blur(heart.astype(np.float32) * (1 / 255), 2 * c.px)
    c.lung = lung * (1 - 0.85 * hf)
    yy = np.linspace(0, 1, h, dtype=np.float32)[:, None]
    c.d -= c.lung * (0.25 + 0.08 * yy) * (1 + 0.04 * smooth_noise(rng, (h, w), 12 * c.px))
    c.d += hf * 0.06
    ves = np.zeros((h, w), np.uint8)
    hil = P(0.56, 0.45)
    cv2.ellipse(ves, p16(hil), p16([0.05 * w, 0.06 * h]), 0, 0, 360, 110, -1,
                cv2.LINE_AA, 4)
    for _ in range(16):
        ang, ln = rng.uniform(0, 2 * np.pi), rng.uniform(0.12, 0.28)
        end = hil + np.array([np.cos(ang) * w, np.sin(ang) * h]) * ln
        cv2.line(ves, p16(hil), p16(end), 90, c.t(2.5), cv2.LINE_AA, 4)
    c.vessels = blur(ves.astype(np.float32), 1.2 * c.px) * (0.14 / 255) * np.clip(c.lung * 1.3, 0, 1)
    c.d += c.vessels
    air = np.zeros((h, w), np.uint8)
    cv2.line(air, p16(P(0.49, -0.02)), p16(P(0.57, 0.42)), 255, c.t(11), cv2.LINE_AA, 4)
    c.d -= blur(air.astype(np.float32), 1.2 * c.px) * (0.1 / 255)
    bone = np.zeros((h, w), np.uint8)
    vh = 0.05 * h
    y = rng.uniform(-vh, 0)
    while y < h:  # vertebral bodies along a gentle kyphosis, posterior elements behind them
        x = (0.8 + 0.04 * np.sin(np.pi * y / h)) * w
        cv2.rectangle(bone, p16([x, y]), p16([x + 0.085 * w, y + 0.8 * vh]), 70, -1,
                      cv2.LINE_AA, 4)
        cv2.line(bone, p16([x + 0.1 * w, y + 0.3 * vh]), p16([x + 0.16 * w, y + 0.7 * vh]),
                 60, c.t(5), cv2.LINE_AA, 4)
        y += vh
    cv2.line(bone, p16(P(0.13, 0.18)), p16(P(0.17, 0.6)), 110, c.t(6), cv2.LINE_AA, 4)
    for k in range(9):  # ribs, posterior to anterior, overlapping on both sides
        y0 = 0.18 + 0.07 * k
        cv2.polylines(bone, [pts([P(0.83, y0), P(0.6, y0 + 0.06), P(0.3, y0 + 0.16)])], False, 28, c.t(6),
                      cv2.LINE_AA, 4)
    for dx in (0.0, 0.07):  # humeri over the apices
        cv2.line(bone, p16(P(0.34 + dx, -0.02)), p16(P(0.4 + dx, 0.3)), 55, c.t(24),
                 cv2.LINE_AA, 4)
    c.d += blur(bone.astype(np.float32), c.px) * (0.3 / 255) * body
