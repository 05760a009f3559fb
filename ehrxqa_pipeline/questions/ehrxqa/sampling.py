"""EHRXQA question sampling (paper section 4.1.4; reference-builders.md 6.5): per template, up to 80 distinct
questions from the silver database split 7:1 into train / valid, and up to 10 from the gold database for test.

Per template and database, draws come from their own generator ``rng.generator(seed,
"ehrxqa.sample.<silver|gold>.<index>")``; one draw is one ``ImageFiller.fill(template, rng, tries=1)``: the
filler samples values (stages 1-4) and keeps the draw only if its gold SQL yields a valid answer. A draw
whose question text was already kept is a duplicate. Drawing stops at the first of:
- ``cap``: the template has ``cap`` distinct questions;
- ``exhausted``: ``patience`` consecutive draws added nothing (invalid or duplicate): the database cannot
  give more distinct questions of this template in reasonable time;
- ``attempt_limit``: ``cap * max_draws_per_item`` draws;
- ``empty_pool``: a precondition no draw can meet (no study, no patient with >= 2 studies for 2-image
  templates, no labelled (object, attribute) pair); no draw is made.
With ``caps.unanswerable`` = n > 0, each database also gives up to n EHRSQL-style unanswerable items
(``unanswerable.py``: ``is_impossible`` true, query ``null``, answer ``[]``; template indices 9000+, after every
catalog template in each split); the silver ones are split 7:1 like a template's, with
``generator(seed, "ehrxqa.split.unanswerable")``.
The train / valid split shuffles a template's kept silver items with ``generator(seed, "ehrxqa.split.<index>")``
and puts ``floor(n * valid / (train + valid) + 1/2)`` of them in valid; both keep draw order. Same databases,
seed and caps give the same items in the same order, whatever the number of worker processes.

Entry points: ``sample_database(files, database, seed, caps, templates, workers)`` -> ``Sample`` of one database
(what ehrxqa/silver and ehrxqa/gold each run), ``sample_ehrxqa(silver, gold, ...)`` of both (items as plain
data in release order, one ``TemplateReport`` per template and database); ``sample_templates`` for one database.

Table templates are drawn on the database without its answer sheet (they read no label).
``sample_database(..., memo=path)`` keeps each template's items under the content of the tables its draws read
(``reads.py``, ``memo.py``): an edit re-draws only the templates that read what it changed. A worker process keeps its
connection and filler across chunks (``kept_open``).

``open_database(db, answer_sheet)`` opens an exported database read-only with its answer sheet attached. A sheet
without an index on study_id (exports before that index existed) is read through an indexed in-memory copy:
without it every gold-SQL probe scans the whole sheet (tens of seconds per group question at full scale).
"""

from __future__ import annotations

import math
import os
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TypeVar

import numpy as np

from ehrxqa_pipeline.hashing import stat_key
from ehrxqa_pipeline.names import DATASET_SPLITS, SIDE_SPLITS
from ehrxqa_pipeline.questions.ehrxqa import BY_INDEX, CATALOG, FilledItem, ImageFiller
from ehrxqa_pipeline.questions.ehrxqa.memo import SCHEMA, ResultMemo, content_digests, table_scope
from ehrxqa_pipeline.questions.ehrxqa.table_pools import empty_pool_reason as table_empty_pool_reason
from ehrxqa_pipeline.questions.ehrxqa.unanswerable import unanswerable_items
from ehrxqa_pipeline.rng import generator
from ehrxqa_pipeline.workers import context as worker_context

DATABASES = ("silver", "gold")  # silver: train + valid, gold: test
SPLITS = DATASET_SPLITS


