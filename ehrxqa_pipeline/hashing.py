"""Content hashes of files, remembered by (size, mtime, ctime, inode) so unchanged files are not re-read.

mtime alone misses an edit that keeps it (``touch -r``, ``cp -p``, a tool that restores it); ctime cannot be
set from user space and moves on every write, and a replaced file (new inode) is a new file."""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
    """BLAKE2b (128 bits) of the file's bytes (``remembered``)."""
    return _remembered(Path(path), "blake2b", lambda: hashlib.blake2b(digest_size=16))


def sha256_file(path: Path) -> str:
    """SHA-256 of the file's bytes, as ``sha256sum`` prints it (``remembered``)."""
    return _remembered(Path(path), "sha256", hashlib.sha256)


# Digests of files read in this process: "algorithm:absolute path" -> [*stat_key, digest]. A digest is valid
# while the file's stat_key is the one read before hashing it (and again after: a file that changed meanwhile is
# not remembered), so a build's steps, which hash the same release files to verify, describe and list them, read
# each file once; ``remembering`` keeps them from one build to the next.
_DIGESTS: dict[str, list] = {}
DIGESTS_FILE = "file_digests.json"  # where ``ehrxqa build`` keeps them (EHRXQA_HOME/cache/)


def _remembered(path: Path, algorithm: str, new) -> str:
    def digest() -> str:
        h = new()
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
        return h.hexdigest()
    return remembered(path, algorithm, digest)


def remembered(path: Path, kind: str, compute: Callable[[], str]) -> str:
    """``compute()``, a text that depends on the content of the file ``path`` alone (a digest of it: ``kind``
    names which), remembered as file digests are (by the file's ``stat_key``; kept by ``remembering``)."""
    path = Path(path)
    key, before = f"{kind}:{path.absolute()}", stat_key(path.stat())
    hit = _DIGESTS.get(key)
    if hit is not None and hit[:-1] == before:
        return hit[-1]
    value = compute()
    if stat_key(path.stat()) == before:
        _DIGESTS[key] = [*before, value]
    return value


@contextmanager
def remembering(store: Path) -> Iterator[None]:
    """Within the block, the file digests kept in ``store`` (a JSON file; missing or damaged: none) are
    remembered; afterwards those of files that still exist are written back."""
    from ehrxqa_pipeline.atomic import read_json_object, write_text

    for key, entry in read_json_object(store).items():
        if isinstance(entry, list) and len(entry) == 6:
            _DIGESTS.setdefault(key, entry)
    try:
        yield
    finally:
        kept = {k: v for k, v in _DIGESTS.items() if _still(k.partition(":")[2], v)}
        write_text(store, json.dumps(kept, sort_keys=True))


def _still(path: str, entry: list) -> bool:
    try:
        return stat_key(os.stat(path)) == entry[:-1]
    except OSError:
        return False


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
