"""Gold SQL over the answer sheet TB_CXR_PLUS for the 42 MIMIC-CXR-VQA templates the EHRXQA image
templates embed (programs 1-40 plus the two size templates; plane / gender are not used by EHRXQA).

``gold_vqa(key, args, sid)`` gives the answer of one VQA template for the study whose id is the SQL
expression ``sid`` (a column such as ``t1.study_id`` or a scalar subquery):
- ``("bool", expr)`` for verify templates: a 1/0 SQL expression (NULL for a size ratio the sheet lacks);
- ``("rows", query)`` for choose / query templates: a SELECT (possibly a compound) with one column of
  distinct names.
The semantics are those of ``questions.mimic_cxr_vqa.programs`` (the oracle's answers): "pos" = a TB_CXR_PLUS row of
the study with relation = 1; abnormality = category in ABN4; CTR > 1/2, MTR > 1/3; a choose template
answers the subset of the two offered options that holds.
"""

from __future__ import annotations

from ehrxqa_pipeline.questions.mimic_cxr_vqa.templates import ABN4, get_template

ABN = "ABN"  # marker: the ABN4 categories
_ABN_SQL = "(" + ", ".join(f"'{c}'" for c in sorted(ABN4)) + ")"
SUPPORTED = tuple(t.key for t in map(get_template, [
    "base_1", "base_2", "base_abn_1", "base_4", "base_5", "base_6", "base_9", "base_abn_2", "base_10", "base_11",
    "base_abn_3", "base_abn_4", "base_25", "base_26", "base_27", "base_abn_5", "base_abn_6", "base_abn_7", "base_30",
    "base_abn_8", "base_32", "base_33", "base_34", "base_35", "base_40", "base_41", "base_abn_9", "base_42", "base_45",
    "base_46", "base_49", "base_50", "base_abn_10", "base_58", "base_59", "base_60", "base_64", "base_65", "base_66",
    "base_73", "ct_ratio_1", "mt_ratio_1"]))


def q(value: str) -> str:
    """An SQL string literal that the published post-processing leaves intact (docs/deviations.md,
    "Published dataset: record format"): ``'text'``, or ``"text"`` when the text holds an apostrophe.

    The published executors replace every ``''`` by ``'`` before running a query, so the standard escape
    ``'alzheimer''s disease'`` becomes a syntax error there. SQLite reads a double-quoted token that names no
    column as a string literal (no column name here holds a space or an apostrophe), sqlglot keeps it as
    written, and the text holds no ``''``: the same answer with and without the published post-processing.
    A ``"`` inside is doubled, as SQL escapes it."""
    text = str(value)
    if "'" in text:
        return '"' + text.replace('"', '""') + '"'
    return "'" + text + "'"


def names(out: str, sid: str, obj=None, attr=None, cats=None, objs=None, attrs=None) -> str:
    """Distinct ``out`` (object / attribute) of the study's positives matching the filters."""
    cond = [f"p.study_id = {sid}", "p.relation = 1"]
    if obj is not None:
        cond.append(f"p.object = {q(obj)}")
    if attr is not None:
        cond.append(f"p.attribute = {q(attr)}")
    if cats == ABN:
        cond.append(f"p.category in {_ABN_SQL}")
    elif cats:
        cond.append(f"p.category in ({', '.join(q(c) for c in cats)})")
    if objs:
        cond.append(f"p.object in ({', '.join(q(o) for o in objs)})")
    if attrs:
        cond.append(f"p.attribute in ({', '.join(q(a) for a in attrs)})")
    return f"select distinct p.{out} from tb_cxr_plus as p where {' and '.join(cond)}"


def has(sid: str, **kw) -> str:
    return f"exists ({names('object', sid, **kw)})"


def _ratio(sid: str, column: str, threshold: str) -> str:
    return f"((select max(p.{column}) from tb_cxr_plus as p where p.study_id = {sid}) > {threshold})"


