"""The blocking consistency check: NeuralSQL executed with the oracle VQA module must give the gold
SQL's answer (compared as multisets unless the NeuralSQL has a root ORDER BY).

Both queries are executed here (the gold one on plain SQLite over TB_CXR_PLUS, the NeuralSQL with
``NeuralSqlExecutor`` and ``OracleModule``); the item's stored answer must also equal the gold result,
so a changed gold SQL, a stale answer or a NeuralSQL that asks the wrong image question all fail.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from ehrxqa_pipeline.questions.ehrxqa.filler import run_sql
from ehrxqa_pipeline.questions.ehrxqa.item import FilledItem
from ehrxqa_pipeline.questions.ehrxqa.unanswerable import NULL_QUERY
from ehrxqa_pipeline.questions.neuralsql import NeuralSqlError, NeuralSqlExecutor, OracleModule, same_answer
from ehrxqa_pipeline.questions.neuralsql.parse_store import ParseStore


@dataclass(frozen=True)
class Mismatch:
    index: int  # template index
    question: str
    gold: object  # gold SQL answer, or the error text
    neural: object  # NeuralSQL answer, or the error text
    stored: list  # the item's answer


def check_item(item: FilledItem, conn: sqlite3.Connection, executor: NeuralSqlExecutor,
               runs: dict[str, list] | None = None) -> Mismatch | None:
    """None when gold SQL, NeuralSQL (oracle) and the stored answer agree; else what differs. An unanswerable
    item has no SQL to run: it agrees when both queries are the ``null`` marker and its answer is empty.
    A NeuralSQL that is its gold SQL's own text and calls no FUNC_VQA (a table item's) is run once, by the
    executor, and its rows stand for both: running the same text again on the same database cannot differ.
    The stored answer, which sampling took from the gold SQL, is still compared with them. ``runs``: where the
    NeuralSQL's run is kept by query, as the scores keep a module's runs ([answer, ordered, None], or [None,
    False, the error])."""
    if getattr(item.template, "impossible", False):
        marked = item.gold_sql == item.neural_sql == NULL_QUERY and item.answer == []
        return None if marked else Mismatch(item.template.index, item.question, item.gold_sql, item.neural_sql,
                                            item.answer)
    try:
        result = executor.execute(item.neural_sql)
        neural, ordered = result.answer, result.ordered
        same_query = item.neural_sql == item.gold_sql and not executor.parse(item.neural_sql).has_vqa
        if runs is not None:
            runs[item.neural_sql] = [neural, ordered, None]
    except NeuralSqlError as e:
        neural, ordered, same_query = f"NeuralSQL error: {e}", False, False
        if runs is not None:
            runs[item.neural_sql] = [None, False, str(e)]
    if same_query:
        gold = neural
    else:
        try:
            gold = run_sql(conn, item.gold_sql)
        except sqlite3.Error as e:
            gold = f"gold SQL error: {e}"
    ok = (isinstance(gold, list) and isinstance(neural, list) and same_answer(gold, neural, ordered=ordered)
          and same_answer(gold, item.answer, ordered=ordered))
    return None if ok else Mismatch(item.template.index, item.question, gold, neural, item.answer)


def check_items(items: list[FilledItem], conn: sqlite3.Connection, oracle: OracleModule | None = None,
                parse_store: ParseStore | None = None, images: bool = True,
                runs: dict[str, list] | None = None) -> list[Mismatch]:
    """Mismatches of all items (empty = consistent). ``conn`` must see TB_CXR, TB_CXR_PLUS and PATIENTS.
    ``parse_store``: where the NeuralSQL parses are kept between processes and builds (same results).
    Without ``images`` (table items, on a database without its answer sheet) no VQA module is made: a
    NeuralSQL that calls FUNC_VQA is a mismatch. ``runs``: see ``check_item``."""
    oracle = (oracle or OracleModule(conn)) if images else None
    executor = NeuralSqlExecutor(conn, oracle, parse_store=parse_store)
    executor.prefetch(i.neural_sql for i in items if not getattr(i.template, "impossible", False))
    return [m for m in (check_item(i, conn, executor, runs) for i in items) if m is not None]


def assert_consistent(items: list[FilledItem], conn: sqlite3.Connection, oracle: OracleModule | None = None) -> None:
    """Raise AssertionError listing the first mismatches (the pipeline's blocking check)."""
    bad = check_items(items, conn, oracle)
    if bad:
        lines = "\n".join(f"  {m.index}: {m.question!r}: gold={m.gold!r} neural={m.neural!r} stored={m.stored!r}"
                          for m in bad[:10])
        raise AssertionError(f"{len(bad)} of {len(items)} image items disagree between gold SQL and NeuralSQL:\n"
                             f"{lines}")
