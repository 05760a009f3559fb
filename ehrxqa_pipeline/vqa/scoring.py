"""Scores of VQA modules on MIMIC-CXR-VQA (paper Table 4 / E11 / E12 and the E.1.3 relative AUROC) and on
EHRXQA through NeuralSQL (paper Table 5 / E16: execution accuracy per modality x patient scope).

Sources: ``mimic_cxr_vqa.questions`` test rows (split, template_key, image_id, argument columns, answer);
the reference model's ``Predictions``; the gold labels (one row per affirmed (image_id, object, attribute),
every other pool pair a negative); EHRXQA test items (stored ``ehrxqa.questions`` rows, released records
or ``FilledItem``s) with the gold database they were drawn from.

``verify_auroc`` -- what enters:
- *reference* (per (object, attribute)): every ``Predictions.relations`` row of an image of
  ``test_questions``; label 1 when (image, object, attribute) is a gold positive, else 0. Gold positives of
  a predicted pair on an object the model has no row for (no box) enter with score 0.
- *verify items*: the ``base_2`` rows of ``test_questions`` ("Is there ${attribute} in the ${object}?"),
  label 1 when the item is a gold positive. On them: the reference's prob (0 where it has no row), and a
  module's hard score (1 for ["yes"], 0 for ["no"], 0.5 for an abstention or any other answer).
- *relative*: per pair with at least ``min_positives`` positive verify items (paper: 10) and both AUROCs
  defined, AUROC_module / AUROC_reference on the same verify items; ``mean`` is their mean. Pass
  ``verify_items(...)`` as ``test_questions`` to score on the paper's decomposed Test (verify) set instead.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import polars as pl

from ehrxqa_pipeline.questions.ehrxqa.registry import BY_INDEX
from ehrxqa_pipeline.questions.ehrxqa.stats import scope_axes
from ehrxqa_pipeline.questions.neuralsql import NeuralSqlError, NeuralSqlExecutor, VqaModule, same_answer
from ehrxqa_pipeline.questions.neuralsql.parse_store import ParseStore
from ehrxqa_pipeline.questions.neuralsql.vqa_modules import reads_pixels
from ehrxqa_pipeline.questions.mimic_cxr_vqa.templates import ARGUMENT_COLUMNS, CONTENT_TYPES, SEMANTIC_TYPES, TEMPLATES
from ehrxqa_pipeline.vqa.leaderboard import MODALITIES, PATIENT_SCOPES
from ehrxqa_pipeline.vqa.metrics import (accuracy, auroc_by_group, execution_accuracy, micro_f1, relative_auroc)
from ehrxqa_pipeline.vqa.predictions import Predictions

VERIFY_TEMPLATE = "base_2"
_KEYS = ["object", "attribute"]
_LIST = pl.List(pl.String)


# -- MIMIC-CXR-VQA ------------------------------------------------------------------------------------
def score_mimic_cxr_vqa(test_questions: pl.DataFrame, predicted_answers: Sequence | pl.Series) -> dict:
    """{"n", "accuracy", "micro_f1", "abstentions", "by_content_type": {type: {"n", "accuracy", "micro_f1"}},
    "by_semantic_type": {...}}; one predicted answer (list[str] or None) per row of ``test_questions``, whose
    types come from its ``template_key`` (warehouse rows) or, without one, from its own ``content_type`` and
    ``semantic_type`` columns (released records: ``vqa.score_file``)."""
    pred = (predicted_answers if isinstance(predicted_answers, pl.Series)
            else pl.Series(list(predicted_answers), dtype=_LIST))
    if pred.len() != test_questions.height:
        raise ValueError(f"{pred.len()} predicted answers for {test_questions.height} questions")
    types = pl.DataFrame({"template_key": [t.key for t in TEMPLATES],
                          "content_type": [t.content_type for t in TEMPLATES],
                          "semantic_type": [t.semantic_type for t in TEMPLATES]})
    if "template_key" not in test_questions.columns:
        f = test_questions.select("content_type", "semantic_type", pl.col("answer").cast(_LIST))
        f = f.with_columns(pred=pred.cast(_LIST), template_key=pl.lit(None, pl.String))
    else:
        f = test_questions.select("template_key", pl.col("answer").cast(_LIST)).with_columns(pred=pred.cast(_LIST))
        f = f.join(types, on="template_key", how="left", maintain_order="left")
    if f["content_type"].null_count():
        unknown = sorted(set(f.filter(pl.col("content_type").is_null())["template_key"]))
        raise ValueError(f"unknown template keys {unknown}")

    def block(part: pl.DataFrame) -> dict:
        return {"n": part.height, "accuracy": accuracy(part["pred"], part["answer"]),
                "micro_f1": micro_f1(part["pred"], part["answer"])}

    out = {**block(f), "abstentions": int(f["pred"].null_count())}
    for axis, order in (("content_type", CONTENT_TYPES), ("semantic_type", SEMANTIC_TYPES)):
        out[f"by_{axis}"] = {v: block(f.filter(pl.col(axis) == v)) for v in order if (f[axis] == v).any()}
    return out


def verify_items(predictions: Predictions, gold_positives: pl.DataFrame, image_ids: Iterable[str]) -> pl.DataFrame:
    """The decomposed Test (verify) set of E.1.3: one ``base_2`` row per predicted (image, object, attribute)
    of ``image_ids``, with its gold answer; columns as ``mimic_cxr_vqa.questions`` (template_key, image_id,
    object_1, attribute_1, answer)."""
    ids = pl.Series(list(image_ids), dtype=pl.String)
    rel = predictions.relations.filter(pl.col("image_id").is_in(ids.implode()))
    lab = _label(rel.select("image_id", *_KEYS), gold_positives)
    out = lab.select(pl.lit("test").alias("split"), pl.lit(VERIFY_TEMPLATE).alias("template_key"), "image_id",
                     pl.col("object").alias("object_1"), pl.col("attribute").alias("attribute_1"),
                     pl.concat_list(pl.when("label").then(pl.lit("yes")).otherwise(pl.lit("no"))).alias("answer"))
    return out.with_columns([pl.lit(None, pl.String).alias(c) for c in ARGUMENT_COLUMNS if c not in out.columns])


def _label(frame: pl.DataFrame, gold_positives: pl.DataFrame) -> pl.DataFrame:
    pos = gold_positives.select("image_id", *_KEYS).unique().with_columns(label=pl.lit(True))
    return frame.join(pos, on=["image_id", *_KEYS], how="left", maintain_order="left").with_columns(
        pl.col("label").fill_null(False))


def _module_score(answer: Sequence[str] | None) -> float:
    """1 for ["yes"], 0 for ["no"], 0.5 for an abstention or anything else. In Python: a list-of-strings Series
    of every verify answer took 80 ms a module to build on the demo (20,200 answers), this 3 ms."""
    said = None if answer is None else list(answer)
    return 1.0 if said == ["yes"] else 0.0 if said == ["no"] else 0.5


def verify_auroc(test_questions: pl.DataFrame, predictions: Predictions, gold_positives: pl.DataFrame,
                 min_positives: int = 10, module_answers: Sequence | None = None) -> dict:
    """Reference and module AUROC per (object, attribute) and the relative AUROC (see the module docstring).

    ``module_answers``: the binary module's answers to every row of ``test_questions`` (only the verify
    rows are read). Returns {"reference": frame(object, attribute, n, positives, auroc) over the test images,
    "reference_mean": mean AUROC over its pairs with >= min_positives positives, "verify_items": count,
    "reference_on_items": frame, "module": frame or None, "relative": relative_auroc(...) or None}."""
    images = test_questions["image_id"].unique()
    rel = predictions.relations.filter(pl.col("image_id").is_in(images.implode())).select(
        "image_id", *_KEYS, score=pl.col("prob").cast(pl.Float64))
    pool = rel.select(*_KEYS).unique()
    unscored = (gold_positives.filter(pl.col("image_id").is_in(images.implode())).select("image_id", *_KEYS).unique()
                .join(pool, on=_KEYS, how="semi").join(rel, on=["image_id", *_KEYS], how="anti")
                .with_columns(score=pl.lit(0.0)))
    reference = auroc_by_group(_label(pl.concat([rel, unscored]), gold_positives), _KEYS, "score", "label")
    kept = reference.filter((pl.col("positives") >= min_positives) & pl.col("auroc").is_not_null())

    rows = test_questions.with_row_index("_q").filter(pl.col("template_key") == VERIFY_TEMPLATE)
    items = _label(rows.select("_q", "image_id", object="object_1", attribute="attribute_1"), gold_positives)
    items = items.join(rel, on=["image_id", *_KEYS], how="left", maintain_order="left").with_columns(
        pl.col("score").fill_null(0.0))
    ref_items = auroc_by_group(items, _KEYS, "score", "label")
    out = {"reference": reference, "reference_mean": float(kept["auroc"].mean()) if kept.height else None,
           "reference_pairs": kept.height, "verify_items": items.height, "reference_on_items": ref_items,
           "module": None, "relative": None}
    if module_answers is not None:
        if len(module_answers) != test_questions.height:
            raise ValueError(f"{len(module_answers)} module answers for {test_questions.height} questions")
        scores = pl.Series("score", [_module_score(a) for a in module_answers], pl.Float64)
        scored = items.with_columns(scores.gather(items["_q"]))
        out["module"] = auroc_by_group(scored, _KEYS, "score", "label")
        out["relative"] = relative_auroc(out["module"], ref_items, min_positives)
    return out


# -- EHRXQA ---------------------------------------------------------------------------------------------
def _scope_of(item) -> str:
    if hasattr(item, "template"):  # FilledItem
        return item.template.scope
    if item.get("scope"):
        return item["scope"]
    if item.get("template_index") is not None:
        return BY_INDEX[int(item["template_index"])].scope
    raise ValueError("an EHRXQA item needs scope or template_index (released records: use the stored rows)")


def _id_of(item, position: int) -> int:
    """The item's release id (its position in the split file): the stored or released ``id``, else its
    position among the items given (``FilledItem``s have none)."""
    value = None if hasattr(item, "neural_sql") else item.get("id")
    return position if value is None else int(value)


def _items(items) -> list[dict]:
    """(id, query, answer, scope, impossible) per item from a stored frame, record dicts or FilledItems."""
    rows = items.to_dicts() if isinstance(items, pl.DataFrame) else list(items)
    out = []
    for r in rows:
        if hasattr(r, "neural_sql"):
            q, a, imp = r.neural_sql, r.answer, bool(getattr(r.template, "impossible", False))
        else:
            q = r.get("neural_sql") or r.get("query")
            a = json.loads(r["answer"]) if isinstance(r["answer"], str) else r["answer"]
            imp = bool(r.get("is_impossible") or json.loads(r.get("record") or "{}").get("is_impossible", False))
        out.append({"id": _id_of(r, len(out)), "query": q, "answer": list(a), "scope": _scope_of(r),
                    "impossible": imp})
    return out


def ehrxqa_outcome(answer: list | None, gold: list, *, ordered: bool) -> str:
    """One EHRXQA item's outcome from its answer: ``correct`` when it equals the gold answer as the consistency
    check compares them (``same_answer``: as multisets, in order only under a root ORDER BY); else ``abstain``
    for no answer (None) or an answer with a NULL in it (the module abstained where it mattered); else
    ``wrong``. The scores asset and ``ehrxqa score`` (``vqa.score_file``) both decide through this function."""
    if answer is None:
        return "abstain"
    if same_answer(answer, gold, ordered=ordered):
        return "correct"
    nulls = any(v is None or (isinstance(v, (tuple, list)) and None in v) for v in answer)
    return "abstain" if nulls else "wrong"


def _run(executor: NeuralSqlExecutor, query: str) -> list:
    """[the module's answer (None when the query failed), whether the query has a root ORDER BY, the error
    message or None]: a query's run, JSON-able as ``vqa.evaluate`` keeps it."""
    try:
        result = executor.execute(query)
    except NeuralSqlError as e:
        return [None, False, str(e)]
    return [result.answer, result.ordered, None]