@dataclass(frozen=True)
class SamplingCaps:
    """Per-template caps (paper: 80 train+valid, 10 test, train:valid = 7:1) and the attempt bounds."""

    train_valid: int = 80
    test: int = 10
    train_parts: int = 7
    valid_parts: int = 1
    patience: int = 100  # consecutive draws without a new question before a template counts as exhausted
    max_draws_per_item: int = 25  # at most cap * this draws per template
    unanswerable: int = 0  # EHRSQL-style unanswerable items per database (off by default; see unanswerable.py)

    def __post_init__(self):
        for name in ("train_valid", "test", "train_parts", "valid_parts", "patience", "max_draws_per_item",
                     "unanswerable"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < (1 if name in ("patience", "max_draws_per_item") else 0):
                raise ValueError(f"SamplingCaps.{name} must be a non-negative integer (patience and "
                                 f"max_draws_per_item >= 1), got {value!r}")
        if self.train_parts + self.valid_parts == 0:
            raise ValueError("SamplingCaps: train_parts + valid_parts must be > 0 (e.g. 7 and 1)")

    def n_valid(self, n: int) -> int:
        """How many of ``n`` silver items go to valid: n * valid / (train + valid), rounded half up."""
        return math.floor(n * self.valid_parts / (self.train_parts + self.valid_parts) + 0.5)

    def cap(self, database: str) -> int:
        return self.train_valid if database == "silver" else self.test


@dataclass(frozen=True)
class TemplateReport:
    """How one template fared on one database."""

    template_index: int
    scope: str
    database: str  # silver / gold
    cap: int
    draws: int  # attempts made (one filler draw each)
    valid_draws: int  # draws whose gold SQL gave a valid answer (new or duplicate)
    kept: int  # distinct questions kept
    stop: str  # cap / exhausted / attempt_limit / empty_pool
    reason: str  # why fewer than cap ('' when the cap was reached)

    @property
    def duplicates(self) -> int:
        return self.valid_draws - self.kept

    def row(self) -> dict:
        return {"template_index": self.template_index, "scope": self.scope, "database": self.database,
                "cap": self.cap, "draws": self.draws, "valid_draws": self.valid_draws,
                "duplicates": self.duplicates, "kept": self.kept, "stop": self.stop, "reason": self.reason}


@dataclass(frozen=True)
class SampledItem:
    """One kept item as plain data (what the warehouse stores); ``record`` = ``FilledItem.record()``."""

    split: str
    database: str
    template_index: int
    scope: str
    draw: int  # 0-based position among the template's kept items of this database (draw order)
    question: str
    gold_sql: str
    neural_sql: str
    answer: list
    record: dict
    fills: dict  # placeholder name -> words (``FilledItem.fills``)

    @classmethod
    def of(cls, item: FilledItem, split: str, database: str, draw: int) -> SampledItem:
        return cls(split, database, item.template.index, item.template.scope, draw, item.question, item.gold_sql,
                   item.neural_sql, item.answer, item.record(), item.fills)


@dataclass
class Sample:
    items: list[SampledItem] = field(default_factory=list)  # ordered: split, template index, draw order
    reports: list[TemplateReport] = field(default_factory=list)

    def split(self, name: str) -> list[SampledItem]:
        return [i for i in self.items if i.split == name]


@dataclass(frozen=True)
class DatabaseFiles:
    """An exported EHRXQA database and its answer sheet (may be the same file)."""

    database: Path
    answer_sheet: Path

    def open(self, answer_sheet: bool = True) -> sqlite3.Connection:
        """The database, with its answer sheet unless ``answer_sheet`` is false (what table templates run on)."""
        return open_database(self.database, self.answer_sheet if answer_sheet else None)


def open_database(database: str | Path, answer_sheet: str | Path | None) -> sqlite3.Connection:
    """A read-only connection to an exported mimic_iv_cxr.db that also sees TB_CXR_PLUS (indexed copy); with
    ``answer_sheet`` None, the database alone (a query that reads TB_CXR_PLUS fails: no such table)."""
    paths = {"database": Path(database), **({} if answer_sheet is None else {"answer sheet": Path(answer_sheet)})}
    for what, path in paths.items():
        if not path.is_file():
            raise FileNotFoundError(f"EHRXQA {what} not found: {path}. Materialize the ehr_db assets first "
                                    "(`ehrxqa build --select group:ehr_db`).")
    conn = sqlite3.connect(f"{paths['database'].resolve().as_uri()}?mode=ro", uri=True)
    conn.execute("PRAGMA temp_store = MEMORY")
    if answer_sheet is None:
        return conn
    conn.execute("ATTACH DATABASE ? AS sheet", [f"{paths['answer sheet'].resolve().as_uri()}?mode=ro"])
    tables = {r[0] for r in conn.execute("SELECT name FROM sheet.sqlite_master WHERE type = 'table'")}
    if "tb_cxr_plus" not in tables:
        conn.close()
        raise ValueError(f"{paths['answer sheet']}: no table tb_cxr_plus; re-materialize the ehr_db assets")
    indexed = conn.execute("SELECT count(*) FROM sheet.sqlite_master WHERE type = 'index' AND "
                           "tbl_name = 'tb_cxr_plus' AND sql LIKE '%(study_id%'").fetchone()[0]
    if not indexed:  # an export from before the study_id index: probe an indexed in-memory copy instead
        # temp is searched before main and attached schemas, so unqualified tb_cxr_plus reads the copy
        conn.execute("CREATE TEMP TABLE tb_cxr_plus AS SELECT * FROM sheet.tb_cxr_plus ORDER BY row_id")
        conn.execute("CREATE INDEX temp.tb_cxr_plus_study ON tb_cxr_plus (study_id, relation)")
    return conn


def empty_pool_reason(filler: ImageFiller, template) -> str:
    """Why no draw of ``template`` can succeed on this database ('' when draws may succeed)."""
    if template.scope.startswith("TABLE"):
        return table_empty_pool_reason(filler, template) or ""
    by_patient = getattr(filler, "by_patient", None)
    if by_patient is not None and not by_patient:
        return "no study in TB_CXR"
    if template.scope.endswith("SINGLE-2") and by_patient is not None and \
            max(len(rows) for rows in by_patient.values()) < 2:
        return "no patient with >= 2 studies"
    if getattr(filler, "pairs", None) is not None and not filler.pairs:
        return "no labelled (object, attribute, category) in TB_CXR_PLUS"
    return ""


def sample_template(filler: ImageFiller, template, rng: np.random.Generator, cap: int, database: str,
                    caps: SamplingCaps) -> tuple[list[FilledItem], TemplateReport]:
    """Up to ``cap`` items of distinct question text, in draw order, and the template's report."""
    kept: list[FilledItem] = []
    seen: set[str] = set()
    draws = valid = idle = 0
    limit = cap * caps.max_draws_per_item
    reason = empty_pool_reason(filler, template) if cap else ""
    stop = "empty_pool" if reason else "cap"
    while not reason and len(kept) < cap:
        if draws >= limit:
            stop, reason = "attempt_limit", f"attempt limit reached ({draws} draws)"
            break
        if idle >= caps.patience:
            stop = "exhausted"
            reason = (f"no valid draw in {draws} attempts" if not valid else
                      f"no new question in {idle} consecutive draws")
            break
        draws += 1
        try:
            item = filler.fill(template, rng, tries=1)
        except Exception as e:  # a template bug: name the template, keep the cause
            raise RuntimeError(f"EHRXQA template {template.index} ({template.scope}): filling failed on the "
                               f"{database} database: {e}") from e
        if item is None:
            idle += 1
            continue
        valid += 1
        if item.question in seen:
            idle += 1
            continue
        seen.add(item.question)
        kept.append(item)
        idle = 0
    report = TemplateReport(template.index, template.scope, database, cap, draws, valid, len(kept), stop, reason)
    return kept, report


def sample_templates(conn: sqlite3.Connection | ImageFiller, database: str, seed: int, caps: SamplingCaps,
                     templates: Sequence, reads: dict | None = None
                     ) -> tuple[dict[int, list[SampledItem]], list[TemplateReport]]:
    """Kept items per template index (split still unset: '') and one report per template, for one database;
    ``conn``: a connection to it, or a filler already made on one. ``reads``: filled with each template index ->
    the tables its draws read (sorted; ``reads.TableReads``), what the filler read when it was made included."""
    if database not in DATABASES:
        raise ValueError(f"database must be one of {DATABASES}, got {database!r}")
    filler = conn if isinstance(conn, ImageFiller) else ImageFiller(conn)
    items, reports = {}, []
    for t in templates:
        rng = generator(seed, f"ehrxqa.sample.{database}.{t.index}")
        with filler.trace.frame() as read:
            kept, report = sample_template(filler, t, rng, caps.cap(database), database, caps)
        if reads is not None:
            reads[t.index] = sorted(read | filler.read_at_start)
        items[t.index] = [SampledItem.of(item, "", database, d) for d, item in enumerate(kept)]
        reports.append(report)
    return items, reports


T = TypeVar("T")


@dataclass
class KeptConnection:
    """A process's connection to a database's files and what was made on it (``kept_open``)."""

    stats: list  # the files' stat keys when it was opened
    conn: sqlite3.Connection
    made: dict = field(default_factory=dict)
    pid: int = field(default_factory=os.getpid)  # a forked child opens its own (SQLite: no connection across fork)

    def once(self, name: str, make: Callable[[sqlite3.Connection], T]) -> T:
        """``make(conn)``, made on the first call with ``name``; it must depend on the files' content only."""
        if name not in self.made:
            self.made[name] = make(self.conn)
        return self.made[name]


_KEPT: dict[tuple, KeptConnection] = {}  # (files, answer_sheet) -> this process's connection, the latest last
KEPT_OPEN = 2  # connections a process keeps: a step's database with and without its answer sheet


def kept_open(files: DatabaseFiles, answer_sheet: bool) -> KeptConnection:
    """``files.open(answer_sheet)``, kept open by this process while the files stay as they are (size, mtime,
    ctime, inode; else it is closed and opened again): the chunks of one step that a worker process runs share
    the connection and what they make on it (the filler's pools, the oracle's labels: about a second a chunk at
    full scale). Beyond ``KEPT_OPEN`` connections the oldest is closed."""
    if any(k.pid != os.getpid() for k in _KEPT.values()):
        _KEPT.clear()  # a forked child's copies of its parent's connections: left alone, never used
    paths = [files.database, *([files.answer_sheet] if answer_sheet else [])]
    if not all(Path(p).is_file() for p in paths):
        files.open(answer_sheet)  # raises, naming the missing file and the fix
    stats = [stat_key(Path(p).stat()) for p in paths]
    kept = _KEPT.pop((files, answer_sheet), None)
    if kept is not None and kept.stats != stats:
        kept.conn.close()
        kept = None
    _KEPT[(files, answer_sheet)] = kept = kept or KeptConnection(stats, files.open(answer_sheet))
    while len(_KEPT) > KEPT_OPEN:
        _KEPT.pop(next(iter(_KEPT))).conn.close()
    return kept


def _sample_chunk(files: DatabaseFiles, database: str, seed: int, caps: SamplingCaps, indices: list[int]):
    """Worker: one database, some templates (by index, so only plain data crosses processes); a chunk of table
    templates runs on the database without its answer sheet."""
    sheet = not all(table_scope(BY_INDEX[i].scope) for i in indices)
    filler = kept_open(files, sheet).once("filler", ImageFiller)
    reads: dict[int, list[str]] = {}
    items, reports = sample_templates(filler, database, seed, caps, [BY_INDEX[i] for i in indices], reads)
    return items, reports, reads


CHUNKS_PER_WORKER = 4  # template chunks per worker and database: progress is reported as each is done


def run_parallel(fn, jobs: list[tuple], workers: int, done=None) -> list:
    """``fn(*job)`` for every job, in job order; in this process when ``workers`` <= 1 (or one job), else in
    ``workers`` fresh processes (``ehrxqa_pipeline.workers``): results are the same either way.
    ``done(k, result)`` after each."""
    out = []
    if workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            out.append(fn(*job))
            if done:
                done(len(out) - 1, out[-1])
        return out
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=worker_context()) as pool:
        for result in pool.map(fn, *zip(*jobs)):
            out.append(result)
            if done:
                done(len(out) - 1, result)
    return out