def gold_vqa(key: str, a: dict[str, str], sid: str) -> tuple[str, str]:
    """(kind, SQL) of VQA template ``key`` with argument columns ``a`` for the study ``sid``."""
    o1, o2, a1, a2 = a.get("object_1"), a.get("object_2"), a.get("attribute_1"), a.get("attribute_2")
    c1 = (a["category_1"],) if "category_1" in a else None
    c12 = (a["category_1"], a["category_2"]) if "category_2" in a else None
    B = lambda e: ("bool", e)  # noqa: E731
    R = lambda s: ("rows", s)  # noqa: E731
    table = {
        "base_1": lambda: B(has(sid, obj=o1, cats=c1)),
        "base_2": lambda: B(has(sid, obj=o1, attr=a1)),
        "base_abn_1": lambda: B(has(sid, obj=o1, cats=ABN)),
        "base_4": lambda: B(has(sid, obj=o1, cats=c12)),
        "base_5": lambda: B(f"({has(sid, obj=o1, attr=a1)} and {has(sid, obj=o1, attr=a2)})"),
        "base_6": lambda: B(f"({has(sid, obj=o1, attr=a1)} or {has(sid, obj=o1, attr=a2)})"),
        "base_9": lambda: R(names("attribute", sid, obj=o1, cats=c1)),
        "base_abn_2": lambda: R(names("attribute", sid, obj=o1, cats=ABN)),
        "base_10": lambda: R(names("attribute", sid, obj=o1, cats=c12)),
        "base_11": lambda: R(names("attribute", sid, obj=o1, attrs=(a1, a2))),
        "base_abn_3": lambda: B(f"({has(sid, obj=o1, cats=ABN)} or {has(sid, obj=o2, cats=ABN)})"),
        "base_abn_4": lambda: B(f"({has(sid, obj=o1, cats=ABN)} and {has(sid, obj=o2, cats=ABN)})"),
        "base_25": lambda: R(f"{names('attribute', sid, obj=o1, cats=c1)} union "
                             f"{names('attribute', sid, obj=o2, cats=c1)}"),
        "base_26": lambda: R(f"{names('attribute', sid, obj=o1, cats=c1)} intersect "
                             f"{names('attribute', sid, obj=o2, cats=c1)}"),
        "base_27": lambda: R(f"{names('attribute', sid, obj=o1, cats=c1)} except "
                             f"{names('attribute', sid, obj=o2, cats=c1)}"),
        "base_abn_5": lambda: R(f"{names('attribute', sid, obj=o1, cats=ABN)} union "
                                f"{names('attribute', sid, obj=o2, cats=ABN)}"),
        "base_abn_6": lambda: R(f"{names('attribute', sid, obj=o1, cats=ABN)} intersect "
                                f"{names('attribute', sid, obj=o2, cats=ABN)}"),
        "base_abn_7": lambda: R(f"{names('attribute', sid, obj=o1, cats=ABN)} except "
                                f"{names('attribute', sid, obj=o2, cats=ABN)}"),
        "base_30": lambda: B(has(sid, cats=c1)),
        "base_abn_8": lambda: B(has(sid, cats=ABN)),
        "base_32": lambda: B(has(sid, cats=c12)),
        "base_33": lambda: B(has(sid, attr=a1)),
        "base_34": lambda: B(f"({has(sid, attr=a1)} and {has(sid, attr=a2)})"),
        "base_35": lambda: B(f"({has(sid, attr=a1)} or {has(sid, attr=a2)})"),
        "base_40": lambda: R(names("attribute", sid, cats=c1)),
        "base_41": lambda: R(names("attribute", sid, cats=c12)),
        "base_abn_9": lambda: R(names("attribute", sid, cats=ABN)),
        "base_42": lambda: R(names("attribute", sid, attrs=(a1, a2))),
        "base_45": lambda: B(f"({has(sid, obj=o1, attr=a1)} and {has(sid, obj=o2, attr=a1)})"),
        "base_46": lambda: B(f"({has(sid, obj=o1, attr=a1)} or {has(sid, obj=o2, attr=a1)})"),
        "base_49": lambda: R(names("object", sid, attr=a1)),
        "base_50": lambda: R(names("object", sid, attr=a1, objs=(o1, o2))),
        "base_abn_10": lambda: R(names("object", sid, cats=ABN, objs=(o1, o2))),
        "base_58": lambda: R(f"{names('object', sid, attr=a1)} union {names('object', sid, attr=a2)}"),
        "base_59": lambda: R(f"{names('object', sid, attr=a1)} intersect {names('object', sid, attr=a2)}"),
        "base_60": lambda: R(f"{names('object', sid, attr=a1)} except {names('object', sid, attr=a2)}"),
        "base_64": lambda: B(f"({has(sid, obj=o1, cats=c1)} and {has(sid, obj=o2, cats=c1)})"),
        "base_65": lambda: B(f"({has(sid, obj=o1, cats=c1)} or {has(sid, obj=o2, cats=c1)})"),
        "base_66": lambda: R(names("object", sid, cats=c1)),
        "base_73": lambda: R(names("object", sid, cats=c12)),
        "ct_ratio_1": lambda: B(_ratio(sid, "ct_ratio", "0.5")),
        "mt_ratio_1": lambda: B(_ratio(sid, "mt_ratio", "1.0 / 3")),
    }
    if key not in table:
        raise KeyError(f"VQA template {key!r} has no gold SQL (EHRXQA embeds {SUPPORTED})")
    return table[key]()
