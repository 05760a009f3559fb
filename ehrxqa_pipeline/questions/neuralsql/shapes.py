"""The published ways a NeuralSQL query reaches images (what the authors' executor can run).

The authors' NeuralSQL executor (github baeseongsu/ehrxqa, branch dev-experiment, experiment/NeuralSQL) runs
func_vqa only in these places, so every released image or image+table query is composed of them:

- P1  ``select func_vqa("q", t1.study_id) from (select ... from tb_cxr where ...) as t1``, or an except /
      intersect / union of two such selects;
- P2  ``select ... from (select ... from tb_cxr where ...) as t1 where func_vqa("q", t1.study_id) = true
      [order by ... limit ...]`` (the projection may aggregate: count(...), distinct ...; ``= false`` where a
      2-study comparison needs a study that answers no, which the executor evaluates the same way);
- P3  ``select (select count(*) > 0 from ...) and (select count(*) > 0 from (...) as t1 where
      func_vqa("q", t1.study_id) = true)``: each side a P2 (or func_vqa-free) select whose one projection is
      ``count(...) > 0``;
- P4  a join side ``(select cols from tb_cxr where tb_cxr.study_id in (select distinct t1.study_id from
      (...) as t1 where func_vqa("q", t1.study_id) = true))``.

``shape(query)`` names the shape of a query ('table' when it calls no func_vqa) and raises ``ShapeError``
saying where a func_vqa call sits outside these shapes. Parsed with sqlglot's SQLite dialect.
"""

from __future__ import annotations

import functools
import json

import sqlglot
from sqlglot import expressions as exp

from ehrxqa_pipeline.questions.neuralsql.parse_store import ParseStore, fingerprint
from ehrxqa_pipeline.questions.neuralsql.parser import value_free

SHAPES = ("P1", "P2", "P3", "P4")


class ShapeError(ValueError):
    """A NeuralSQL query that reaches an image outside the published shapes."""


def _from(select: exp.Select) -> exp.Expression | None:
    """The FROM item of a select (sqlglot names the argument "from_" or "from" by version)."""
    source = select.args.get("from_") or select.args.get("from")
    return None if source is None else source.this


def _is_vqa(node: exp.Expression) -> bool:
    return isinstance(node, exp.Anonymous) and str(node.this).lower() == "func_vqa"


def _calls(node: exp.Expression) -> list[exp.Expression]:
    return [n for n in node.walk() if _is_vqa(n)]


def _derived_alias(select: exp.Select) -> str | None:
    """The alias of the select's only FROM item when it is a func_vqa-free subquery over tb_cxr, else None."""
    sub = _from(select)
    if sub is None or select.args.get("joins"):
        return None
    if not isinstance(sub, exp.Subquery) or _calls(sub) or not sub.alias:
        return None
    return sub.alias if any(t.name.lower() == "tb_cxr" for t in sub.find_all(exp.Table)) else None


def _asks(call: exp.Expression, alias: str) -> bool:
    """func_vqa("<question>", <alias>.study_id); SQLite reads the double-quoted question as a quoted name."""
    args = call.expressions
    question = (isinstance(args[0], exp.Literal) and args[0].is_string) or (
        isinstance(args[0], exp.Column) and not args[0].table and args[0].this.quoted) if args else False
    return (len(args) == 2 and question and isinstance(args[1], exp.Column) and args[1].name.lower() == "study_id"
            and args[1].table.lower() == alias.lower())


def _p1(select: exp.Expression) -> bool:
    """select func_vqa("q", t.study_id) from (func_vqa-free select over tb_cxr) as t."""
    if not isinstance(select, exp.Select) or select.args.get("where") or len(select.expressions) != 1:
        return False
    alias = _derived_alias(select)
    return alias is not None and _is_vqa(select.expressions[0]) and _asks(select.expressions[0], alias)


def _p2(select: exp.Expression) -> bool:
    """select ... from (func_vqa-free select over tb_cxr) as t where func_vqa("q", t.study_id) = true (or false:
    the 2-study comparisons ask that one study answers no)."""
    if not isinstance(select, exp.Select) or any(_calls(e) for e in select.expressions):
        return False
    alias, where = _derived_alias(select), select.args.get("where")
    if alias is None or where is None:
        return False
    cond = where.this
    return (isinstance(cond, exp.EQ) and _is_vqa(cond.this) and _asks(cond.this, alias)
            and isinstance(cond.expression, exp.Boolean))


def _exists_side(node: exp.Expression) -> bool:
    """One side of P3: (select count(...) > 0 from ...), P2 when it calls func_vqa."""
    select = node.this if isinstance(node, (exp.Subquery, exp.Paren)) else node
    if not isinstance(select, exp.Select) or len(select.expressions) != 1:
        return False
    head = select.expressions[0]
    positive = (isinstance(head, exp.GT) and isinstance(head.this, exp.Count)
                and isinstance(head.expression, exp.Literal) and head.expression.name == "0")
    return positive and (not _calls(select) or _p2(select))


