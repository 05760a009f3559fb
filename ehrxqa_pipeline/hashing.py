"""Content hashes of source files, remembered by (size, mtime) so unchanged files are not re-read."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

_CHUNK = 1 << 22


def file_digest(path: Path) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


class HashCache:
    """A JSON file mapping absolute path -> [size, mtime_ns, digest]."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self._entries: dict[str, list] = json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            self._entries = {}

    def digest(self, file: Path) -> str:
        st = file.stat()
        key = str(file.absolute())
        hit = self._entries.get(key)
        if hit and hit[0] == st.st_size and hit[1] == st.st_mtime_ns:
            return hit[2]
        digest = file_digest(file)
        self._entries[key] = [st.st_size, st.st_mtime_ns, digest]
        self._save()
        return digest

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self._entries, sort_keys=True))
        os.replace(tmp, self.path)


def combine(*parts: str) -> str:
    """One digest for several digests or version strings."""
    return hashlib.blake2b("|".join(parts).encode(), digest_size=16).hexdigest()
