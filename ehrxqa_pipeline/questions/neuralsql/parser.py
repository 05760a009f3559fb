"""NeuralSQL parser: post-process, parse (sqlglot, SQLite dialect), validate, rewrite for execution.

NeuralSQL = SQLite SQL plus ``FUNC_VQA(question, study_id)``, which asks a VQA module a question about
the image of a study (EHRXQA paper, section 4.1.3 / appendix C.3; reference-builders.md 6.4).

Validation (each failure is a NeuralSqlError naming the problem and its line/column):
- exactly one statement whose root is SELECT, UNION, INTERSECT or EXCEPT (no DELETE/UPDATE/PRAGMA ...);
- ``FUNC_VQA`` (any case) has exactly two arguments: a non-empty string literal question (single quotes,
  or double quotes as EHRXQA writes it) and an expression yielding the study id (not a string, NULL or
  ``*``), and no FUNC_VQA nested in its arguments;
- when the caller passes the database's names: every other function is a SQLite function and every
  table is a database table or a CTE; ``hidden_tables`` (the answer sheet TB_CXR_PLUS) are refused.

Rewrites (the executable SQL is sqlglot's SQLite rendering of the rewritten tree):
- the question becomes a single-quoted literal and the function name ``func_vqa``;
- a select item that is a bare ``FUNC_VQA(...)`` (optionally aliased) becomes ``_vqaN.value`` with
  ``CROSS JOIN json_each(func_vqa_rows(...)) AS _vqaN`` appended to that SELECT: a list answer yields one
  row per element (none for an empty list), a yes/no answer one row 1/0, an abstention one NULL row.
  This is the only place list answers are allowed; elsewhere FUNC_VQA is a scalar (1/0/NULL);
- in every AND / OR chain the FUNC_VQA operands move last (``_vqa_last``), and a SELECT with only inner
  joins gets its ON conditions in WHERE when FUNC_VQA is among them, so plain filters run first;
- a parenthesised arm of a set operation (which SQLite rejects) is unwrapped, or wrapped as
  ``SELECT * FROM (...)`` when it has its own ORDER BY / LIMIT.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from ehrxqa_pipeline.questions.neuralsql.errors import NeuralSqlSyntaxError, NeuralSqlValidationError

CURRENT_TIME = "2105-12-31 23:59:00"  # reference-builders.md 5.1 / 6.6: "now" of the EHRXQA database
VQA_FUNCTION = "func_vqa"
ROWS_FUNCTION = "func_vqa_rows"  # the list-exploding variant the executor registers
TABLE_FUNCTIONS = frozenset({"json_each", "json_tree"})
ROOT_KINDS = (exp.Select, exp.Union, exp.Intersect, exp.Except)
_CURRENT_TIME = re.compile(r"\bcurrent_time\b", re.IGNORECASE)
_SPACED_OPS = re.compile(r"([<>!])\s+=")
_TOKEN = re.compile(r"<Token token_type: [\w.]+, text: (.*?), line: .*?>")
_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})


def postprocess_query(sql: str, current_time: str = CURRENT_TIME) -> str:
    """reference-builders.md 6.6, for lower-cased stored queries: curly -> straight quotes; ``< =`` (and
    ``> =``, ``! =``) -> ``<=``; the ``current_time`` placeholder -> ``'2105-12-31 23:59:00'``; ``%y`` ->
    ``%Y`` and ``%j`` -> ``%J`` (strftime codes whose case the lower-casing destroyed).

    The published ``''`` -> ``'`` step is not applied: ``''`` is SQL's escaped quote, so the replacement
    breaks valid literals (``'alzheimer''s'``) and fixes nothing a correct query needs.
    """
    text = sql.translate(_QUOTES)
    text = _SPACED_OPS.sub(r"\1=", text)
    text = _CURRENT_TIME.sub(f"'{current_time}'", text)
    return text.replace("%y", "%Y").replace("%j", "%J")


@dataclass(frozen=True)
class VqaCall:
    """One FUNC_VQA call of a query."""

    question: str
    study: str  # SQL of the study-id argument
    projected: bool  # a bare select item: list answers allowed (exploded into rows)
    line: int | None
    col: int | None


@dataclass(frozen=True)
class ParsedQuery:
    """A validated query: the post-processed source, its executable SQLite text and its FUNC_VQA calls."""

    source: str
    sql: str
    calls: tuple[VqaCall, ...]
    ordered: bool  # the root query has ORDER BY: its row order is part of the answer

    @property
    def has_vqa(self) -> bool:
        return bool(self.calls)


def _pos(node: exp.Expression, text: str) -> dict:
    """1-based line/column where a node's name starts (sqlglot keeps offsets on names and identifiers)."""
    for n in (node, *node.find_all(exp.Identifier)):
        if "start" in n.meta:
            start = n.meta["start"]
            return {"line": text.count("\n", 0, start) + 1, "col": start - text.rfind("\n", 0, start)}
    return {}


