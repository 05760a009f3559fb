"""all-MiniLM-L6-v2 in numpy reproduces sentence-transformers; embeddings are cached."""

import numpy as np
import pytest

from ehrxqa_pipeline.paraphrase.embed import Embedder, _erf

# sentence-transformers documentation (sbert.net, "Computing Embeddings"): model.similarity for these three
SENTENCES = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
EXPECTED = {(0, 1): 0.6660, (0, 2): 0.1046, (1, 2): 0.1411}


def test_documented_similarities(embedder):
    v = embedder.embed(SENTENCES)
    assert v.shape == (3, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    sims = v @ v.T
    for (i, j), want in EXPECTED.items():
        assert sims[i, j] == pytest.approx(want, abs=1e-3)


def test_batch_composition_does_not_change_an_embedding(embedder):
    alone = embedder.encoder.encode([SENTENCES[2]])
    mixed = embedder.encoder.encode(SENTENCES + ["a much longer sentence that pads the others in its batch " * 3])
    assert np.allclose(alone[0], mixed[2], atol=1e-5)


def test_the_thread_count_changes_no_bit_of_an_embedding(embedder):
    """So `ehrxqa build`, which runs one step at a time, may encode on every core (threads.step_threads)."""
    from ehrxqa_pipeline.threads import step_threads, steps_run_alone

    texts = [f"{s} Number {i}." for i in range(50) for s in SENTENCES]  # three batches to share out
    encoder = embedder.encoder
    try:
        encoder.threads = 1
        one = encoder.encode(texts)
        encoder.threads = 2
        assert np.array_equal(encoder.encode(texts), one)
    finally:
        encoder.threads = None
    assert step_threads() == 1
    with steps_run_alone():
        assert step_threads() >= 1 and np.array_equal(encoder.encode(texts), one)
    assert step_threads() == 1


def test_disk_cache_round_trip(tmp_path, embedder):
    first = Embedder(tmp_path / "e.duckdb", encoder=embedder.encoder)
    a = first.embed(SENTENCES)
    assert first.computed == 3
    second = Embedder(tmp_path / "e.duckdb", encoder=embedder.encoder)
    b = second.embed(list(reversed(SENTENCES)))
    assert second.computed == 0 and np.array_equal(a[::-1], b)


def test_erf_matches_math_erf():
    import math

    x = np.linspace(-5, 5, 2001).astype(np.float32)
    assert np.abs(_erf(x.copy()) - np.array([math.erf(float(t)) for t in x])).max() < 5e-7


def test_gelu_in_row_blocks_changes_no_bit():
    """GELU runs ``GELU_ROWS`` rows at a time (cache-sized temporaries): bitwise what one pass over the whole
    array gives, with a partial last block."""
    from ehrxqa_pipeline.paraphrase.embed import GELU_ROWS, _gelu, _gelu_block

    x = (np.random.default_rng(0).standard_normal((3 * GELU_ROWS + 17, 1536)) * 3).astype(np.float32)
    blocked, whole = _gelu(x.copy()), _gelu_block(x.copy())
    assert np.array_equal(blocked.view(np.uint32), whole.view(np.uint32))
    assert not np.array_equal(blocked, x)  # it did compute
