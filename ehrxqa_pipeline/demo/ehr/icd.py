"""The ICD dictionaries d_icd_diagnoses / d_icd_procedures (grain: one row per (icd_code, icd_version)).

Real common codes (ehr.icd_codes) plus a generated long tail, in both ICD-9 and ICD-10. The dictionaries
keep the two traps of the real ones: code strings present in both versions with different titles, and
titles shared by several codes. The billing tables sample codes from the pools returned here.
"""

from __future__ import annotations

import itertools
import string
from dataclasses import dataclass

import numpy as np
import polars as pl

from ehrxqa_pipeline.demo.ehr import icd_codes as codes
from ehrxqa_pipeline.demo.ehr.util import table

TAIL_WEIGHT = 0.15  # weight of each generated code (real codes weigh 0.1-10)
SHARED_PCS_TITLES = 3  # generated ICD-10-PCS codes that reuse another generated code's title


@dataclass(frozen=True)
class Pool:
    codes: np.ndarray  # icd_code strings
    p: np.ndarray  # sampling probabilities


@dataclass(frozen=True)
class IcdDictionaries:
    diagnoses: pl.DataFrame
    procedures: pl.DataFrame
    pools: dict  # (kind, version) -> Pool, kind "dx" / "px"


def _codes9_dx(rng, n, taken):
    cat = rng.integers(10, 1000, size=4 * n)
    sub = rng.integers(0, 100, size=4 * n)
    cand = [f"{c:03d}{s}" if s < 10 else f"{c:03d}{s:02d}" for c, s in zip(cat, sub)]
    return _fresh(cand, n, taken)


def _codes10_dx(rng, n, taken):
    letters = np.array(list("CDGHKLMNQS"))[rng.integers(0, 10, size=4 * n)]
    num = rng.integers(0, 100, size=4 * n)
    tail = rng.integers(0, 100, size=4 * n)
    cand = [f"{a}{b:02d}{t}" for a, b, t in zip(letters, num, tail)]
    return _fresh(cand, n, taken)


def _codes9_px(rng, n, taken):
    return _fresh([f"{c:04d}" for c in rng.integers(100, 10000, size=4 * n)], n, taken)


def _codes10_px(rng, n, taken):
    alphabet = np.array(list(string.digits + "BCDFGHJKLMNPQRSTVWXYZ"))
    chars = alphabet[rng.integers(0, len(alphabet), size=(4 * n, 6))]
    heads = np.array(list("0123456789BDF"))[rng.integers(0, 13, size=4 * n)]
    return _fresh([h + "".join(c) for h, c in zip(heads, chars)], n, taken)


def _fresh(cand, n, taken):
    """First ``n`` candidates not yet used (dictionary-sized, so a set is fine here)."""
    out = []
    for c in cand:
        if c not in taken:
            taken.add(c)
            out.append(c)
            if len(out) == n:
                return out
    raise ValueError("not enough distinct generated ICD codes")


def _titles(rng, parts, n):
    combos = list(itertools.product(*parts))
    order = rng.permutation(len(combos))[:n]
    return [combos[i] for i in order]


def make_icd_dictionaries(rng: np.random.Generator, n_tail: int) -> IcdDictionaries:
    """Dictionaries with ``n_tail`` generated diagnoses per version and ``n_tail // 2`` procedures."""
    taken_dx = {c for c, _, _ in codes.DIAGNOSES_9 + codes.DIAGNOSES_10}
    dx_titles = _titles(rng, (codes.TAIL_CONDITIONS, codes.TAIL_SITES, codes.TAIL_QUALIFIERS), 2 * n_tail)
    dx9 = [(c, f"{a} {s}, {q}", TAIL_WEIGHT) for c, (a, s, q) in zip(_codes9_dx(rng, n_tail, taken_dx),
                                                                       dx_titles[:n_tail])]
    dx10 = [(c, f"{a} {s}, {q}", TAIL_WEIGHT) for c, (a, s, q) in zip(_codes10_dx(rng, n_tail, taken_dx),
                                                                        dx_titles[n_tail:])]
    n_px = max(n_tail // 2, SHARED_PCS_TITLES + 1)
    taken_px = {c for c, _, _ in codes.PROCEDURES_9 + codes.PROCEDURES_10}
    real_px = {t for _, t, _ in codes.PROCEDURES_9 + codes.PROCEDURES_10}
    px_titles = _titles(rng, (codes.TAIL_OPERATIONS, codes.TAIL_SITES, codes.TAIL_APPROACHES), 2 * n_px + 20)
    px9 = [(c, f"{o.lower()} {s}", TAIL_WEIGHT) for c, (o, s, _) in zip(_codes9_px(rng, n_px, taken_px),
                                                                         px_titles[:n_px])]
    # ICD-9 tail titles omit the approach, so they may repeat: keep the first of each
    seen = set(real_px)
    px9 = [r for r in px9 if not (r[1] in seen or seen.add(r[1]))]
    px10_titles = [t for t in (f"{o} {s.title()}, {a}" for o, s, a in px_titles[n_px:]) if t not in real_px]
    px10_titles = px10_titles[:n_px]
    # PCS codes differing only in a character the title does not spell out share one title
    px10_titles[-SHARED_PCS_TITLES:] = px10_titles[:SHARED_PCS_TITLES]
    px10 = [(c, t, TAIL_WEIGHT) for c, t in zip(_codes10_px(rng, n_px, taken_px), px10_titles)]

    lists = {("dx", 9): codes.DIAGNOSES_9 + dx9, ("dx", 10): codes.DIAGNOSES_10 + dx10,
             ("px", 9): codes.PROCEDURES_9 + px9, ("px", 10): codes.PROCEDURES_10 + px10}
    pools = {}
    for key, rows in lists.items():
        w = np.array([r[2] for r in rows], dtype=float)
        pools[key] = Pool(np.array([r[0] for r in rows], dtype=object), w / w.sum())

    def dictionary(name, kind):
        rows = [(c, v, t) for v in (9, 10) for c, t, _ in lists[(kind, v)]]
        df = table(name, {"icd_code": [r[0] for r in rows], "icd_version": [r[1] for r in rows],
                          "long_title": [r[2] for r in rows]})
        return df.sort("icd_code", "icd_version")  # the real files are sorted by code

    return IcdDictionaries(dictionary("d_icd_diagnoses", "dx"), dictionary("d_icd_procedures", "px"), pools)


def version_collisions(d: pl.DataFrame) -> int:
    """Codes present under both versions with different titles (merged by a version-blind join)."""
    g = d.group_by("icd_code").agg(pl.col("icd_version").n_unique().alias("v"),
                                   pl.col("long_title").n_unique().alias("t"))
    return int(g.filter((pl.col("v") > 1) & (pl.col("t") > 1)).height)


def shared_titles(d: pl.DataFrame) -> int:
    """Titles carried by two or more distinct codes (a de-duplication on long_title drops all but one)."""
    g = d.group_by("long_title").agg(pl.col("icd_code").n_unique().alias("n"))
    return int(g.filter(pl.col("n") > 1).height)
