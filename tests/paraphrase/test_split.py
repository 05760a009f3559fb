"""k-means (k=4) over edit distance: deterministic, order-independent, sides disjoint, 3:1."""

import itertools

import numpy as np

from ehrxqa_pipeline.paraphrase import rules
from ehrxqa_pipeline.paraphrase.split import TEST, TRAIN, distance_matrix, kmeans, split_pool, within_one_edit, words
from ehrxqa_pipeline.paraphrase.templates import all_templates


def _levenshtein(a, b):
    d = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, d[0] = d[0], i
        for j, y in enumerate(b, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (x != y))
    return d[-1]


def test_distance_matrix_matches_reference():
    texts = ["", "a", "is there x", "is there any x", "there x is", "list all x in y", "a b c d e f", "f e d c b a"]
    seqs = [t.split() for t in texts]
    d = distance_matrix(seqs)
    for i, j in itertools.product(range(len(seqs)), repeat=2):
        assert d[i, j] == _levenshtein(seqs[i], seqs[j]), (texts[i], texts[j])
        assert within_one_edit(seqs[i], seqs[j]) == (d[i, j] <= 1)


def test_split_is_deterministic_disjoint_and_three_to_one():
    pool = rules.variants(all_templates()[0])[:24]
    out = split_pool(pool)
    assert out == split_pool(list(reversed(pool)))  # order-independent
    assert len({c for _, c, _ in out}) == 4
    train = {t for t, _, s in out if s == TRAIN}
    test = {t for t, _, s in out if s == TEST}
    assert train and test and not (train & test) and train | test == set(pool)
    test_cluster = {c for _, c, s in out if s == TEST}
    assert len(test_cluster) == 1  # exactly one cluster of four goes to valid/test
    assert abs(len(test) - len(pool) / 4) <= min(abs(sum(1 for _, c, _ in out if c == k) - len(pool) / 4)
                                                 for k in range(4)) + 1e-9


def test_small_pools():
    assert split_pool([]) == []
    assert split_pool(["only one"]) == [("only one", 0, TRAIN)]
    two = split_pool(["is there x?", "can you see x?"])
    assert sorted(s for _, _, s in two) == [TEST, TRAIN]


def test_kmeans_separates_obvious_groups():
    x = np.array([[0, 0], [0, 0.1], [5, 5], [5, 5.1], [10, 0], [10, 0.1], [0, 10], [0.1, 10]], float)
    labels = kmeans(x, 4)
    assert len(set(labels.tolist())) == 4 and all(labels[i] == labels[i + 1] for i in range(0, 8, 2))
    assert (kmeans(x, 4) == labels).all()


def test_words_keep_placeholders_whole():
    assert words("Is ${object_1} in [time_filter_global1] for {patient_id}?") == (
        "is", "${object_1}", "in", "[time_filter_global1]", "for", "{patient_id}")
