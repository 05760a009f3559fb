"""Worker processes: fresh ones, never a fork of the calling process (which may hold threads and connections).

Forked from a forkserver that has loaded what they run (``MODULES``), where the platform has one; else spawned.
The server is the process's own: multiprocessing starts it with the first pool, loads the preload list then,
and keeps it while the process or any worker of it lives. ``serving`` starts it ahead of that, with more to
load: `ehrxqa build` serves for its whole run with Great Expectations (``GX``), so that the server loads it on
another core while the build goes on, and a contract suite run before the build has imported it itself runs
in a worker kept for the build (``call``; ``quality.check_gx``) instead of importing it here (1.2-1.4 s on the
2-core machine, the first round of most partial re-runs). The kept worker stops when the build ends, and on
its own if the build's process dies (killed): nothing outlives the build, holding its output pipes open.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import os
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager

# What the sampling and consistency-check workers run: each worker forked from the server starts with it loaded
# (a spawned worker imported it again, about 0.4 s, in each pool).
MODULES = ("ehrxqa_pipeline.questions.ehrxqa.records",)
GX = "ehrxqa_pipeline.gx"  # Great Expectations, as the contract checks import it

_loaded: tuple[str, ...] | None = None  # the server's preload list, once this module has started or used it
_worker: ProcessPoolExecutor | None = None  # ``call``'s
_lifeline = None  # the end of the kept worker's lifeline pipe this process holds (``_exit_with``)
_serving = False


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
    try:
        forkserver.ensure_running()  # spawns the server; it imports the list before it forks its first worker
    except OSError:  # no server here (no Unix sockets, no processes left): the work that would go there stays here
        return
    _loaded = (*MODULES, *extra)


@contextmanager
def serving(*extra: str) -> Iterator[None]:
    """Within: the server started (``start``) and ``call``'s worker kept from one call to the next; at the end
    that worker is stopped."""
    global _serving
    start(*extra)
    _serving = True
    try:
        yield
    finally:
        _serving = False
        stop()


def holds(module: str) -> bool:
    """Whether, while serving, the worker starts with ``module`` loaded and this process has not loaded it:
    work that needs it is then cheaper there than here."""
    return _serving and module in (_loaded or ()) and module not in sys.modules


def call(fn, *args):
    """``fn(*args)`` in the kept worker (started on the first call; while serving, what it loaded and set up on
    a call stays for the next); its exceptions are raised here."""
    global _worker, _lifeline
    if _worker is None:
        ctx = context()
        reader, _lifeline = ctx.Pipe(duplex=False)  # the worker reads; only this process writes
        _worker = ProcessPoolExecutor(max_workers=1, mp_context=ctx, initializer=_exit_with, initargs=(reader,))
    try:
        return _worker.submit(fn, *args).result()
    except BrokenProcessPool:  # it died (killed, out of memory): the next call starts another
        stop()
        raise
    finally:
        if not _serving:
            stop()


def stop() -> None:
    """Stop the kept worker, if any."""
    global _worker, _lifeline
    if _worker is not None:
        _worker.shutdown(wait=True)
        _lifeline.close()
        _worker = _lifeline = None


def _exit_with(lifeline) -> None:
    """In the kept worker: exit once the process it works for has ended (killed, or exited without stopping it),
    when ``lifeline``, a pipe only that process writes to, reads its end. The worker's task queue would never
    say so: the worker holds both of its ends."""
    def watch() -> None:
        try:
            lifeline.recv()
        except EOFError:
            pass
        os._exit(1)
    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()
