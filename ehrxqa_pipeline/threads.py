"""How many CPU threads one step may use for work whose result does not depend on the thread count.

A step runs beside others under Dagster's multiprocess executor (`ehrxqa dev`, max 2 at once) and in the test
workers: there one thread each does the most work per CPU second (OpenBLAS's threads spin while they wait for
a core). `ehrxqa build` runs one step at a time in its own process, so there such work may use every core
(``steps_run_alone``). Only work that gives bitwise the same result on any thread count may ask
(``step_threads``): the sentence embeddings do (tests/paraphrase/test_embed.py); torch training does not.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

_alone = False


def cores() -> int:
    """The cores this process may run on (its CPU affinity, which a container limits)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def step_threads() -> int:
    """Threads for a step's thread-count-independent work: every core inside ``steps_run_alone``, else 1."""
    return cores() if _alone else 1


@contextmanager
def steps_run_alone() -> Iterator[None]:
    """Inside, this process runs one step at a time and nothing else beside it (`ehrxqa build`)."""
    global _alone
    outer, _alone = _alone, True
    try:
        yield
    finally:
        _alone = outer
