"""The garbage collector's settings for processes that run many Dagster steps one after another: `ehrxqa build`,
its run beside (``cli.beside``) and the test workers.

Dagster allocates many small containers for every event it writes and every automation evaluation it makes
(serdes). With CPython's default thresholds (700, 10, 10) that starts a full collection about every 70,000 net
allocations, and each one walks every tracked object of the loaded code location, Dagster and the libraries
(about 500,000). Measured on the whole-graph tests (tests/test_pipeline.py alone, one process): 20.7 s of its
185 s in the collector with the defaults, 6.7 s with ``THRESHOLDS``; a small build 3.2 s -> 1.2 s. Nothing a
step holds in memory depends on the collector: big data (DuckDB, polars, numpy, torch) lives in buffers that
reference counting frees, and a young generation of 10,000 objects is a few megabytes.
"""

from __future__ import annotations

import gc

THRESHOLDS = (10_000, 20, 20)  # young collections 14 times rarer; full ones about 60 times


def for_many_steps() -> None:
    """Moves every object alive now (the imported modules, the loaded definitions: they live as long as the
    process) to the permanent generation, which collections never walk, and sets ``THRESHOLDS``. Call it once
    the definitions are loaded."""
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
