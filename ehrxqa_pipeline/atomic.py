"""Atomic file outputs: a reader (or a build killed half-way) sees the old file or the new one, never half.

Every file the pipeline writes under EHRXQA_HOME (release JSON/Markdown/PNG, databases, answer sheets,
review queue) goes through a temporary file in the target's folder (same file system, hidden name so no
manifest or glob lists it) that is flushed, fsynced and renamed over the target with ``os.replace``. A
SIGKILL leaves at most a stray ``.NAME.HOST-PID.*.tmp`` file, which the next write of that target removes, and
``ehrxqa build`` removes wherever it lies under EHRXQA_HOME when it starts (``remove_stale_temps``).
"""

from __future__ import annotations

import json
import os
import re
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ehrxqa_pipeline.pids import alive

FILE_MODE = 0o644  # mkstemp creates 0600; release files are for everyone who may read the folder


def _owner_alive(tmp: Path) -> bool:
    """Whether the process that named ``tmp`` (``.NAME.HOST-PID.RANDOM.tmp``) may still be writing it: a
    process on another host (a shared volume) is assumed alive."""
    try:
        host, pid = tmp.name.rsplit(".", 3)[-3].rsplit("-", 1)
        return host != _host() or alive(int(pid))
    except (ValueError, IndexError):
        return True


def _host() -> str:
    return socket.gethostname().replace(".", "_").replace("-", "_")


def _temp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.{_host()}-{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")


@contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path (not yet created) next to ``path``; when the block succeeds the file written
    there replaces ``path`` atomically, when it fails (or the process dies) ``path`` is untouched. For
    writers that need a path of their own (SQLite, DuckDB, matplotlib). Temporary files left by a killed
    earlier writer of the same target are removed first."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        if not _owner_alive(stale):
            stale.unlink(missing_ok=True)
    tmp = _temp_path(path)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        Path(f"{tmp}.wal").unlink(missing_ok=True)  # DuckDB's write-ahead log of a temporary database


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; returns ``path``."""
    path = Path(path)
    with replacing(path) as tmp:
        tmp.write_bytes(data)
    return path


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8, newlines as given) to ``path`` atomically; returns ``path``."""
    return write_bytes(path, text.encode("utf-8"))


def write_json(path: str | Path, obj, indent: int | None = 2, sort_keys: bool = False,
               ensure_ascii: bool = False) -> Path:
    """``obj`` as JSON (non-ASCII kept unless ``ensure_ascii``, newline at the end) written atomically."""
    return write_text(path, json.dumps(obj, indent=indent, sort_keys=sort_keys, ensure_ascii=ensure_ascii) + "\n")


def read_json_object(path: str | Path | None) -> dict:
    """The JSON object in ``path``; {} when there is none yet, it is damaged or not an object (a cache or memo
    that reads as empty makes its step do the work again)."""
    if path is None:
        return {}
    try:
        obj = json.loads(Path(path).read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return obj if isinstance(obj, dict) else {}


_TEMP = re.compile(r"^\..+\.[^.]+-\d+\.[0-9a-f]{8}\.tmp(\.wal)?$")  # _temp_path's names (and DuckDB's log)


def remove_stale_temps(root: str | Path, skip: tuple[str, ...] = ()) -> list[tuple[Path, int]]:
    """Remove the temporary files under ``root`` (not below the top-level folders named in ``skip``) that a
    killed writer left: named as ``_temp_path`` names them, by a process of this host that is gone. Returns
    (path, bytes) of each file removed."""
    root, removed = Path(root), []
    for folder, dirs, files in os.walk(root):
        if Path(folder) == root:
            dirs[:] = [d for d in dirs if d not in skip]
        for name in files:
            if not _TEMP.match(name):
                continue
            path = Path(folder) / name
            owner = path.with_name(name.removesuffix(".wal"))
            if _owner_alive(owner):
                continue
            try:
                size = path.stat().st_size
                path.unlink()
            except FileNotFoundError:
                continue
            removed.append((path, size))
    return removed
