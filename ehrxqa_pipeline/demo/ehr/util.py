"""Vectorised helpers of the synthetic MIMIC-IV generator.

All times are int64 epoch seconds in numpy until a table is assembled; children of a parent row
(events of an admission, rows of a panel) are expanded with repeat/cumsum, never with Python loops.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from ehrxqa_pipeline.sources.schema import TABLES

MINUTE = 60
HOUR = 3_600
DAY = 86_400

_POLARS = {"int": pl.Int64, "float": pl.Float64, "str": pl.String, "datetime": pl.Datetime("us"),
           "date": pl.Date}


def expand(counts: np.ndarray) -> np.ndarray:
    """Parent row index of every child, for ``counts[i]`` children of parent ``i``."""
    return np.repeat(np.arange(len(counts)), counts)


def rank_in_group(counts: np.ndarray) -> np.ndarray:
    """0..counts[i]-1 for the children of each parent, in expand() order."""
    counts = np.asarray(counts, dtype=np.int64)
    starts = np.cumsum(counts) - counts
    return np.arange(int(counts.sum())) - np.repeat(starts, counts)


def group_rank(keys: np.ndarray) -> np.ndarray:
    """Position of each row within its run of equal (already sorted) ``keys``."""
    n = len(keys)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    first = np.ones(n, dtype=bool)
    first[1:] = keys[1:] != keys[:-1]
    start = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    return np.arange(n) - start


def weighted(rng: np.random.Generator, weights, n: int) -> np.ndarray:
    """``n`` indices drawn with probability proportional to ``weights``."""
    w = np.asarray(weights, dtype=float)
    return rng.choice(len(w), size=n, p=w / w.sum())


def uniform_int(rng: np.random.Generator, lo, hi, n: int) -> np.ndarray:
    """``n`` integer seconds uniform in [lo, hi] (lo where hi <= lo); lo, hi scalars or length-n arrays."""
    lo = np.broadcast_to(np.asarray(lo, dtype=np.int64), (n,))
    span = np.maximum(np.broadcast_to(np.asarray(hi, dtype=np.int64), (n,)) - lo, 0)
    return lo + np.floor(rng.random(n) * (span + 1)).astype(np.int64)


def lognormal_secs(rng: np.random.Generator, median: float, sigma: float, n: int) -> np.ndarray:
    return np.round(median * np.exp(sigma * rng.standard_normal(n))).astype(np.int64)


def unique_ids(rng: np.random.Generator, lo: int, hi: int, n: int) -> np.ndarray:
    """``n`` distinct random ids in [lo, hi), as MIMIC's surrogate keys (random, not time ordered)."""
    return rng.choice(hi - lo, size=n, replace=False).astype(np.int64) + lo


def stratified(rng: np.random.Generator, start: np.ndarray, end: np.ndarray, counts: np.ndarray) -> tuple:
    """Whole-minute times for ``counts[i]`` events inside [start[i], end[i]], one per equal stratum.

    Each time falls in the middle 80 % of its stratum, so the times of one parent stay strictly increasing
    even after flooring to the minute (as MIMIC charts) whenever strata are longer than 10 minutes; that
    keeps (stay_id, charttime, itemid) unique. Returns (parent index, times).
    """
    parent = expand(counts)
    k = rank_in_group(counts)
    span = (end - start)[parent].astype(float)
    t = start[parent] + np.floor((k + 0.1 + 0.8 * rng.random(len(parent))) * span / counts[parent]).astype(np.int64)
    m = t // MINUTE * MINUTE
    return parent, np.clip(np.where(m >= start[parent], m, t), start[parent], end[parent])


def floor_min(t: np.ndarray) -> np.ndarray:
    return t // MINUTE * MINUTE