def split_train_valid(n: int, rng: np.random.Generator, caps: SamplingCaps) -> list[str]:
    """The split of each of ``n`` silver items of one template (in draw order)."""
    chosen = set(rng.permutation(n)[:caps.n_valid(n)].tolist())
    return ["valid" if i in chosen else "train" for i in range(n)]


def _distribute(database: str, items: list[SampledItem], rng: np.random.Generator,
                caps: SamplingCaps) -> dict[str, list[SampledItem]]:
    """One template's kept items of ``database`` by split: silver to train / valid (7:1, draw order kept),
    gold to test."""
    if database == "gold":
        return {"test": [replace(item, split="test") for item in items]}
    out: dict[str, list[SampledItem]] = {"train": [], "valid": []}
    for split, item in zip(split_train_valid(len(items), rng, caps), items):
        out[split].append(replace(item, split=split))
    return out


def _unanswerable(files: DatabaseFiles, database: str, seed: int, n: int) -> list[SampledItem]:
    """Up to ``n`` unanswerable items drawn with this database's values, by template index then draw order."""
    conn = files.open()
    try:
        drawn = unanswerable_items(conn, seed, n)
    finally:
        conn.close()
    out, draws = [], {}
    for item in sorted(drawn, key=lambda x: x.template.index):  # stable: draw order within a template
        draws[item.template.index] = draws.get(item.template.index, -1) + 1
        out.append(SampledItem.of(item, "", database, draws[item.template.index]))
    return out



