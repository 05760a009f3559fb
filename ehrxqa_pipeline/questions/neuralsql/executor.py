"""NeuralSQL executor: SQLite runs every query shape natively; FUNC_VQA answers come in batches.

Algorithm (``NeuralSqlExecutor.execute``):
1. parse and validate the query against the database's tables and functions (``parser.parse_neuralsql``);
2. run it on SQLite with two user functions, ``func_vqa`` (scalar: 1 / 0 / NULL) and ``func_vqa_rows``
   (JSON array for bare select items, exploded by ``json_each``), both backed by an answer cache; a call
   whose (question, study_id) is not cached records a *miss* and returns NULL (``[null]`` for rows);
3. if the pass had misses, answer all of them through the VQA module -- grouped by question, at most
   ``batch_size`` (image, question) pairs per call -- store the answers and run the query again;
4. stop at the first pass without a miss: its rows are the result. Every FUNC_VQA evaluation of that pass
   read a module answer, so the result is exactly what SQLite computes with the module's answers in place
   of FUNC_VQA. More than ``max_passes`` passes is an error.

Guarantees: SQLite's own semantics for joins, set operations, IN / scalar subqueries, AND/OR/NOT, ``= true``
/ ``= false`` (answers are 1/0), aggregates and NULLs (an abstaining module gives NULL, never an
exception). The module is asked only about (question, study) pairs that SQLite evaluated FUNC_VQA on, each
at most once per executor when ``reuse_answers`` (else once per query). The parser puts FUNC_VQA operands
of AND / OR chains last, and in WHERE / ON / HAVING SQLite treats a pending (NULL) operand as not true, so a
filter's later FUNC_VQA operand is asked only for rows whose earlier operands hold; in the select list
``NULL AND x`` needs x, so both operands are asked in the same pass (possibly more than the final pass
needs). Study ids absent from TB_CXR and NULL ids give NULL without a module call. Passes: one per level of
FUNC_VQA calls whose rows depend on other answers, plus one; ``max_passes`` bounds them.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ehrxqa_pipeline.questions.neuralsql.errors import NeuralSqlError, NeuralSqlExecutionError
from ehrxqa_pipeline.questions.neuralsql.parse_store import ParseStore, from_json, options_digest, to_json
from ehrxqa_pipeline.questions.neuralsql.parser import (ROWS_FUNCTION, VQA_FUNCTION, ParsedQuery,
                                                        parse_neuralsql)
from ehrxqa_pipeline.questions.neuralsql.vqa_modules import (Answer, ImageRef, VqaModule, as_int, ask, reads_pixels,
                                                             resolve_images)

ANSWER_SHEET = "tb_cxr_plus"
# (image, question) pairs per module call, for a module that states no batch size of its own
DEFAULT_BATCH_SIZE = 32


@dataclass
class ExecutionResult:
    """Rows of one query plus how they were obtained."""

    columns: list[str]
    rows: list[tuple]
    ordered: bool  # the query has a root ORDER BY: compare answers in order
    passes: int = 1
    module_calls: int = 0  # VQA module calls made for this query
    asked: int = 0  # (image, question) pairs sent to the module for this query
    unknown_studies: list[int] = field(default_factory=list)  # FUNC_VQA study ids not in TB_CXR

    @property
    def answer(self) -> list:
        return normalise_rows(self.rows)


def _norm_value(v):
    return round(v, 6) if isinstance(v, float) else v


def normalise_rows(rows: list[tuple] | list) -> list:
    """EHRXQA answer form (reference-builders.md 6.6): single-column rows flattened, floats rounded to 6 dp;
    multi-column rows stay tuples. Row order is kept (compare with ``same_answer``)."""
    out = []
    for r in rows:
        if isinstance(r, (tuple, list)):
            r = _norm_value(r[0]) if len(r) == 1 else tuple(_norm_value(v) for v in r)
        else:
            r = _norm_value(r)
        out.append(r)
    return out


def _key(v):
    """A hashable, type-stable key: 1 == 1.0 == True as in SQL; None and strings distinct from numbers."""
    if isinstance(v, tuple):
        return tuple(_key(x) for x in v)
    if isinstance(v, (bool, int, float)):
        return ("n", float(v))
    return ("s" if isinstance(v, str) else type(v).__name__, v)


def same_answer(a: list, b: list, *, ordered: bool = False) -> bool:
    """Equal normalised answers: as multisets (duplicates count, order does not) unless ``ordered``
    (the query has a root ORDER BY), which fixes the published order-sensitive comparison (defect 24)."""
    ka, kb = [_key(x) for x in normalise_rows(a)], [_key(x) for x in normalise_rows(b)]
    return ka == kb if ordered else Counter(ka) == Counter(kb)


class NeuralSqlExecutor:
    """Runs NeuralSQL on an EHRXQA SQLite database (``mimic_iv_cxr.db``) with a VQA module.

    ``database``: a path (opened read-only) or an open connection (the two FUNC_VQA functions are
    registered on it). ``images_root``: MIMIC-CXR-JPG ``files`` folder for ImageRef paths (None: no paths; a
    module that reads no pixels, ``vqa_modules.reads_pixels``, gets none either and no file is looked for).
    ``allow_answer_sheet``: let queries read TB_CXR_PLUS (gold SQL); NeuralSQL must not.
    ``parse_store``: parses kept on disk across processes and builds (``parse_store.ParseStore``), read and
    written by ``parse_many`` (and so by ``prefetch``). ``batch_size``: pairs per module call; None: the
    module's own ``batch_size`` attribute where it has one (the label modules: ``oracle.LabelModule``), else
    ``DEFAULT_BATCH_SIZE``.
    """

    def __init__(self, database: str | Path | sqlite3.Connection, vqa: VqaModule | None = None, *,
                 images_root: str | Path | None = None, batch_size: int | None = None, max_passes: int = 16,
                 reuse_answers: bool = True, allow_answer_sheet: bool = False,
                 parse_store: ParseStore | None = None):
        batch_size = batch_size or getattr(vqa, "batch_size", None) or DEFAULT_BATCH_SIZE
        if batch_size < 1 or max_passes < 1:
            raise ValueError("batch_size and max_passes must be >= 1")
        if isinstance(database, sqlite3.Connection):
            self.conn = database
        else:
            if not Path(database).is_file():
                raise FileNotFoundError(f"EHRXQA database not found: {database}")
            self.conn = sqlite3.connect(f"{Path(database).resolve().as_uri()}?mode=ro", uri=True)
        self.vqa, self.images_root = vqa, images_root if reads_pixels(vqa) else None
        self.batch_size, self.max_passes, self.reuse_answers = batch_size, max_passes, reuse_answers
        self.hidden_tables = frozenset(() if allow_answer_sheet else (ANSWER_SHEET,))
        self.answers: dict[tuple[str, int], Answer] = {}  # (question, study_id) -> answer
        self._images: dict[int, ImageRef | None] = {}
        self._misses: dict[tuple[str, int], None] = {}
        self._udf_error: NeuralSqlError | None = None
        self._parsed: dict[str, ParsedQuery] = {}  # query text -> its parse (valid queries only)
        self.parse_store = parse_store
        # Not declared deterministic: SQLite would then evaluate FUNC_VQA while building automatic partial
        # indexes, i.e. for every row of a joined table before the join condition prunes it.
        self.conn.create_function(VQA_FUNCTION, 2, self._scalar)
        self.conn.create_function(ROWS_FUNCTION, 2, self._rows)
        # frozensets, as ``hidden_tables``: the parser lowers an executor's names once (``parser._names``), not
        # on every query
        self.tables = frozenset(r[0].lower() for r in self.conn.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"))
        try:
            self.functions: frozenset[str] | None = frozenset(
                r[0].lower() for r in self.conn.execute("SELECT name FROM pragma_function_list"))
        except sqlite3.Error:  # SQLite built without introspection pragmas: SQLite itself reports unknown names
            self.functions = None

    def close(self) -> None:
        self.conn.close()

    # -- FUNC_VQA as SQLite functions -------------------------------------------------------------------
    def _lookup(self, question: str, study) -> Answer:
        """The cached answer; a miss is recorded for the next batch and reads as NULL in this pass."""
        sid = as_int(study)
        if sid is None:
            return None
        key = (question, sid)
        if key in self.answers:
            return self.answers[key]
        self._misses[key] = None
        return None

    def _scalar(self, question, study):
        ans = self._lookup(question, study)
        if isinstance(ans, list):
            self._udf_error = NeuralSqlExecutionError(
                f"FUNC_VQA({question!r}, {study}) has a list answer {ans!r} but is used as a value; list "
                "answers are allowed only where FUNC_VQA is a whole select item")
            raise ValueError("list answer in a scalar context")
        return None if ans is None else int(ans)

    def _rows(self, question, study):
        ans = self._lookup(question, study)
        if isinstance(ans, list):
            return json.dumps(ans)
        return json.dumps([None if ans is None else int(ans)])

    # -- execution -----------------------------------------------------------------------------------
    def parse(self, query: str) -> ParsedQuery:
        parsed = self._parsed.get(query)  # the scores run each query once per module on one executor
        if parsed is None:
            parsed = self._parsed[query] = parse_neuralsql(query, tables=self.tables, functions=self.functions,
                                                           hidden_tables=self.hidden_tables)
        return parsed

    def parse_many(self, queries: Iterable[str]) -> None:
        """Parse ``queries`` now: those the parse store holds are read from it in one lookup, the others parsed
        and added to it. A query that does not parse is left to ``execute`` (which raises its error)."""
        todo = list(dict.fromkeys(q for q in queries if q not in self._parsed))
        if self.parse_store is None or not todo:
            return
        options = options_digest(self.tables, self.functions, self.hidden_tables, postprocess=True)
        for query, text in self.parse_store.get("parse", options, todo).items():
            try:
                self._parsed[query] = from_json(text)
            except (ValueError, TypeError):  # a damaged entry: parsed again below
                continue
        new = {}
        for query in todo:
            if query not in self._parsed:
                try:
                    new[query] = self.parse(query)
                except NeuralSqlError:
                    continue
        self.parse_store.put("parse", options, {q: to_json(p) for q, p in new.items()})

    def _run(self, sql: str) -> tuple[list[str], list[tuple]]:
        self._misses, self._udf_error = {}, None
        try:
            cur = self.conn.execute(sql)
            rows = cur.fetchall()
        except sqlite3.Error as e:
            if self._udf_error is not None:
                raise self._udf_error from None
            raise NeuralSqlExecutionError(f"SQLite error: {e}") from None
        return [d[0] for d in cur.description or ()], rows

    def _answer_misses(self, result: ExecutionResult) -> None:
        misses = sorted(self._misses)  # grouped by question, then study
        new = [s for _, s in misses if s not in self._images]
        if new:
            found = resolve_images(self.conn, new, self.images_root)
            self._images.update({s: found.get(s) for s in new})
        todo = []
        for key in misses:
            if self._images[key[1]] is None:
                self.answers[key] = None
                if key[1] not in result.unknown_studies:
                    result.unknown_studies.append(key[1])
            else:
                todo.append(key)
        if todo and self.vqa is None:
            raise NeuralSqlExecutionError("the query calls FUNC_VQA but the executor has no VQA module")
        for i in range(0, len(todo), self.batch_size):
            batch = todo[i:i + self.batch_size]
            got = ask(self.vqa, [self._images[s] for _, s in batch], [q for q, _ in batch])
            self.answers.update(zip(batch, got))
            result.module_calls += 1
            result.asked += len(batch)

    def execute(self, query: str | ParsedQuery) -> ExecutionResult:
        """Rows of one query (see the module docstring for the algorithm and its guarantees)."""
        parsed = query if isinstance(query, ParsedQuery) else self.parse(query)
        if not self.reuse_answers:
            self.answers = {}
        result = ExecutionResult([], [], parsed.ordered, passes=0)
        while True:
            result.passes += 1
            result.columns, result.rows = self._run(parsed.sql)
            if not self._misses:
                return result
            if result.passes >= self.max_passes:
                raise NeuralSqlExecutionError(
                    f"FUNC_VQA answers did not reach a fixpoint in {self.max_passes} passes "
                    f"({len(self._misses)} unanswered calls left); raise max_passes for deeper nesting")
            self._answer_misses(result)

    def first_pass(self, queries: Iterable[str | ParsedQuery]) -> dict[tuple[str, int], None]:
        """The (question, study) pairs that the first pass of each of ``queries`` reaches with the answers known
        now, in the order reached; no module is asked. On an executor that knows no answer yet they do not
        depend on the module (an executor without one will do), so the ``prefetch`` of several modules on one
        database can share them. A query that fails to parse or run, or calls no FUNC_VQA, reaches none."""
        reached: dict[tuple[str, int], None] = {}
        for query in queries:
            try:
                parsed = query if isinstance(query, ParsedQuery) else self.parse(query)
                if not parsed.has_vqa:
                    continue  # no FUNC_VQA call: its pass reaches no pair (a table item's query, run once in execute)
                self._run(parsed.sql)
            except NeuralSqlError:
                continue
            reached.update(self._misses)
        self._misses = {}
        return reached

    def prefetch(self, queries: Iterable[str | ParsedQuery],
                 first_pass: dict[tuple[str, int], None] | None = None) -> int:
        """Ask the module, in full batches, about every (question, study) pair that the first pass of each of
        ``queries`` reaches with the answers known now; returns the pairs asked. ``execute`` then finds those
        answers cached, so its results do not change (an answer is a function of its pair; the final pass of a
        query reads module answers only): this only saves module calls, one per query and level otherwise, which
        is what the label modules (the oracle) cost, not the pairs. The first passes may reach pairs that
        ``execute`` alone would not ask (a later AND operand, asked here before the earlier one is known).
        The queries are parsed first, all at once (``parse_many``), also without a module.
        ``first_pass``: those pairs, from ``first_pass(queries)`` on an executor of the same database that knew
        no answer (its passes are not run again here).
        Without ``reuse_answers`` it does nothing. A query that fails to parse or run, and the pairs of a module
        call that fails, are left to ``execute``."""
        queries = list(queries)
        self.parse_many(q for q in queries if not isinstance(q, ParsedQuery))
        if not self.reuse_answers or self.vqa is None:
            return 0
        reached = self.first_pass(queries) if first_pass is None else first_pass
        self._misses = {k: None for k in reached if k not in self.answers}
        batch = ExecutionResult([], [], False, passes=0)
        try:
            self._answer_misses(batch)
        except NeuralSqlError:
            pass  # a module that breaks its contract: each query that reaches it fails in ``execute``, named
        finally:
            self._misses = {}
        return batch.asked

    def answer(self, query: str | ParsedQuery) -> list:
        """The normalised answer of one query (``normalise_rows`` of its rows)."""
        return self.execute(query).answer