def summarise_ehrxqa(outcomes: Sequence[tuple[str, str, str]]) -> dict:
    """Execution accuracy overall, ``by_modality`` (image, table, image+table) and ``by_modality_scope``
    ("image/single", ...; paper order) from one (modality, patient scope, outcome) triple per item."""
    out = execution_accuracy(o for *_, o in outcomes)
    out["by_modality"] = {m: execution_accuracy(o for mm, _, o in outcomes if mm == m)
                          for m in MODALITIES if any(mm == m for mm, _, _ in outcomes)}
    keys = sorted({(m, s) for m, s, _ in outcomes},
                  key=lambda k: (MODALITIES.index(k[0]), PATIENT_SCOPES.index(k[1])))
    out["by_modality_scope"] = {f"{m}/{s}": execution_accuracy(o for mm, ss, o in outcomes if (mm, ss) == (m, s))
                                for m, s in keys}
    return out


class _Counting:
    """Passes calls through to a module and counts the pairs asked and the None answers."""

    def __init__(self, module: VqaModule):
        self.module, self.name = module, getattr(module, "name", type(module).__name__)
        # what the executor reads of the module itself: its batch size, whether it opens the images
        self.batch_size, self.reads_pixels = getattr(module, "batch_size", None), reads_pixels(module)
        self.asked = self.abstained = 0

    def __call__(self, images, questions):
        got = self.module(images, questions)
        self.asked += len(questions)
        self.abstained += sum(a is None for a in got) if isinstance(got, (list, tuple)) else 0
        return got


