"""Worker processes: fresh ones, never a fork of the calling process (which may hold threads and connections).

Forked from a forkserver that has loaded what they run (``MODULES``), where the platform has one; else spawned.
The server is the process's own: multiprocessing starts it with the first pool, loads the preload list then,
and keeps it until the process exits. ``start`` starts it ahead of that, with more to load: `ehrxqa build`
does as it begins, with Great Expectations (``GX``), so that the server loads it on another core while the
build goes on, and a contract check run before the build has imported it itself validates there
(``quality.check_gx``) instead of importing it (1.2-1.4 s on the 2-core machine, the first round of most
partial re-runs).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import sys
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

# What the sampling and consistency-check workers run: each worker forked from the server starts with it loaded
# (a spawned worker imported it again, about 0.4 s, in each pool).
MODULES = ("ehrxqa_pipeline.questions.ehrxqa.records",)
GX = "ehrxqa_pipeline.gx"  # Great Expectations, as the contract checks import it

_loaded: tuple[str, ...] | None = None  # the server's preload list, once this module has started or used it
_worker: ProcessPoolExecutor | None = None  # ``call``'s


def context() -> multiprocessing.context.BaseContext:
    """The context of fresh workers: forkserver (its preload ``MODULES``, unless ``start`` chose) or spawn."""
    global _loaded
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    if _loaded is None:  # (read when the server starts: the first pool of the process)
        ctx.set_forkserver_preload(list(MODULES))
        _loaded = MODULES
    return ctx


def start(*extra: str) -> None:
    """Start the server now, loading ``MODULES`` and ``extra`` while the caller goes on; nothing when it is
    started already (or the platform has no forkserver)."""
    global _loaded
    if _loaded is not None or "forkserver" not in multiprocessing.get_all_start_methods():
        return
    from multiprocessing import forkserver

    multiprocessing.get_context("forkserver").set_forkserver_preload([*MODULES, *extra])
    forkserver.ensure_running()  # spawns the server; it imports the list before it forks its first worker
    _loaded = (*MODULES, *extra)


def holds(module: str) -> bool:
    """Whether a worker starts with ``module`` loaded while this process has not loaded it: work that needs it
    is then cheaper there than here."""
    return module in (_loaded or ()) and module not in sys.modules


def call(fn, *args):
    """``fn(*args)`` in this process's worker: one, kept for the calls that follow (what it loaded and set up on
    its first call stays), started on the first; its exceptions are raised here."""
    global _worker
    if _worker is None:
        _worker = ProcessPoolExecutor(max_workers=1, mp_context=context())
    try:
        return _worker.submit(fn, *args).result()
    except BrokenProcessPool:  # it died (killed, out of memory): the next call starts another
        _worker = None
        raise