def _is_vqa(node: exp.Expression) -> bool:
    return isinstance(node, exp.Anonymous) and str(node.this).lower() == VQA_FUNCTION


def _question_literal(arg: exp.Expression) -> str | None:
    if isinstance(arg, exp.Literal) and arg.is_string:
        return arg.this
    # SQLite reads "text" that names no column as a string; EHRXQA writes FUNC_VQA("question", ...)
    if isinstance(arg, exp.Column) and not arg.table and arg.this.quoted:
        return arg.this.this
    return None


def _check_vqa(node: exp.Anonymous, text: str) -> tuple[str, exp.Expression]:
    args = node.expressions
    if len(args) != 2:
        raise NeuralSqlValidationError(
            f"FUNC_VQA takes 2 arguments (question, study_id); got {len(args)}: {node.sql(dialect='sqlite')}",
            **_pos(node, text))
    question, study = args
    for arg in args:
        if any(_is_vqa(n) for n in arg.walk()):
            raise NeuralSqlValidationError("FUNC_VQA cannot be nested inside FUNC_VQA arguments", **_pos(node, text))
    q = _question_literal(question)
    if q is None:
        raise NeuralSqlValidationError(
            f"FUNC_VQA's first argument must be a string literal question; got {question.sql(dialect='sqlite')}",
            **_pos(node, text))
    if not q.strip():
        raise NeuralSqlValidationError("FUNC_VQA's question is empty", **_pos(node, text))
    if (isinstance(study, (exp.Star, exp.Null)) or (isinstance(study, exp.Literal) and study.is_string)
            or _question_literal(study) is not None):
        raise NeuralSqlValidationError(
            f"FUNC_VQA's second argument must yield a study_id; got {study.sql(dialect='sqlite')}", **_pos(node, text))
    return q, study


def _parse_one(text: str) -> exp.Expression:
    try:
        statements = [s for s in sqlglot.parse(text, read="sqlite") if s is not None]
    except ParseError as e:
        first = e.errors[0] if e.errors else {}
        description = _TOKEN.sub(r"'\1'", str(first.get("description", e)))
        raise NeuralSqlSyntaxError(f"syntax error: {description}",
                                   line=first.get("line"), col=first.get("col")) from None
    except TokenError as e:
        raise NeuralSqlSyntaxError(f"syntax error: {e}") from None
    if len(statements) != 1:
        raise NeuralSqlValidationError(f"expected exactly one SQL statement; got {len(statements)}")
    root = statements[0]
    while isinstance(root, exp.Subquery) and not root.alias and isinstance(root.this, ROOT_KINDS):
        root = root.this
    if not isinstance(root, ROOT_KINDS):
        raise NeuralSqlValidationError(
            f"only SELECT / UNION / INTERSECT / EXCEPT queries can run; got a {root.key.upper()} statement")
    return root


def _check_names(root: exp.Expression, text: str, tables: Collection[str] | None,
                 functions: Collection[str] | None, hidden_tables: Collection[str]) -> None:
    ctes = {c.alias_or_name.lower() for c in root.find_all(exp.CTE)}
    for node in root.find_all(exp.Anonymous):
        name = str(node.this).lower()
        if name == VQA_FUNCTION or (isinstance(node.parent, exp.Table) and name in TABLE_FUNCTIONS):
            continue
        if functions is not None and name not in functions:
            raise NeuralSqlValidationError(f"unknown function {name.upper()}", **_pos(node, text))
    for table in root.find_all(exp.Table):
        if not isinstance(table.this, exp.Identifier):
            continue  # table-valued function, checked above
        name = table.name.lower()
        if name in ctes:
            continue
        if name in hidden_tables:
            raise NeuralSqlValidationError(
                f"table {name} is the hidden answer sheet; NeuralSQL reads images only through FUNC_VQA",
                **_pos(table, text))
        if tables is not None and name not in tables:
            raise NeuralSqlValidationError(f"unknown table {name}", **_pos(table, text))


