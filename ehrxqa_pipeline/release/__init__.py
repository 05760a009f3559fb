"""The release folder's own files (EHRXQA_HOME/release), built after the datasets and databases:

* ``statistics/tables.{md,json}`` (``tables``): paper Tables B4-B6 and C9 gathered with cohort funnels,
  rows set aside per reason, per-template counts and answer distributions;
* ``plots/*.png`` (``plots``): answer distributions, per-template counts, cohort funnels;
* ``datasheet.md`` (``datasheet``): the paper's appendix A datasheet answered from the build;
* ``manifest.json`` (``manifest``): every release file with its SHA-256, source versions, code version,
  seed and configuration; two builds of the same inputs give identical manifests.

No wall-clock time and no absolute path is written into any of them.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder (hidden, so a manifest never
    lists it), renamed into place: a reader sees the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