def _p4_side(select: exp.Expression) -> bool:
    """select cols from tb_cxr where tb_cxr.study_id in (select distinct t.study_id ... P2)."""
    if not isinstance(select, exp.Select) or any(_calls(e) for e in select.expressions):
        return False
    source, where = _from(select), select.args.get("where")
    if not isinstance(source, exp.Table) or source.name.lower() != "tb_cxr" or where is None:
        return False
    cond = where.this
    if not (isinstance(cond, exp.In) and isinstance(cond.this, exp.Column) and cond.this.name.lower() == "study_id"):
        return False
    inner = cond.args.get("query")
    inner = inner.this if isinstance(inner, exp.Subquery) else inner
    if not _p2(inner) or not inner.args.get("distinct") or len(inner.expressions) != 1:
        return False
    col = inner.expressions[0]
    return isinstance(col, exp.Column) and col.name.lower() == "study_id"


def _names_vqa(query: str) -> bool:
    """Whether the query's text names func_vqa at all. One that does not reaches no image: 'table' without
    parsing (about half of a release; the blocking consistency check upstream has run every item's SQL)."""
    return "func_vqa" in query.lower()


def shape(query: str) -> str:
    """'table', or the published shape P1-P4 of a NeuralSQL query; ``ShapeError`` otherwise. A query whose
    text never names func_vqa is 'table' without parsing (``_names_vqa``)."""
    if not _names_vqa(query):
        return "table"
    try:
        root = sqlglot.parse_one(query, read="sqlite")
    except sqlglot.errors.ParseError as err:
        raise ShapeError(f"not parsable as SQLite: {err}") from None
    if not _calls(root):
        return "table"
    if isinstance(root, (exp.Except, exp.Intersect, exp.Union)):
        if _p1(root.this) and _p1(root.expression):
            return "P1"
        raise ShapeError("a set operation whose sides are not both select func_vqa(...) from (...) as t")
    if not isinstance(root, exp.Select):
        raise ShapeError(f"the query is a {type(root).__name__}, not a select or set operation")
    if _p1(root):
        return "P1"
    if _p2(root):
        return "P2"
    if _from(root) is None and len(root.expressions) == 1 and isinstance(root.expressions[0], exp.And):
        sides = list(root.expressions[0].flatten())
        if len(sides) == 2 and all(_exists_side(s) for s in sides):
            return "P3"
        raise ShapeError("select (...) and (...): each side must be (select count(...) > 0 from ...), its func_vqa "
                         "in a where over a derived table t1")
    sides = [s.this for s in root.find_all(exp.Subquery) if isinstance(s.this, exp.Select) and _calls(s.this)
             and isinstance(s.parent, (exp.From, exp.Join))]
    if root.args.get("joins") and sides and all(_p4_side(s) for s in sides) \
            and sum(len(_calls(s)) for s in sides) == len(_calls(root)):
        return "P4"
    raise ShapeError("func_vqa is used outside the published shapes P1-P4 (e.g. directly in a where over tb_cxr)")


@functools.lru_cache(maxsize=1 << 14)
def _shape_of_template(text: str) -> str:
    return shape(text)


def template_shape(query: str) -> str:
    """``shape(query)``, worked out once for all the items of one template: the shape of the query's text with
    its values stood in for (``parser.value_free``; no value changes where a func_vqa call sits). A refusal
    is worked out on the query itself, so its reason quotes the query. A query that never names func_vqa is
    'table' at once (``shape``), without standing in for its values."""
    if not _names_vqa(query):
        return "table"
    text = value_free(query)
    if text is not None:
        try:
            return _shape_of_template(text)
        except ShapeError:
            pass
    return shape(query)


def shape_counts(records: dict[str, list[dict]], store: ParseStore | None = None
                 ) -> tuple[dict[str, int], list[dict]]:
    """(records per shape, refusals) over release records by split: every query that calls func_vqa must be
    one of P1-P4; a refusal names the split, id, q_tag and why. Unanswerable items (query null) are skipped.
    ``store``: each query's shape (or refusal) kept between builds (``parse_store``; same results)."""
    known = _shapes([r["query"] for items in records.values() for r in items if r.get("query") is not None], store)
    counts: dict[str, int] = {}
    refused: list[dict] = []
    for split, items in records.items():
        for r in items:
            if r.get("query") is None:
                continue
            name, reason = known[r["query"]]
            if reason is not None:
                refused.append({"split": split, "id": r.get("id"), "q_tag": r.get("q_tag"), "reason": reason})
            counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items())), refused


def _shapes(queries: list[str], store: ParseStore | None) -> dict[str, tuple[str, str | None]]:
    """query -> (shape, None) or ("refused", why); those that call func_vqa (the parsed ones) read from and
    added to ``store``."""
    options, out, new = fingerprint("shape"), {}, {}
    unique = list(dict.fromkeys(queries))
    parsed = {q for q in unique if _names_vqa(q)}  # shape() names the others 'table' unparsed
    kept = {} if store is None else store.get("shape", options, parsed)
    for query in unique:
        try:
            out[query] = tuple(json.loads(kept[query]))
            continue
        except (KeyError, ValueError, TypeError):  # not kept (or a damaged entry): worked out here
            pass
        try:
            out[query] = (template_shape(query), None)
        except ShapeError as err:
            out[query] = ("refused", str(err))
        if query in parsed:
            new[query] = json.dumps(out[query])
    if store is not None:
        store.put("shape", options, new)
    return out
