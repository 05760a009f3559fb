"""Deterministic writers for the synthetic source: same frame, same bytes."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import polars as pl

from ehrxqa_pipeline.sources.schema import DATE_FORMAT, DATETIME_FORMAT, SourceFile


def write_table(df: pl.DataFrame, root: Path, spec: SourceFile, compress: bool) -> Path:
    """Write ``df`` in the file's real layout: its header, separator, datetime formats; gzip with mtime 0."""
    missing = [c for c in spec.header if c not in df.columns]
    if missing:
        raise ValueError(f"{spec.name}: generator produced no column(s) {missing}")
    df = df.select(spec.header)
    path = root / spec.release_path
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    df.write_csv(buf, separator=spec.sep, datetime_format=DATETIME_FORMAT, date_format=DATE_FORMAT,
                 float_precision=None, null_value="")
    data = buf.getvalue()
    if compress and spec.gzip_ok:
        path = path.with_name(path.name + ".gz")
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=6,
                                                     filename="") as gz:
            gz.write(data)
    else:
        path.write_bytes(data)
    return path


def write_json(obj: object, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
