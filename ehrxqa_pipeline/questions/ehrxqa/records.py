"""EHRXQA sampled items as stored rows, and release records in the published format (reference-builders.md 6.7).

Stored rows (the warehouse table ``ehrxqa.questions``, ``STORED_SCHEMA``): one row per sampled item with
its split, the 0-based ``id`` (position in the split file), database, template index / scope / modality,
the draw order, the question, gold SQL, NeuralSQL, the answer (JSON), the other record fields (JSON) and the
slot fills (JSON: placeholder name -> the words written for it, ``FilledItem.fills``).

Release records, one JSON file per split, fields in this order: db_id, split, id, question, template, query,
value, q_tag, t_tag, o_tag, v_tag, tag, para_type, is_impossible, answer (the published fields, in the published
order), then resolved_value (ours: the studies the query resolves, ``item.py``; docs/deviations.md "Published
dataset: record format"). Before paraphrasing ``question`` is the filled template and ``para_type`` is "none";
the release asset replaces both with a phrasing filled with the stored fills
(``paraphrase.choose_ehrxqa_phrasings``). ``_gold_program`` is not published. A split
file is ordered by template index, then draw order; ``id`` counts from 0.

``check_stored(frame, databases, workers)`` re-executes every stored item's gold SQL and NeuralSQL (oracle VQA)
against the database it was drawn from (``consistency.check_items``) and returns the mismatches.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import polars as pl

from ehrxqa_pipeline import atomic
from ehrxqa_pipeline.contracts import load_contract
from ehrxqa_pipeline.hashing import file_digest
from ehrxqa_pipeline.questions.ehrxqa import BY_INDEX, CATALOG, FilledItem, Mismatch, check_items
from ehrxqa_pipeline.questions.ehrxqa.item import RESOLVED_KEYS
from ehrxqa_pipeline.questions.ehrxqa.memo import (ORACLE_TABLES, ResultMemo, query_key, table_digests, table_scope,
                                                    tables_named)
from ehrxqa_pipeline.questions.ehrxqa.sampling import SPLITS, DatabaseFiles, Sample, kept_open, run_parallel
from ehrxqa_pipeline.questions.ehrxqa.stats import modality, scope_axes
from ehrxqa_pipeline.questions.ehrxqa.unanswerable import UNANSWERABLE_BY_INDEX
from ehrxqa_pipeline.questions.neuralsql import OracleModule
from ehrxqa_pipeline.questions.neuralsql.parse_store import ParseStore

DB_ID = "mimic_iv_cxr"
PARA_TYPE = "none"  # no paraphrase yet: question == template
PUBLISHED_FIELDS = ("db_id", "split", "id", "question", "template", "query", "value", "q_tag", "t_tag", "o_tag",
                    "v_tag", "tag", "para_type", "is_impossible", "answer")  # the published EHRXQA record
RECORD_FIELDS = (*PUBLISHED_FIELDS, "resolved_value")
# The release's field dictionary (datasheet.md, README "The release folder"): field, JSON type, meaning
FIELD_DICTIONARY = (
    ("db_id", "string", "`mimic_iv_cxr`: the database the query runs on (train / valid: `databases/silver`, "
                        "test: `databases/gold`)"),
    ("split", "string", "`train`, `valid` or `test`"),
    ("id", "integer", "position in the split file, from 0 (records ordered by template, then draw order)"),
    ("question", "string", "the question asked: a paraphrase of `template` with the same values, lower-case "
                           "(`template` itself where the template has no paraphrase)"),
    ("template", "string", "the filled question template: `q_tag` with every placeholder replaced, lower-case"),
    ("query", "string", "NeuralSQL (SQLite SQL plus `func_vqa(\"question\", study_id)`), lower-cased; "
                        "`current_time` stands for `'2105-12-31 23:59:00'`; a string value with an apostrophe "
                        "is written in double quotes"),
    ("value", "object", "the database values written into the question, one per `{name}` placeholder of `q_tag`, "
                        "in order (e.g. `patient_id` for \"the last study of patient {patient_id} in 2105\"; "
                        "`study_id1`, `study_id2` only where the question names the study ids)"),
    ("q_tag", "string", "the question template: `{name}` database values, `${name}` visual values, `[slot]` "
                        "time and operation slots"),
    ("t_tag", "array of 5 strings", "time slots `[global1, global2, within, exact1, exact2]`, `\"\"` where "
                                    "absent"),
    ("o_tag", "object", "operation slots: slot -> `{nlq, sql, type, sql_pattern}`"),
    ("v_tag", "object", "visual values: `object`, `category` (Chest ImaGenome ids), `attribute` lists, plus "
                        "`comparison` in 2-image templates"),
    ("tag", "string", "`q_tag` with `[slot:tag]` annotations and the visual values filled; `{name}` kept"),
    ("para_type", "string", "where `question` comes from: `llm`, `rule-based`, `reviewer` (a reviewed "
                            "paraphrase) or `original` (no paraphrase: `question` = `template`)"),
    ("is_impossible", "boolean", "true only for the opt-in unanswerable questions (`query` `null`, `answer` `[]`)"),
    ("answer", "array", "the gold answer: one entry per result row (floats rounded to 6 places), `[]` when "
                        "none; yes/no answers are `[1]` / `[0]`"),
    ("resolved_value", "object", "not in the published files: the studies the query resolves, `study_id` "
                                 "(1-image templates) or `study_id1` (the asked study) and `study_id2` (the "
                                 "compared study) (2-image templates), `{}` otherwise. Unlike `value` it holds what "
                                 "the query picks, e.g. which study \"the last study of patient 1 in 2105\" or "
                                 "\"the previous study\" is; the blocking check `resolved_studies` re-derives it "
                                 "from `query` on the released database"),
)
INTERNAL_KEYS = ("answer", "_gold_program", "template_index", "scope", "modality")  # stored in own columns
STORED_SCHEMA = load_contract("ehrxqa.questions").polars_schema()  # the table ehrxqa.questions


def catalog_rows(templates=CATALOG) -> dict[str, dict]:
    """The template catalog as data, by template index (as a string, sorted): the published
    template_idx_to_template_info.json fields (question_template = the q_tag, vqa_template with ${...} slots,
    null for table templates) plus scope, modality, patient_scope and images."""
    out = {}
    for t in sorted(templates, key=lambda x: x.index):
        axes = scope_axes(t.scope)
        out[str(t.index)] = {"question_template": t.text, "vqa_template": getattr(t, "vqa_text", None),
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
                     "record": json.dumps({k: v for k, v in s.record.items() if k not in INTERNAL_KEYS}),
                     "fills": json.dumps(s.fills)})
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


def _resolved(value, where: str) -> dict:
    if value is None:
        return {}
    if (not isinstance(value, dict) or not set(value) <= set(RESOLVED_KEYS)
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in value.values())):
        raise ValueError(f"{where}: resolved_value must map study_id / study_id1 / study_id2 to integer study ids, "
                         f"got {value!r}; fix FilledItem.record()")
    return value


def release_record(row: Mapping) -> dict:
    """One published record from a stored row (keys in ``RECORD_FIELDS`` order); ``question`` and
    ``para_type`` from the row's ``paraphrase`` and ``para_type`` where it has them
    (``paraphrase.choose_ehrxqa_phrasings``), else the filled template and "none"."""
    where = f"ehrxqa.questions split={row['split']} id={row['id']} (template {row['template_index']})"
    rec = json.loads(row["record"])
    template = rec.get("template", row["question"])
    return {"db_id": rec.get("db_id", DB_ID), "split": row["split"], "id": int(row["id"]),
            "question": row.get("paraphrase", template), "template": template, "query": rec.get("query", row["neural_sql"].lower()),
            "value": rec.get("value", {}), "q_tag": rec.get("q_tag", ""), "t_tag": _t_tag(rec.get("t_tag"), where),
            "o_tag": rec.get("o_tag", {}), "v_tag": rec.get("v_tag", {}), "tag": rec.get("tag", ""),
            "para_type": row.get("para_type", PARA_TYPE), "is_impossible": bool(rec.get("is_impossible", False)),
            "answer": json.loads(row["answer"]), "resolved_value": _resolved(rec.get("resolved_value"), where)}


def build_records(frame: pl.DataFrame) -> dict[str, list[dict]]:
    """Split -> records in file order (by ``id``); every split present, possibly empty. ``frame``: stored rows,
    with ``paraphrase`` and ``para_type`` where phrased."""
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
    """EHRXQA_HOME/release/ehrxqa/<split>.json for each split of ``records`` (indent 4, as published); the
    release/ehrxqa assets write one side each: train and valid, or test."""
    unknown = set(records) - set(SPLITS)
    if unknown:
        raise ValueError(f"unknown EHRXQA splits {sorted(unknown)}; expected some of {SPLITS}")
    paths = {s: Path(out_dir) / f"{s}.json" for s in SPLITS if s in records}
    for split, path in paths.items():
        write_json(list(records[split]), path)
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


def _check_chunk(files: DatabaseFiles, rows: list[dict], parse_store: Path | None,
                 images: bool) -> tuple[list[Mismatch], dict[str, list]]:
    """Worker: some items of one database; without ``images`` (table items) on the database alone, no VQA module.
    The oracle is made once per process and database (``kept_open``). Returns the mismatches and the NeuralSQL
    runs (``check_item``)."""
    kept, runs = kept_open(files, answer_sheet=images), {}
    found = check_items(stored_items(rows), kept.conn, oracle=kept.once("oracle", OracleModule) if images else None,
                        parse_store=parse_store and ParseStore(parse_store), images=images, runs=runs)
    return found, runs


def _equal_parts(rows: list, n: int) -> list[list]:
    """``rows`` cut into ``n`` consecutive parts of equal size (within one)."""
    return [rows[k * len(rows) // n:(k + 1) * len(rows) // n] for k in range(n)]


ORACLE_RUNS = "ehrxqa_oracle_runs.json"  # where the pipeline keeps the oracle runs (``check_stored``; cache/)
PROGRESS_CHUNKS = 8  # per database and worker: how often a long check reports progress
_CHECKED = ("template_index", "question", "gold_sql", "neural_sql", "answer")  # what ``stored_items`` reads


def check_stored(frame: pl.DataFrame, databases: Mapping[str, DatabaseFiles], workers: int = 1,
                 log=None, parse_store: Path | None = None, memo: Path | None = None,
                 oracle_runs: Path | None = None) -> list[Mismatch]:
    """Mismatches of every stored item against the database it was drawn from (empty = consistent), in
    ``workers`` processes; ``log(message)`` after each chunk. A chunk holds whole runs of one template's items
    (a database's items by template, cut into equal parts): the items of a template share their query shapes,
    which each process parses once (``neuralsql.parser``), so a shape is parsed in one process, not in each.
    Table items run in chunks of their own, on the database without its answer sheet and with no VQA module.
    ``parse_store``: the file of a ``ParseStore`` that the processes share (the NeuralSQL parses).
    ``memo``: a JSON file (EHRXQA_HOME/cache) that keeps, per database and template, that its items passed
    (``_templates``): the same items, whose queries name the same tables with the same content (and, for
    image items, the same answer sheet), with the same code, are not run again.
    ``oracle_runs``: a JSON file where each database's image items' NeuralSQL runs with the oracle are kept by
    query (``oracle_runs_inputs``): the scores' oracle takes them from there instead of running them again."""
    _require_columns(frame, "ehrxqa.questions")
    rows = frame.sort("template_index", "split", "id").to_dicts()
    unknown = sorted({r["database"] for r in rows} - set(databases))
    if unknown:
        raise ValueError(f"ehrxqa.questions: items from databases {unknown} but no database files for them")
    kept = ResultMemo(memo)
    chunks = max(1, workers) * (PROGRESS_CHUNKS if log else 1)
    jobs, sides = [], []  # sides[k]: (database, images) of jobs[k]
    planned = {}  # (database, template) -> (inputs, items, image template?) of the templates run here
    runs: dict[str, dict] = {name: {} for name in databases}  # each database's image items' runs, by query key
    for name, files in databases.items():
        templates = _templates(kept, name, files, [r for r in rows if r["database"] == name],
                               frame.filter(pl.col("database") == name))
        for t, (inputs, items, is_image, before) in templates.items():
            if before is not None:
                runs[name].update(before.get("runs", {}))
            else:
                planned[(name, t)] = (inputs, items, is_image)
        if log and (passed := [t for t in templates.values() if t[3] is not None]):
            log(f"{sum(len(t[1]) for t in passed):,} items of {len(passed)} templates of the {name} database passed "
                "before on the same tables")
        for images in (False, True):
            part = [r for (db, _), (_, items, is_image) in planned.items() if db == name and is_image == images
                    for r in items]
            for chunk in _equal_parts(part, chunks):
                if chunk:
                    jobs.append((files, chunk, parse_store, images))
                    sides.append((name, images))
    checked = 0

    def done(k: int, result: tuple) -> None:
        nonlocal checked
        checked += len(jobs[k][1])
        log(f"{checked:,} of {len(rows):,} items checked, {len(result[0])} mismatches in chunk {k + 1} of "
            f"{len(jobs)}")
    results = run_parallel(_check_chunk, jobs, workers, done if log else None)
    failed = {(name, m.index) for (name, _), (found, _) in zip(sides, results) for m in found}
    for (name, images), (_, part) in zip(sides, results):
        if images:
            runs[name].update({query_key(q): run for q, run in part.items()})
    for (name, t), (inputs, items, is_image) in planned.items():
        if (name, t) not in failed:  # passed: kept, with the image items' runs for the next check to hand on
            keys = {query_key(r["neural_sql"]) for r in items} if is_image and oracle_runs is not None else set()
            kept.put(f"{name}/{t}", inputs, {"items": len(items), "runs": {k: runs[name][k] for k in sorted(keys)
                                                                          if k in runs[name]}}, save=False)
    kept.save()
    if oracle_runs is not None:
        out = ResultMemo(oracle_runs)
        for name, files in databases.items():
            if runs[name]:
                out.put(f"{name}/oracle_runs", oracle_runs_inputs(files), runs[name], save=False)
        out.save()
    return [m for found, _ in results for m in found]


def _templates(kept: ResultMemo, name: str, files: DatabaseFiles, rows: list[dict], items: pl.DataFrame
               ) -> dict[int, tuple]:
    """Template -> (inputs, its items, image template?, what ``kept`` holds for it when its items passed before
    on the same inputs, else None) of one database's items. The inputs: the code, the items' queries and answers,
    the content of every table their queries name (``memo.tables_named``) and, for image templates, the answer
    sheet's file and the tables the oracle reads besides (``memo.ORACLE_TABLES``)."""
    by_template: dict[int, list[dict]] = {}
    for r in rows:
        by_template.setdefault(r["template_index"], []).append(r)
    digests = table_digests(files.database) if kept.path is not None and rows else {}
    sheet = file_digest(files.answer_sheet) if digests else ""
    named = tables_named(items, digests)
    out = {}
    for t, group in by_template.items():
        images = not table_scope(group[0]["scope"])
        read = {*named.get(t, ()), *(ORACLE_TABLES if images else ())} & set(digests)
        inputs = ResultMemo.inputs({n: digests[n] for n in sorted(read)}, sheet if images else "",
                                   [[r[c] for c in _CHECKED] for r in group])
        before = kept.get(f"{name}/{t}", inputs)
        out[t] = (inputs, group, images, before if isinstance(before, dict) and before.get("items") == len(group)
                  else None)
    return out


def oracle_runs_inputs(files: DatabaseFiles) -> str:
    """What a database's oracle runs are made from: its file, its answer sheet's file and the code that runs them
    (``check_stored`` keeps them under it; the scores' oracle reads them only under the same)."""
    return ResultMemo.inputs(file_digest(files.database), file_digest(files.answer_sheet))