def _check_templates(templates: Sequence) -> list[int]:
    index = sorted(t.index for t in templates)
    if len(set(index)) != len(index):
        raise ValueError("templates: two templates share an index")
    unknown = [i for i in index if i not in BY_INDEX]
    if unknown:
        raise ValueError(f"templates {unknown[:5]} are not in the catalog (BY_INDEX)")
    return index


def sample_database(files: DatabaseFiles, database: str, seed: int, caps: SamplingCaps = SamplingCaps(),
                    templates: Sequence = CATALOG, workers: int = 1, progress=None, memo: Path | None = None) -> Sample:
    """The items of one database (``DATABASES``): silver gives train and valid, gold gives test. Every
    template and database draws from its own generators, so one database is sampled without the other and
    gives the items ``sample_ehrxqa`` gives for it. ``workers`` > 1 samples template chunks in that many
    processes; the result does not change. ``progress(message)`` is called as each chunk is done.
    ``memo``: a JSON file (EHRXQA_HOME/cache) that keeps each template's items and report with the tables its
    draws read (``reads``): drawn with the same code, seed and caps from tables of the same content
    (``memo.content_digests``), they are read from there (``memo.ResultMemo``); the result does not change. A
    label edit changes the answer sheet only: it re-draws the templates that read TB_CXR_PLUS; a lab name edit
    those that read the lab tables."""
    if database not in DATABASES:
        raise ValueError(f"database must be one of {DATABASES}, got {database!r}")
    index = _check_templates(templates)
    items: dict[int, list[SampledItem]] = {}
    reports: dict[int, TemplateReport] = {}
    drawn = ResultMemo(memo)
    now = content_digests(files.database, files.answer_sheet) if drawn.path else {}

    def inputs(i: int) -> str:
        return drawn.inputs(seed, asdict(caps), database, i)

    for i in index if drawn.path else ():
        hit = drawn.get(f"{database}/{i}", inputs(i))
        if isinstance(hit, dict) and all(now.get(table) == digest for table, digest in hit["reads"].items()):
            items[i] = [_from_memo(x) for x in hit["items"]]
            reports[i] = TemplateReport(**hit["report"])
    if reports and progress is not None:
        progress(f"{database}: {len(reports)} of {len(index)} templates' items read from the memo (the tables "
                 "their draws read are unchanged)")
    chunks = max(1, workers) * CHUNKS_PER_WORKER
    is_table = {i: table_scope(BY_INDEX[i].scope) for i in index}
    groups = [[i for i in index if is_table[i] and i not in reports],  # each chunk all table templates or none
              [i for i in index if not is_table[i] and i not in reports]]
    jobs = [(files, database, seed, caps, g[k::chunks]) for g in groups for k in range(chunks) if g[k::chunks]]

    def done(k: int, result) -> None:
        if progress is not None:
            progress(f"{database}: {len(jobs[k][4])} templates sampled, {sum(map(len, result[0].values()))} "
                     f"items (chunk {k + 1} of {len(jobs)})")

    for got, reps, reads in run_parallel(_sample_chunk, jobs, workers, done):
        items.update(got)
        reports.update({r.template_index: r for r in reps})
        for i, tables in reads.items():
            if drawn.path and all(t in now for t in tables):  # (a table it cannot key by: drawn again next time)
                drawn.put(f"{database}/{i}", inputs(i), {
                    "reads": {t: now[t] for t in [*tables, SCHEMA]},
                    "items": [_to_memo(x) for x in got[i]], "report": asdict(reports[i])}, save=False)
    drawn.keep_only(f"{database}/{i}" for i in index)
    drawn.save()
    per_split: dict[str, list[SampledItem]] = {s: [] for s in SIDE_SPLITS[database]}
    for i in index:
        for split, kept in _distribute(database, items[i], generator(seed, f"ehrxqa.split.{i}"), caps).items():
            per_split[split] += kept
    if caps.unanswerable:
        for split, kept in _distribute(database, _unanswerable(files, database, seed, caps.unanswerable),
                                       generator(seed, "ehrxqa.split.unanswerable"), caps).items():
            per_split[split] += kept
    return Sample([x for s in SIDE_SPLITS[database] for x in per_split[s]], [reports[i] for i in index])