def _explode_select_items(root: exp.Expression) -> set[int]:
    """Rewrite bare FUNC_VQA select items into json_each rows; returns ids of the rewritten calls."""
    projected: set[int] = set()
    for n, select in enumerate(list(root.find_all(exp.Select))):
        items = select.expressions
        for i, item in enumerate(items):
            call = item.this if isinstance(item, exp.Alias) else item
            if not _is_vqa(call):
                continue
            projected.add(id(call))
            name = f"_vqa{n}_{i}"
            rows = exp.Anonymous(this=ROWS_FUNCTION, expressions=[a.copy() for a in call.expressions])
            source = exp.Table(this=exp.Anonymous(this="json_each", expressions=[rows]),
                               alias=exp.TableAlias(this=exp.to_identifier(name)))
            value = exp.column("value", table=name)
            items[i] = exp.alias_(value, item.alias) if isinstance(item, exp.Alias) else value
            if select.args.get("from_") is None:
                select.set("from_", exp.From(this=source))
            else:
                select.append("joins", exp.Join(this=source, kind="CROSS"))  # CROSS: keep it innermost
        select.set("expressions", items)
    return projected


def _has_vqa(node: exp.Expression) -> bool:
    return any(_is_vqa(x) for x in node.walk())


def _inner_join_conditions_to_where(root: exp.Expression) -> None:
    """For a SELECT whose joins are all inner, move ON conditions into WHERE when any condition asks
    FUNC_VQA (equivalent for inner joins); SQLite checks WHERE terms before ON terms, so otherwise a FUNC_VQA
    filter in WHERE would run before a time-window ON condition prunes the pair."""
    for select in root.find_all(exp.Select):
        joins = select.args.get("joins") or []
        if not joins or any(j.args.get("side") or j.args.get("method") or j.args.get("using")
                            or (j.args.get("kind") or "INNER").upper() not in ("INNER", "CROSS") for j in joins):
            continue
        conds = [j.args["on"] for j in joins if j.args.get("on") is not None]
        where = select.args.get("where")
        if where is not None:
            conds.insert(0, where.this)
        if not conds or not any(_has_vqa(c) for c in conds):
            continue
        for j in joins:
            j.set("on", None)
        parts = [p for c in conds for p in (c.flatten() if isinstance(c, exp.And) else [c])]
        select.set("where", exp.Where(this=exp.and_(*parts, copy=False)))


def _vqa_last(root: exp.Expression) -> None:
    """Move FUNC_VQA operands of every AND / OR chain after the others (stable). Both are commutative in
    SQL's three-valued logic, and SQLite evaluates a chain left to right with short-circuit, so plain filters
    prune rows (and true disjuncts settle rows) before any image question is asked."""
    heads = [n for n in root.walk(bfs=False) if isinstance(n, (exp.And, exp.Or)) and type(n.parent) is not type(n)]
    for head in reversed(heads):  # innermost chains first
        ops = list(head.flatten())
        has_vqa = [_has_vqa(op) for op in ops]
        if has_vqa != sorted(has_vqa):
            ordered = [op for op, v in zip(ops, has_vqa) if not v] + [op for op, v in zip(ops, has_vqa) if v]
            build = exp.and_ if isinstance(head, exp.And) else exp.or_
            head.replace(build(*ordered, copy=False))


def _unwrap_set_arms(root: exp.Expression) -> None:
    for setop in list(root.find_all(exp.SetOperation)):
        for key in ("this", "expression"):
            arm = setop.args.get(key)
            if isinstance(arm, exp.Subquery) and isinstance(arm.this, exp.Query):
                inner = arm.this
                if inner.args.get("order") or inner.args.get("limit") or inner.args.get("offset"):
                    setop.set(key, exp.select("*").from_(arm.copy().as_("_arm")))
                else:
                    setop.set(key, inner)


def parse_neuralsql(sql: str, *, tables: Collection[str] | None = None, functions: Collection[str] | None = None,
                    hidden_tables: Collection[str] = ("tb_cxr_plus",), postprocess: bool = True) -> ParsedQuery:
    """Parse and validate one NeuralSQL (or plain SQL) query; see the module docstring.

    ``tables`` / ``functions``: names known to the database (None skips that check).

    The result depends on these arguments only, so it is kept per process (``_parse``): the scores run each
    test item's query once per VQA module, and a rebuild checks the items it checked before. A query that
    fails raises again on every call (exceptions are not kept).
    """
    return _parse(sql, _names(tables), _names(functions), _names(hidden_tables), postprocess)


