"""EHRXQA sampled items as stored rows, and release records in the published format (reference-builders.md 6.7).

Stored rows (the warehouse table ``ehrxqa.questions``, ``STORED_SCHEMA``): one row per sampled item with
its split, the 0-based ``id`` (position in the split file), database, template index / scope / modality,
the draw order, the question, gold SQL, NeuralSQL, the answer (JSON) and the other record fields (JSON).

Release records, one JSON file per split, fields in this order: db_id, split, id, question, template, query,
value, q_tag, t_tag, o_tag, v_tag, tag, para_type, is_impossible, answer. Until paraphrasing lands,
``question`` is the filled template and ``para_type`` is "none" (docs/deviations.md); ``_gold_program``
is not published. A split file is ordered by template index, then draw order; ``id`` counts from 0.

``check_stored(frame, databases, workers)`` re-executes every stored item's gold SQL and NeuralSQL (oracle VQA)
against the database it was drawn from (``consistency.check_items``) and returns the mismatches.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import polars as pl

from ehrxqa_pipeline import atomic
from ehrxqa_pipeline.questions.ehrxqa import BY_INDEX, CATALOG, FilledItem, Mismatch, check_items
from ehrxqa_pipeline.questions.ehrxqa.sampling import SPLITS, DatabaseFiles, Sample, run_parallel
from ehrxqa_pipeline.questions.ehrxqa.stats import modality, scope_axes
from ehrxqa_pipeline.questions.ehrxqa.unanswerable import UNANSWERABLE_BY_INDEX
from ehrxqa_pipeline.questions.vqa_templates import get_template

DB_ID = "mimic_iv_cxr"
PARA_TYPE = "none"  # no paraphrase yet: question == template
RECORD_FIELDS = ("db_id", "split", "id", "question", "template", "query", "value", "q_tag", "t_tag", "o_tag",
                 "v_tag", "tag", "para_type", "is_impossible", "answer")
INTERNAL_KEYS = ("answer", "_gold_program", "template_index", "scope", "modality")  # stored in own columns
STORED_SCHEMA = {"split": pl.String, "id": pl.Int64, "database": pl.String, "template_index": pl.Int64,
                 "scope": pl.String, "modality": pl.String, "draw": pl.Int64, "question": pl.String,
                 "gold_sql": pl.String, "neural_sql": pl.String, "answer": pl.String, "record": pl.String}


def catalog_rows(templates=CATALOG) -> dict[str, dict]:
    """The template catalog as data, by template index (as a string, sorted): the published
    template_idx_to_template_info.json fields (question_template = the q_tag, vqa_template with ${...} slots,
    null for table templates) plus scope, modality, patient_scope and images."""
    out = {}
    for t in sorted(templates, key=lambda x: x.index):
        key = getattr(t, "vqa_key", None)
        vqa = get_template(key).text if key else None
        axes = scope_axes(t.scope)
        out[str(t.index)] = {"question_template": t.text, "vqa_template": vqa[0].lower() + vqa[1:] if vqa else None,
                             "scope": t.scope, "modality": axes["modality"], "patient_scope": axes["patient_scope"],
                             "images": axes["images"]}
    return out


def stored_frame(sample: Sample) -> pl.DataFrame:
    """One row per sampled item (``STORED_SCHEMA``), in release order; ``id`` = position in the split."""
    rows, position = [], dict.fromkeys(SPLITS, 0)
    for s in sample.items:
        rows.append({"split": s.split, "id": position[s.split], "database": s.database,
                     "template_index": s.template_index, "scope": s.scope, "modality": modality(s.scope),
                     "draw": s.draw, "question": s.question, "gold_sql": s.gold_sql, "neural_sql": s.neural_sql,
                     "answer": json.dumps(s.answer),
                     "record": json.dumps({k: v for k, v in s.record.items() if k not in INTERNAL_KEYS})})
        position[s.split] += 1
    return pl.DataFrame(rows, schema=STORED_SCHEMA)


def _require_columns(frame: pl.DataFrame, where: str) -> None:
    missing = [c for c in STORED_SCHEMA if c not in frame.columns]
    if missing:
        raise ValueError(f"{where}: missing columns {missing}; re-materialize ehrxqa/questions")


def _t_tag(value, where: str) -> list[str]:
    if value is None:
        return [""] * 5
    if not isinstance(value, list) or len(value) != 5 or not all(isinstance(x, str) for x in value):
        raise ValueError(f"{where}: t_tag must be a list of 5 strings [global1, global2, within, exact1, exact2], "
                         f"got {value!r}; fix FilledItem.record()")
    return value


def release_record(row: Mapping) -> dict:
    """One published record from a stored row (keys in ``RECORD_FIELDS`` order)."""
    where = f"ehrxqa.questions split={row['split']} id={row['id']} (template {row['template_index']})"
    rec = json.loads(row["record"])
    template = rec.get("template", row["question"])
    return {"db_id": rec.get("db_id", DB_ID), "split": row["split"], "id": int(row["id"]),
            "question": template, "template": template, "query": rec.get("query", row["neural_sql"].lower()),
            "value": rec.get("value", {}), "q_tag": rec.get("q_tag", ""), "t_tag": _t_tag(rec.get("t_tag"), where),
            "o_tag": rec.get("o_tag", {}), "v_tag": rec.get("v_tag", {}), "tag": rec.get("tag", ""),
            "para_type": PARA_TYPE, "is_impossible": bool(rec.get("is_impossible", False)),
            "answer": json.loads(row["answer"])}


def build_records(frame: pl.DataFrame) -> dict[str, list[dict]]:
    """Split -> records in file order (by ``id``); every split present, possibly empty."""
    _require_columns(frame, "ehrxqa.questions")
    out: dict[str, list[dict]] = {s: [] for s in SPLITS}
    for row in frame.sort("split", "id").iter_rows(named=True):  # formatting only: one dict per record
        if row["split"] not in out:
            raise ValueError(f"ehrxqa.questions: unknown split {row['split']!r}; expected one of {SPLITS}")
        out[row["split"]].append(release_record(row))
    for split, records in out.items():
        if [r["id"] for r in records] != list(range(len(records))):
            raise ValueError(f"ehrxqa.questions: ids of split {split} are not 0..{len(records) - 1}; "
                             "re-materialize ehrxqa/questions")
    return out


def write_json(obj, path: str | Path, indent: int = 4) -> None:
    """Write JSON atomically (temporary file in the same folder renamed over ``path``), newline at the end."""
    atomic.write_json(path, obj, indent=indent)


def write_release(records: Mapping[str, list[dict]], out_dir: str | Path) -> dict[str, Path]:
    """EHRXQA_HOME/release/ehrxqa/{train,valid,test}.json (indent 4, as published)."""
    paths = {s: Path(out_dir) / f"{s}.json" for s in SPLITS}
    for split, path in paths.items():
        write_json(list(records.get(split, [])), path)
    return paths


def stored_items(rows: list[dict]) -> list[FilledItem]:
    """FilledItems rebuilt from stored rows (what ``check_items`` needs; ``values`` are not restored)."""
    out = []
    for row in rows:
        template = BY_INDEX.get(row["template_index"]) or UNANSWERABLE_BY_INDEX.get(row["template_index"])
        if template is None:
            raise ValueError(f"ehrxqa.questions: template {row['template_index']} is not in the catalog; "
                             "re-materialize ehrxqa/questions")
        out.append(FilledItem(template=template, values={}, question=row["question"],
                              gold_sql=row["gold_sql"], neural_sql=row["neural_sql"], answer=json.loads(row["answer"])))
    return out


def _check_chunk(files: DatabaseFiles, rows: list[dict]) -> list[Mismatch]:
    conn = files.open()
    try:
        return check_items(stored_items(rows), conn)
    finally:
        conn.close()


def check_stored(frame: pl.DataFrame, databases: Mapping[str, DatabaseFiles], workers: int = 1) -> list[Mismatch]:
    """Mismatches of every stored item against the database it was drawn from (empty = consistent), in
    ``workers`` processes (interleaved chunks per database)."""
    _require_columns(frame, "ehrxqa.questions")
    rows = frame.sort("split", "id").to_dicts()
    unknown = sorted({r["database"] for r in rows} - set(databases))
    if unknown:
        raise ValueError(f"ehrxqa.questions: items from databases {unknown} but no database files for them")
    chunks = max(1, workers)
    jobs = [(files, part) for name, files in databases.items()
            for part in ([r for r in rows if r["database"] == name][k::chunks] for k in range(chunks)) if part]
    return [m for found in run_parallel(_check_chunk, jobs, workers) for m in found]
