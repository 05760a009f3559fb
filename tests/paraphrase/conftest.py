"""Shared fixtures: one embedding model per test process (loading it takes a fraction of a second, encoding is
the cost: tests embed few sentences)."""

import pytest


@pytest.fixture(scope="session")
def embedder():
    from ehrxqa_pipeline.paraphrase.embed import Embedder

    return Embedder()