def _names(values: Collection[str] | None) -> frozenset[str] | None:
    if values is None:
        return None
    if isinstance(values, frozenset):  # an executor's: lowered once, not on each of its queries' calls
        return _lowered(values)
    return frozenset(v.lower() for v in values)


@functools.lru_cache(maxsize=64)
def _lowered(values: frozenset[str]) -> frozenset[str]:
    return frozenset(v.lower() for v in values)


@functools.lru_cache(maxsize=1 << 16)  # ParsedQuery holds two query texts: tens of MB at most
def _parse(sql: str, tables: frozenset[str] | None, functions: frozenset[str] | None, hidden_tables: frozenset[str],
           postprocess: bool) -> ParsedQuery:
    source = postprocess_query(sql) if postprocess else sql
    skeleton = _Skeleton.of(source)
    if skeleton is not None:
        try:
            shape = _parse_shape(skeleton.text, tables, functions, hidden_tables)
        except (NeuralSqlSyntaxError, NeuralSqlValidationError):
            shape = None  # the query's own parse below names its error, with its own positions
        filled = shape and skeleton.fill(shape, source)
        if filled:
            return filled
    return _parse_source(source, tables, functions, hidden_tables)


def _parse_source(source: str, tables: frozenset[str] | None, functions: frozenset[str] | None,
                  hidden_tables: frozenset[str]) -> ParsedQuery:
    root = _parse_one(source)
    _check_names(root, source, tables, functions, hidden_tables)
    found = []
    for node in list(root.find_all(exp.Anonymous)):
        if _is_vqa(node):
            question, study = _check_vqa(node, source)
            node.set("this", VQA_FUNCTION)
            node.set("expressions", [exp.Literal.string(question), study])
            found.append((node, question, study.sql(dialect="sqlite"), _pos(node, source)))
    projected = _explode_select_items(root)
    _inner_join_conditions_to_where(root)
    _vqa_last(root)
    _unwrap_set_arms(root)
    calls = tuple(VqaCall(q, s, id(n) in projected, p.get("line"), p.get("col")) for n, q, s, p in found)
    ordered = bool(root.args.get("order"))
    # copy=False: sqlglot otherwise deep-copies the tree before generating (a third of a parse); root is not used after
    return ParsedQuery(source, root.sql(dialect="sqlite", copy=False), calls, ordered)


# The items of one template differ in their values only (a patient, a drug, a date, a question's object): their
# queries share one shape, parsed once per process (sqlglot takes about 1 ms a query, most of a fresh build's
# consistency check).
_parse_shape = functools.lru_cache(maxsize=1 << 14)(_parse_source)

# The values ``_Skeleton`` stands in for: every string and number, and the question of a FUNC_VQA call
# (double-quoted, as EHRXQA writes it), each on one line; not STRFTIME's format, whose codes sqlglot reads,
# nor the numbers 0 and 1 (``count(*) > 0``, ``limit 1``: the published shapes read them, shapes.py).
# The lookahead first: most positions start none of them, and fail there at once (a quarter of the scan's time).
_VALUE = re.compile(r"""(?=[sf'\d])(?:(?P<keep>\bstrftime\s*\(\s*'(?:[^'\n]|'')*')"""
                    r"""|(?P<vqa>\bfunc_vqa\s*\(\s*)(?P<q>"(?:[^"\n]|"")*")"""
                    r"""|(?P<str>'(?:[^'\n]|'')*')|(?<![\w.])(?P<num>\d+(?:\.\d+)?)(?![\w.]))""", re.IGNORECASE)
_MARK = "\u2045"  # a character no query has (checked): stand-ins are '⁅n' strings, "⁅qn" questions
_NUMBER = 8_888_888_000_000  # stand-in numbers count up from here (a query holding its digits is parsed whole)
_STAND_IN = re.compile(rf"'{_MARK}(q?\d+)'|{_MARK}(q?\d+)|\b{str(_NUMBER)[:7]}\d{{6}}\b")


def value_free(query: str) -> str | None:
    """``query`` with its values (strings, numbers, FUNC_VQA questions) stood in for: the text that the items of
    one template share (None when it has no value, or a stand-in's characters are already in it)."""
    skeleton = _Skeleton.of(query)
    return None if skeleton is None else skeleton.text


