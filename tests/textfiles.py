"""Read and rewrite source files in tests, transparently for .csv and .csv.gz (gzip mtime 0)."""

import gzip
from pathlib import Path


def read_text(path: Path) -> str:
    data = path.read_bytes()
    return (gzip.decompress(data) if path.suffix == ".gz" else data).decode()


def write_text(path: Path, text: str) -> None:
    data = text.encode()
    path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)


def edit(path: Path, fn) -> None:
    write_text(path, fn(read_text(path)))
