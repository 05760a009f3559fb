"""Pool split: k-means (k = 4) over edit-distance features, clusters 3:1 to train and valid/test.

Paper (B.2.2): "we performed k-means clustering (k=4) on the paraphrases of each template, based on their
edit distance ... distributed in a 3-to-1 ratio for the train and validation/test sets". Here:
- edit distance is word-level Levenshtein over lower-cased words (a placeholder is one word), divided by
  the longer length; a paraphrase's features are its distances to every paraphrase of the pool;
- k-means is Lloyd's algorithm with a deterministic farthest-first start (the medoid, then repeatedly the
  paraphrase farthest from the chosen centres; ties to the first in sorted order), k = min(4, n);
- the valid/test side gets the one cluster whose size is closest to n/4 (ties: the earlier cluster), the
  train side the other clusters; with one paraphrase it goes to train.
The pool is sorted before clustering, so the split depends only on the set of paraphrases.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

K = 4
TRAIN, TEST = "train", "test"  # "test": the valid/test side


def words(text: str) -> tuple[str, ...]:
    return tuple(re.findall(r"\$\{\w+\}|\[\w+\]|\{\w+\}|[a-z0-9_/]+", text.lower()))


ARTICLES = frozenset({"a", "an", "the", "please"})


def loose_words(text: str) -> tuple[str, ...]:
    """words() without articles: what near-duplicate tests compare."""
    return tuple(w for w in words(text) if w not in ARTICLES)


def word_distance(a: Sequence[str], b: Sequence[str]) -> int:
    """Levenshtein distance between two word sequences."""
    return int(distance_matrix([tuple(a), tuple(b)])[0, 1])


def within_one_edit(a: Sequence[str], b: Sequence[str]) -> bool:
    """word_distance(a, b) <= 1, in linear time."""
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b)) <= 1
    short, long_ = (a, b) if len(a) < len(b) else (b, a)
    i = next((i for i, (x, y) in enumerate(zip(short, long_)) if x != y), len(short))
    return tuple(short[i:]) == tuple(long_[i + 1:])


def distance_matrix(seqs: Sequence[Sequence[str]]) -> np.ndarray:
    """Pairwise word-level Levenshtein distances (n x n ints), all pairs at once in numpy: the DP runs row by
    row over the first sequence, vectorised over pairs and columns (insertions by a running minimum)."""
    n = len(seqs)
    if n == 0:
        return np.zeros((0, 0), np.int64)
    vocab: dict[str, int] = {}
    ids = [[vocab.setdefault(w, len(vocab)) for w in s] for s in seqs]
    width = max(1, max(len(s) for s in ids))
    a_tok = np.full((n, width), -1, np.int64)
    b_tok = np.full((n, width), -2, np.int64)  # different pads: a pad never matches
    for i, s in enumerate(ids):
        a_tok[i, :len(s)] = s
        b_tok[i, :len(s)] = s
    lens = np.array([len(s) for s in ids])
    ii, jj = np.triu_indices(n, k=1)
    out = np.zeros((n, n), np.int64)
    if len(ii) == 0:
        return out
    a, b, la, lb = a_tok[ii], b_tok[jj], lens[ii], lens[jj]
    cols = np.arange(width + 1)
    prev = np.tile(cols, (len(ii), 1))
    result = np.where(la == 0, lb, 0)
    for i in range(1, width + 1):
        cost = (a[:, i - 1:i] != b).astype(np.int64)
        t = np.empty_like(prev)
        t[:, 0] = i
        t[:, 1:] = np.minimum(prev[:, 1:] + 1, prev[:, :-1] + cost)
        cur = np.minimum.accumulate(t - cols, axis=1) + cols
        done = la == i
        result[done] = cur[done, lb[done]]
        prev = cur
    out[ii, jj] = result
    out[jj, ii] = result
    return out


def features(texts: Sequence[str]) -> np.ndarray:
    """Normalised distances (0..1) of each text to every text."""
    seqs = [words(t) for t in texts]
    d = distance_matrix(seqs).astype(np.float64)
    lens = np.array([max(1, len(s)) for s in seqs], np.float64)
    return d / np.maximum.outer(lens, lens)


def kmeans(x: np.ndarray, k: int, iterations: int = 100) -> np.ndarray:
    """Cluster labels (0..k-1) by Lloyd's algorithm from a farthest-first start; deterministic."""
    n = x.shape[0]
    k = min(k, n)
    if k <= 1:
        return np.zeros(n, np.int64)
    sq = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    chosen = [int(np.argmin(sq.sum(1)))]
    while len(chosen) < k:
        chosen.append(int(np.argmax(sq[:, chosen].min(1))))
    centres = x[chosen].copy()
    labels = np.full(n, -1)
    for _ in range(iterations):
        new = np.argmin(((x[:, None, :] - centres[None, :, :]) ** 2).sum(-1), axis=1)
        for c in range(k):  # an emptied cluster restarts at the point farthest from its centre
            if not (new == c).any():
                far = int(np.argmax(((x - centres[new]) ** 2).sum(1)))
                new[far] = c
        if (new == labels).all():
            break
        labels = new
        centres = np.stack([x[labels == c].mean(0) for c in range(k)])
    return labels


def split_pool(texts: Sequence[str], k: int = K) -> list[tuple[str, int, str]]:
    """(text, cluster, side) per distinct text, sorted by text; side is TRAIN or TEST."""
    pool = sorted(set(texts))
    if not pool:
        return []
    labels = kmeans(features(pool), k)
    clusters = sorted(set(labels.tolist()))
    # renumber clusters by their first member, so labels do not depend on k-means' internal order
    first = {c: min(i for i, lab in enumerate(labels) if lab == c) for c in clusters}
    renum = {c: r for r, c in enumerate(sorted(clusters, key=first.get))}
    labels = [renum[c] for c in labels.tolist()]
    sizes = {c: labels.count(c) for c in range(len(clusters))}
    test = min(sizes, key=lambda c: (abs(sizes[c] - len(pool) / 4), c)) if len(sizes) > 1 else None
    return [(t, c, TEST if c == test else TRAIN) for t, c in zip(pool, labels)]