def stand_ins(query: str) -> tuple[str, Callable[[str], str]]:
    """``query`` with its values stood in for (``value_free``'s text), and the function that puts them back into
    SQL that sqlglot generated from that text, which is then what it generates from ``query``; ``query`` itself
    and no change when it has no stand-in. For work on a query's parse that the items of one template share
    (``questions.ehrxqa.resolved``)."""
    skeleton = _Skeleton.of(query)
    return (query, str) if skeleton is None else (skeleton.text, skeleton._put_back)


# Characters that SQLite's string literal holds as they are (sqlglot escapes none of them): a value made of them
# only is rendered as itself in quotes, without sqlglot's generator (a tenth of a fresh consistency check).
_PLAIN_STRING = re.compile(r"[^'\\\x00-\x1f\x7f]*")


def _string_literal(value: str) -> str:
    """``value`` as sqlglot renders ``exp.Literal.string(value)`` in SQLite (tests/neuralsql/test_parser.py)."""
    if _PLAIN_STRING.fullmatch(value):
        return f"'{value}'"
    return exp.Literal.string(value).sql(dialect="sqlite")


@dataclass(frozen=True)
class _Skeleton:
    """A query with its values replaced by stand-ins: its parse, with the values put back (``fill``), is the
    query's parse. The values change no part of the parse but their own text: sqlglot renders a string as
    ``exp.Literal.string`` of its value and keeps a number's digits. A query where that might not hold (no
    value, or a stand-in's characters already in it) gets no skeleton, and a skeleton that does not parse, or
    a value that would fail validation (an empty question), falls back to the query's own parse, whose error
    names the query's own line and column. tests/neuralsql/test_parser.py and an end-to-end test compare both
    parses of every item."""

    text: str
    values: dict[str, str]  # stand-in key -> the string's or question's value, or a number's digits
    shifts: tuple[tuple[int, int], ...]  # (offset in text after a stand-in, length change of the query up to it)

    @classmethod
    def of(cls, source: str) -> _Skeleton | None:
        if _MARK in source or str(_NUMBER)[:7] in source:
            return None
        values: dict[str, str] = {}
        shifts: list[tuple[int, int]] = []
        parts: list[str] = []
        at = grown = 0  # position in source; length of the skeleton minus that of the source so far
        for m in _VALUE.finditer(source):
            if m["keep"] is not None or m["num"] in ("0", "1"):
                continue
            kind = "q" if m["q"] is not None else "str" if m["str"] is not None else "num"
            raw, start = m[kind], m.start(kind)
            if kind == "num":
                key = stand_in = str(_NUMBER + len(values))
                values[key] = raw
            else:
                key = f"{'q' if kind == 'q' else ''}{len(values)}"
                quote = raw[0]
                values[key] = raw[1:-1].replace(quote * 2, quote)
                stand_in = f"{quote}{_MARK}{key}{quote}"
            parts += [source[at:start], stand_in]
            at = start + len(raw)
            grown += len(stand_in) - len(raw)
            shifts.append((at + grown, grown))
        if not values:
            return None
        return cls("".join(parts) + source[at:], values, tuple(shifts))

    def _put_back(self, text: str) -> str:
        def value(m: re.Match) -> str:
            if m[1] is not None:  # a quoted string (a question becomes one): as sqlglot renders its value
                return _string_literal(self.values[m[1]])
            return self.values[m[2] or m[0]]  # a call's question itself, or a number's digits
        return _STAND_IN.sub(value, text)

    def _where(self, line: int | None, col: int | None, source: str) -> tuple[int | None, int | None]:
        """A line and column of the skeleton's text, in ``source``."""
        if line is None or col is None:
            return line, col
        lines = self.text.split("\n")
        offset = sum(len(x) + 1 for x in lines[:line - 1]) + col - 1
        start = offset - next((g for end, g in reversed(self.shifts) if end <= offset), 0)
        return source.count("\n", 0, start) + 1, start - source.rfind("\n", 0, start)

    def fill(self, shape: ParsedQuery, source: str) -> ParsedQuery | None:
        """The query's parse from its skeleton's ``shape``; None when a value fails validation (an empty
        question), which the query's own parse then reports."""
        calls = tuple(VqaCall(self._put_back(c.question), self._put_back(c.study), c.projected,
                              *self._where(c.line, c.col, source)) for c in shape.calls)
        if any(not c.question.strip() for c in calls):
            return None
        return ParsedQuery(source, self._put_back(shape.sql), calls, shape.ordered)
