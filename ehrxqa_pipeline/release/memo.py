"""What a release step wrote last, so that a partial rebuild leaves the files whose inputs did not change.

A memo is a JSON file outside the release (EHRXQA_HOME/cache/): per output name, a content hash of everything
the file is made from (``inputs``: the data, the code that writes it, the library versions) and a content hash
of the file as written (``hashing.file_digest``), with facts about it that the step reports (row counts, check
results). ``kept`` answers with those facts only while both hashes still hold, so an edited input, edited code or
a file altered or removed since makes the step write it again. A missing or damaged memo is an empty one.
"""

from __future__ import annotations

import json
from pathlib import Path

from ehrxqa_pipeline.atomic import read_json_object, write_text
from ehrxqa_pipeline.hashing import file_digest


class OutputMemo:
    def __init__(self, path: Path | None):
        self.path, self.entries = path, read_json_object(path)  # none yet, or damaged: every output is written

    def kept(self, name: str, inputs: str, file: Path) -> dict | None:
        """The facts recorded with ``name`` when ``inputs`` are those it was written from and ``file`` still
        holds what was written; else None (write it, then ``record``)."""
        last = self.entries.get(name)
        if self.path is None or not isinstance(last, dict) or last.get("inputs") != inputs or not Path(file).is_file():
            return None
        return last.get("facts") if file_digest(file) == last.get("file") else None

    def record(self, name: str, inputs: str, digest: str, facts: dict) -> dict:
        """``name`` was written from ``inputs`` as content with hash ``digest``; returns ``facts``."""
        self.entries[name] = {"inputs": inputs, "file": digest, "facts": facts}
        return facts

    def save(self) -> None:
        if self.path is not None:
            write_text(self.path, json.dumps(self.entries, indent=1, sort_keys=True) + "\n")
