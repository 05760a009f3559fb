"""Whether a process of this host is still running, for what a killed `ehrxqa` process leaves behind: the runs
it had started (``cli.instance.recover_interrupted``) and its temporary files (``atomic``)."""

from __future__ import annotations

import os
from pathlib import Path

_PROC = Path("/proc")


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs: it exists (or belongs to another user) and is not a zombie. A zombie has
    ended, and only waits for its parent to collect it: the child of a killed build is one until the first
    process of the machine reaps it, which in a container whose first process reaps nothing is never (a run
    beside the build then held its pool slot for ever, and the next build waited on it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not (_PROC / "self" / "stat").is_file():  # no /proc (macOS): what kill said
        return True
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:  # it ended just now
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"  # the state follows the name, which may hold ")"
