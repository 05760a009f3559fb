"""Content hashes of source files, remembered by (size, mtime, ctime, inode) so unchanged files are not re-read.

mtime alone misses an edit that keeps it (``touch -r``, ``cp -p``, a tool that restores it); ctime cannot be
set from user space and moves on every write, and a replaced file (new inode) is a new file."""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

_CHUNK = 1 << 22


def bytes_digest(data: bytes) -> str:
    """``file_digest`` of a file that holds ``data``."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def frame_digest(frame: pl.DataFrame) -> str:
    """``bytes_digest`` of the frame's content as uncompressed Arrow IPC: equal frames give equal digests (one
    equal but typed or ordered otherwise gives another, which only costs a memo a run)."""
    buffer = io.BytesIO()
    frame.rechunk().write_ipc(buffer, compression="uncompressed")
    return bytes_digest(buffer.getvalue())


def file_digest(path: Path) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


CHANGED_WHILE_READ = "changed while it was read"
WAIT_FOR_IT = "it is being written or copied; wait until it is complete, then build again"


class FileChangedError(OSError):
    """A file changed while it was being read (hashed or ingested): what was read is no single version."""


def stat_key(st: os.stat_result) -> list[int]:
    """What identifies one version of a file without reading it: size, mtime, ctime, inode, device."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def unchanged_since(path: Path, before: list[int]) -> None:
    """Raise ``FileChangedError`` naming ``path`` when its ``stat_key`` is no longer ``before``."""
    after = stat_key(Path(path).stat())
    if after != before:
        raise FileChangedError(f"{path} {CHANGED_WHILE_READ} (size {before[0]} -> {after[0]} bytes, mtime/ctime/"
                               f"inode changed): {WAIT_FOR_IT}")


class HashCache:
    """A JSON file mapping absolute path -> [size, mtime_ns, ctime_ns, inode, device, digest]."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self._entries: dict[str, list] = json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            self._entries = {}

    def digest(self, file: Path) -> str:
        """The content hash of ``file``; ``FileChangedError`` when it changed while it was hashed."""
        before = stat_key(file.stat())
        key = str(file.absolute())
        hit = self._entries.get(key)
        if hit and hit[:-1] == before:
            return hit[-1]
        digest = file_digest(file)
        unchanged_since(file, before)
        self._entries[key] = [*before, digest]
        self._save()
        return digest

    def _save(self) -> None:
        from ehrxqa_pipeline.atomic import write_text

        write_text(self.path, json.dumps(self._entries, sort_keys=True))


def combine(*parts: str) -> str:
    """One digest for several digests or version strings."""
    return hashlib.blake2b("|".join(parts).encode(), digest_size=16).hexdigest()