def first_pass_pairs(database: str | Path, items, *, parse_store: ParseStore | None = None) -> dict:
    """The (question, study) pairs that the first pass of the items' queries reaches on ``database`` before any
    module answered (``NeuralSqlExecutor.first_pass``): the same for every module, so ``score_ehrxqa`` of
    several modules on these items runs those passes once (``first_pass=``)."""
    executor = NeuralSqlExecutor(database, None, parse_store=parse_store)
    try:
        queries = [r["query"] for r in _items(items) if not r["impossible"]]
        executor.parse_many(queries)
        return executor.first_pass(queries)
    finally:
        executor.close()


def score_ehrxqa(database: str | Path | sqlite3.Connection, images_root: str | Path | None, items,
                 module: VqaModule | None, *, batch_size: int | None = None, parse_store: ParseStore | None = None,
                 first_pass: Callable[[], dict] | None = None, known: Mapping[str, list] | None = None) -> dict:
    """Execution accuracy of ``module`` on EHRXQA items (see ``metrics.execution_accuracy``).

    Each item's gold NeuralSQL runs with the module on ``database`` (the gold database; TB_CXR_PLUS stays
    hidden) and its answer is compared with the stored answer as the consistency check does (``same_answer``,
    in order only under a root ORDER BY). Outcomes: correct; abstain (wrong, with a NULL in the answer: the
    module abstained where it mattered); error (the query failed, e.g. a module broke its contract); wrong.
    Unanswerable items (``is_impossible``) have no query and are skipped (counted). Returns the overall
    counts plus ``by_modality`` and ``by_modality_scope`` ("image/single", ...), ``vqa_asked`` (image-question
    pairs sent to the module), ``vqa_abstentions`` (those it answered None), up to 5 ``error_examples`` and
    ``answers``: item id -> the module's answer (``normalise_rows`` form; None for a failed query and for an
    unanswerable item), what ``ehrxqa score`` reads back from ``release/predictions/``. ``parse_store``: the
    queries' parses kept between processes and builds (``NeuralSqlExecutor``; same results). ``first_pass``: a
    function that returns ``NeuralSqlExecutor.first_pass`` of these items' queries on ``database``
    (``first_pass_pairs``), shared by the modules scored on them and called only when a query is run here (same
    results; else each module's executor runs those passes itself), unless the module runs fewer than half of the
    queries (the others ``known``): then it passes over its own alone.
    ``known``: query -> [answer, ordered, error message] of this module on this database from an earlier run
    (``runs`` of its result, kept by ``vqa.evaluate``): those queries are not run again, their items' outcomes are
    decided from those answers against the items' answers now. The result's ``runs`` holds that triple for every
    query of these items; ``vqa_asked`` and ``vqa_abstentions`` count what the module was asked in this call."""
    rows = _items(items)
    known = known or {}
    counting = None if module is None else _Counting(module)
    executor = NeuralSqlExecutor(database, counting, images_root=images_root, batch_size=batch_size,
                                 parse_store=parse_store)
    outcomes, errors, answers, runs = [], [], {}, {}
    try:
        todo = [r["query"] for r in rows if not r["impossible"] and r["query"] not in known]
        if todo:  # the shared first passes of every query, unless this module runs few of them (a label edit)
            shared = first_pass is not None and 2 * len(set(todo)) >= len({r["query"] for r in rows})
            executor.prefetch(todo, first_pass=first_pass() if shared else None)
        for r in rows:
            if r["impossible"]:
                answers[r["id"]] = None  # no query to run: the module abstains
                continue
            run = runs.get(r["query"]) or known.get(r["query"]) or _run(executor, r["query"])
            runs[r["query"]] = run
            answer, ordered, message = run
            outcome = "error" if message is not None else ehrxqa_outcome(answer, r["answer"], ordered=ordered)
            answers[r["id"]] = answer
            axes = scope_axes(r["scope"])
            outcomes.append((axes["modality"], axes["patient_scope"], outcome))
            if message and len(errors) < 5:
                errors.append(message)
    finally:
        if not isinstance(database, sqlite3.Connection):
            executor.close()
    asked, none_answers = (0, 0) if counting is None else (counting.asked, counting.abstained)
    summary = summarise_ehrxqa(outcomes)
    return {**{k: v for k, v in summary.items() if not k.startswith("by_")},
            "skipped_impossible": sum(r["impossible"] for r in rows), "vqa_asked": asked,
            "vqa_abstentions": none_answers, "error_examples": errors, "by_modality": summary["by_modality"],
            "by_modality_scope": summary["by_modality_scope"], "answers": answers, "runs": runs}