def ceil_min(t: np.ndarray) -> np.ndarray:
    return -(-t // MINUTE) * MINUTE


def year_start(years: np.ndarray) -> np.ndarray:
    return (np.asarray(years, dtype=np.int64) - 1970).astype("datetime64[Y]").astype("datetime64[s]").astype(
        np.int64)


def year_of(secs: np.ndarray) -> np.ndarray:
    return secs.astype("datetime64[s]").astype("datetime64[Y]").astype(np.int64) + 1970


def dt_series(secs: np.ndarray, null: np.ndarray | None = None) -> pl.Series:
    s = pl.Series(np.asarray(secs, dtype=np.int64) * 1_000_000).cast(pl.Datetime("us"))
    return s if null is None else _nullify(s, null)


def date_series(secs: np.ndarray) -> pl.Series:
    return pl.Series((np.asarray(secs, dtype=np.int64) // DAY).astype(np.int32)).cast(pl.Date)


def take(values, idx: np.ndarray, null: np.ndarray | None = None) -> pl.Series:
    """Strings ``values[idx]`` as a polars String series (gather, no Python objects per row)."""
    s = pl.Series(list(values), dtype=pl.String).gather(np.asarray(idx, dtype=np.int64))
    return s if null is None else _nullify(s, null)


def num_series(values: np.ndarray, dtype, null: np.ndarray | None = None) -> pl.Series:
    s = pl.Series(values).cast(dtype)
    return s if null is None else _nullify(s, null)


def _nullify(s: pl.Series, null: np.ndarray) -> pl.Series:
    return pl.select(pl.when(pl.Series(null)).then(None).otherwise(s)).to_series()


def table(name: str, cols: dict) -> pl.DataFrame:
    """Assemble table ``name`` in the real column order and types; every column must be given (None = null)."""
    spec = TABLES[name]
    missing = set(spec.header) - set(cols)
    extra = set(cols) - set(spec.header)
    if missing or extra:
        raise ValueError(f"{name}: missing columns {sorted(missing)}, unknown columns {sorted(extra)}")
    n = max(len(v) for v in cols.values() if v is not None)
    out = {}
    for c, typ in spec.types.items():
        v = cols[c]
        dtype = _POLARS[typ]
        if v is None:
            out[c] = pl.Series(c, [None] * n, dtype=dtype)
            continue
        s = v.alias(c) if isinstance(v, pl.Series) else pl.Series(c, v, strict=False)
        s = s.cast(dtype)
        out[c] = s.fill_nan(None) if dtype == pl.Float64 else s  # NaN is not a CSV null: make it one
    return pl.DataFrame(out)


def free_gaps(owner: np.ndarray, start: np.ndarray, end: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple:
    """Free time of each owner inside [lo, hi] between its busy intervals (any order, may overlap).

    Returns (gap owner, gap start, gap end) sorted by owner then start; empty gaps have end == start.
    """
    n_own = len(lo)
    order = np.lexsort((start, owner))
    o, s, e = owner[order], start[order], end[order]
    # running max of ends within owner: offset by owner so one accumulate never crosses owners
    big = np.int64(1) << np.int64(40)
    run_end = np.maximum.accumulate(e - lo[o] + o * big) - o * big + lo[o] if len(o) else e
    first = np.ones(len(o), dtype=bool)
    first[1:] = o[1:] != o[:-1]
    prev_end = np.empty_like(s)
    prev_end[1:] = run_end[:-1]
    prev_end[first] = lo[o[first]]
    # the tail gap of every owner: after its last busy interval, or the whole window
    last_end = lo.copy()
    if len(o):
        last = np.ones(len(o), dtype=bool)
        last[:-1] = o[1:] != o[:-1]
        last_end[o[last]] = run_end[last]
    g_owner = np.concatenate([o, np.arange(n_own)])
    g_lo = np.concatenate([prev_end, last_end])
    g_hi = np.concatenate([np.minimum(s, hi[o]), hi])
    g_lo = np.maximum(g_lo, lo[g_owner])
    g_hi = np.maximum(g_hi, g_lo)
    order = np.lexsort((g_lo, g_owner))
    return g_owner[order], g_lo[order], g_hi[order]


def place_in_gaps(rng: np.random.Generator, gaps: tuple, n_items: np.ndarray, margin: int) -> tuple:
    """Non-overlapping slots for ``n_items[o]`` items of each owner inside its free gaps.

    A gap is chosen with probability proportional to its usable length (``margin`` kept clear at both
    ends); k items landing in one gap split it into k equal slots, so items never overlap each other or
    the busy intervals. Owners without free time get nothing. Returns (owner, slot start, slot end).
    """
    g_owner, g_lo, g_hi = gaps
    length = g_hi - g_lo
    keep = np.minimum(margin, length // 4)
    u_lo, u_hi = g_lo + keep, g_hi - keep
    usable = np.maximum(u_hi - u_lo, 0).astype(float)
    n_own = len(n_items)
    total = np.bincount(g_owner, usable, minlength=n_own)
    n_items = np.where(total > 0, n_items, 0)
    cum = np.cumsum(usable)
    base = np.zeros(n_own)
    first_gap = np.searchsorted(g_owner, np.arange(n_own))
    has = first_gap < len(g_owner)
    base[has] = cum[first_gap[has]] - usable[first_gap[has]]
    owner = expand(n_items)
    x = base[owner] + rng.random(len(owner)) * total[owner]
    order = np.argsort(x, kind="stable")
    owner, x = owner[order], x[order]
    g = np.minimum(np.searchsorted(cum, x, side="right"), len(cum) - 1)
    m = np.bincount(g, minlength=len(cum))[g]
    j = group_rank(g)
    slot = usable[g] / m
    s_lo = u_lo[g] + np.floor(j * slot).astype(np.int64)
    s_hi = u_lo[g] + np.floor((j + 1) * slot).astype(np.int64)
    return owner, s_lo, s_hi
