"""Human review of paraphrase candidates: a CSV file in the repository that the pipeline reads.

``paraphrases/reviewed.csv``: one row per reviewed candidate, columns ``template,text,decision,note``:
- ``template``: the template id (``mimic_cxr_vqa/base_1``, ``ehrxqa/1000``);
- ``text``: the candidate exactly as generated (spacing is normalised when matching);
- ``decision``: ``accepted``, ``rejected`` or ``pending``;
- ``note``: the reviewer's note (free text).
A rejected text never enters a pool again, whoever generates it later. A candidate without a row is
``pending``: by default pending candidates are used (machine-validated, not yet pruned), and with
``require_review`` only accepted ones are. A reviewer may also add an accepted row with a phrasing of their
own; it goes through the same machine validation as generated candidates (source ``reviewer``).
The file is never written by the pipeline: pending candidates are listed in ``EHRXQA_HOME/paraphrase/
review_queue.csv`` in the same format, for the reviewer to decide and copy over.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import polars as pl

COLUMNS = ("template", "text", "decision", "note")
DECISIONS = ("accepted", "rejected", "pending")
REVIEWER_SOURCE = "reviewer"
REVIEW_SCHEMA = {"template_id": pl.String, "text": pl.String, "decision": pl.String, "note": pl.String,
                 "line": pl.Int64}


class ReviewFileError(ValueError):
    """The reviewed-paraphrases file is malformed; the message names the file and line."""


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def read_reviews(path: Path) -> pl.DataFrame:
    """The decisions of the file (a missing file: none). Raises ReviewFileError on a bad header, an unknown
    decision, or two rows giving the same candidate different decisions."""
    if not path.exists():
        return pl.DataFrame(schema=REVIEW_SCHEMA)
    rows, seen = [], {}
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or tuple(h.strip() for h in header) != COLUMNS:
            raise ReviewFileError(f"{path}: the header must be {','.join(COLUMNS)} (got {header})")
        for line, row in enumerate(reader, start=2):
            if not row or not any(c.strip() for c in row):
                continue
            if len(row) < 3:
                raise ReviewFileError(f"{path}:{line}: expected {len(COLUMNS)} columns, got {len(row)}")
            template, text, decision = row[0].strip(), normalise(row[1]), row[2].strip().lower()
            note = row[3].strip() if len(row) > 3 else ""
            if decision not in DECISIONS:
                raise ReviewFileError(f"{path}:{line}: decision {row[2]!r} is not one of {DECISIONS}")
            key = (template, text)
            if key in seen and seen[key][0] != decision:
                raise ReviewFileError(f"{path}:{line}: {template} {text!r} is {decision} here but "
                                      f"{seen[key][0]} on line {seen[key][1]}")
            seen[key] = (decision, line)
            rows.append({"template_id": template, "text": text, "decision": decision, "note": note, "line": line})
    return pl.DataFrame(rows, schema=REVIEW_SCHEMA).unique(["template_id", "text"], keep="last", maintain_order=True)


def reviewer_candidates(reviews: pl.DataFrame, generated: pl.DataFrame) -> pl.DataFrame:
    """Accepted rows whose text no generator produced: the reviewers' own phrasings, as candidates."""
    known = generated.select("template_id", text=pl.col("text").map_elements(normalise, return_dtype=pl.String))
    own = reviews.filter(pl.col("decision") == "accepted").join(known, on=["template_id", "text"], how="anti")
    return own.select("template_id", "text", source=pl.lit(REVIEWER_SOURCE))


def review_state(valid: pl.DataFrame, reviews: pl.DataFrame) -> pl.DataFrame:
    """One row per machine-valid candidate: its decision (``pending`` when the file has none) and note.
    ``valid``: template_id, rank, text, source (+ any columns, kept)."""
    keyed = valid.with_columns(_key=pl.col("text").map_elements(normalise, return_dtype=pl.String))
    joined = keyed.join(reviews.select("template_id", pl.col("text").alias("_key"), "decision", "note"),
                        on=["template_id", "_key"], how="left", maintain_order="left")
    return joined.with_columns(decision=pl.col("decision").fill_null("pending"),
                               note=pl.col("note").fill_null("")).drop("_key")


def orphans(reviews: pl.DataFrame, candidates: pl.DataFrame) -> pl.DataFrame:
    """File rows for texts no generator or reviewer row produced this run (kept; they just match nothing)."""
    known = candidates.select("template_id", text=pl.col("text").map_elements(normalise, return_dtype=pl.String))
    return reviews.join(known, on=["template_id", "text"], how="anti")


def usable(state: pl.DataFrame, require_review: bool) -> pl.DataFrame:
    allowed = ["accepted"] if require_review else ["accepted", "pending"]
    return state.filter(pl.col("decision").is_in(allowed))


def queue_csv(state: pl.DataFrame) -> str:
    """Pending candidates in the file's format (decision ``pending``; the machine's similarity as the note)."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(COLUMNS)
    pending = state.filter(pl.col("decision") == "pending").sort("template_id", "rank")
    for row in pending.iter_rows(named=True):
        sim = row.get("similarity")
        w.writerow([row["template_id"], row["text"], "pending",
                    f"{row['source']}; similarity {sim:.3f}" if sim is not None else row["source"]])
    return out.getvalue()