# SampledItem fields that repeat a key of the item's record: kept once in the sampling memo, whose file (about 100 MB
# for the silver side at full scale) is read at every sampling and written at every change
_IN_RECORD = {"question": "template", "gold_sql": "_gold_program", "neural_sql": "query", "answer": "answer"}


def _to_memo(item: SampledItem) -> dict:
    """``item`` as the memo keeps it: its fields (a shallow copy: ``asdict`` copied every nested value, seconds
    at full scale), less those equal to their record's key (``same``: restored by ``_from_memo``)."""
    row = dict(vars(item))
    row["same"] = [f for f, key in _IN_RECORD.items() if key in item.record and item.record[key] == row[f]]
    for f in row["same"]:
        del row[f]
    return row


def _from_memo(kept: dict) -> SampledItem:
    row = dict(kept)  # (the memo's entry stays as read: it is written back when another template changes)
    for f in row.pop("same", ()):
        row[f] = row["record"][_IN_RECORD[f]]
    return SampledItem(**row)


def sample_ehrxqa(silver: DatabaseFiles, gold: DatabaseFiles, seed: int, caps: SamplingCaps = SamplingCaps(),
                  templates: Sequence = CATALOG, workers: int = 1, progress=None) -> Sample:
    """Train / valid items from the silver database, test items from the gold one (``sample_database`` of
    each, in release order)."""
    parts = [sample_database(files, database, seed, caps, templates, workers, progress)
             for database, files in (("silver", silver), ("gold", gold))]
    return Sample([x for p in parts for x in p.items], [r for p in parts for r in p.reports])
