"""Score every VQA module side by side: the leaderboard behind ``vqa_scoring/scores`` (paper Tables 4, E12, E16).

Modules: ``reference`` (the trained model's predictions as labels, with the decision rule chosen on the
valid split: see ``prior_corrected``; only when predictions exist), ``pretrained_<arch>`` (a pretrained
backbone's probe, ``vqa.backbone``, answering the same way from its own predictions, when one was trained),
``oracle`` (the answer labels themselves:
the gold labels of the test images for MIMIC-CXR-VQA, the gold database's answer sheet for EHRXQA),
``yes`` (constant), ``prior_most`` and ``prior_question`` (paper Table 4's priors, fitted on train + valid),
and ``vision`` (an OpenAI-compatible endpoint, when one is configured).

- MIMIC-CXR-VQA test: accuracy and micro F1 overall, per content type and semantic type
  (``scoring.score_mimic_cxr_vqa``); relative AUROC of each module against the reference model on the
  decomposed Test (verify) set, "is there {attribute} in the {object}?" for every pool pair of every test
  image (``scoring.verify_items`` / ``verify_auroc``, pairs with >= ``min_positives`` positives).
- EHRXQA test: execution accuracy of the gold NeuralSQL with each module as FUNC_VQA, per modality x patient scope
  (``scoring.score_ehrxqa``). Table items call no VQA module, so they run once and their outcome is shared by every
  module (same result, a fifth of the time); each query's run is kept between builds while the query, the content of
  the tables it names and the code are unchanged (``table_scores``), each item's outcome decided again against its
  answer now; the image items' first passes are shared within a build, which no module's answer reaches yet
  (``scoring.first_pass_pairs``). Each module's run of each image item's query is kept between builds too, while the
  query, the content of the gold database's tables it names (``_run_keys``), the code and what the module answers
  from (``_module_inputs``: for the oracle the answer sheet, for the priors the MIMIC-CXR-VQA train and valid
  questions, for a trained model its decided predictions) are unchanged: a gold label edit changes the answer sheet,
  so the oracle runs every query again and the other modules only the queries of new items, and each item's outcome
  is decided again against its answer now; an EHR table edit runs again, in every module, the queries that name the
  table.
- Paraphrase robustness (VQA-RAD): for the text-reading modules only (``prior_question_text``, ``vision``).

Every module scored on a dataset also leaves its per-item answers (``Evaluation.predictions``), which the
scores asset writes to ``release/predictions/`` in the format ``ehrxqa score`` reads; the scores are decided by
the same comparisons that command uses (``scoring.ehrxqa_outcome``, ``metrics.correct`` / ``micro_f1``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from ehrxqa_pipeline.hashing import combine, file_digest, frame_digest
from ehrxqa_pipeline.questions.ehrxqa.memo import (ORACLE_TABLES, ResultMemo, code_digest, query_key, table_digests,
                                                    tables_named)
from ehrxqa_pipeline.questions.ehrxqa.records import oracle_runs_inputs
from ehrxqa_pipeline.questions.ehrxqa.sampling import DatabaseFiles
from ehrxqa_pipeline.questions.neuralsql import OracleModule
from ehrxqa_pipeline.questions.neuralsql.oracle import LabelModule
from ehrxqa_pipeline.questions.neuralsql.parse_store import ParseStore
from ehrxqa_pipeline.questions.neuralsql.vqa_modules import YesModule
from ehrxqa_pipeline.questions.mimic_cxr_vqa.programs import prepare_labels
from ehrxqa_pipeline.vqa.baselines import fit_priors, priors_of_state, priors_state
from ehrxqa_pipeline.vqa.leaderboard import module_scores
from ehrxqa_pipeline.vqa.modules import OpenAIVisionModule, ReferenceModule, answer_mimic_cxr_vqa
from ehrxqa_pipeline.vqa.prediction_files import EHRXQA, MIMIC_CXR_VQA
from ehrxqa_pipeline.vqa.predictions import Predictions
from ehrxqa_pipeline.vqa.robustness import paraphrase_robustness, phrasings
from ehrxqa_pipeline.vqa.scoring import (first_pass_pairs, score_ehrxqa, score_mimic_cxr_vqa, verify_auroc,
                                         verify_items)


@dataclass(frozen=True)
class EvaluationInputs:
    """What the scores are computed from (frames as the warehouse holds them)."""

    questions: pl.DataFrame  # mimic_cxr_vqa.questions: split, template_key, image_id, arguments, answer
    images: pl.DataFrame  # splits.images
    pairs: pl.DataFrame  # cxr_labels.pairs: object, attribute, category
    gold_positives: pl.DataFrame  # cxr_labels.gold: image_id, object, attribute
    ehrxqa_items: pl.DataFrame  # ehrxqa.questions rows of the test split (with their modality column)
    gold_database: Path  # the exported gold mimic_iv_cxr.db
    answer_sheet: Path  # its tb_cxr_plus.db
    images_root: Path | None  # MIMIC-CXR-JPG files/ (None: no pixels)
    predictions: Predictions | None = None  # None: no reference model (a source without JPEGs)
    pretrained: Mapping[str, Predictions] | None = None  # module name (pretrained_<arch>) -> its predictions
    prevalence: pl.DataFrame | None = None  # object, attribute, prevalence among silver-train images
    pools: pl.DataFrame | None = None  # paraphrase.pools (robustness phrasings)
    vision: Mapping | None = None  # OpenAIVisionModule kwargs
    parse_store: Path | None = None  # a questions.neuralsql.parse_store file: the EHRXQA items' parses kept
    memo: Path | None = None  # a JSON file that keeps EHRXQA results between builds (``table_scores``, ``evaluate``)
    # the consistency check's oracle runs of the gold image items (``records.check_stored``): the oracle's own
    oracle_runs: Path | None = None


@dataclass
class Evaluation:
    scores: dict[str, dict] = field(default_factory=dict)  # module -> flat metrics (leaderboard.module_scores)
    details: dict[str, dict] = field(default_factory=dict)  # module -> the scorers' full outputs
    # trained module (reference, pretrained_<arch>) -> its decision rule and why
    decisions: dict[str, dict] = field(default_factory=dict)
    # dataset ("mimic-cxr-vqa", "ehrxqa") -> module -> [{"id", "answer"}] per test item in release order
    # (MIMIC-CXR-VQA: id = idx, the position in test.json; EHRXQA: the record id): release/predictions/
    predictions: dict[str, dict[str, list[dict]]] = field(default_factory=dict)


def table_scores(x: EvaluationInputs, items: pl.DataFrame, store: ParseStore | None, memo: ResultMemo,
                 log: Callable[[str], None] = lambda _: None) -> dict:
    """``score_ehrxqa`` of the table items, which call no VQA module: one result for every module. With
    ``x.memo`` each query's run is kept as the image queries' are (``_run_keys``: its text and the content of the
    tables it names), so a label edit runs none of them again and an EHR table edit those that name the table; each
    item's outcome is decided again against its answer now."""
    query_keys = {q: query_key(q) for q in items["neural_sql"].unique().to_list() if q}
    run_keys = _run_keys(x, items, query_keys, also=())  # (no VQA module: nothing read besides what is named)
    inputs = memo.inputs(str(x.images_root), code=("vqa",)) if x.memo else ""
    kept = (inputs and memo.get("gold/table_items", inputs)) or {}
    known = {q: kept[k] for q, k in run_keys.items() if k in kept}
    result = score_ehrxqa(x.gold_database, x.images_root, items, None, parse_store=store, known=known)
    runs = result.pop("runs")
    log(f"EHRXQA test: the table items ran {len(runs) - len(known):,} of {len(runs):,} NeuralSQL queries (the "
        "others kept from an earlier build)")
    if inputs:
        memo.put("gold/table_items", inputs, {run_keys[q]: run for q, run in runs.items()}, save=False)
    return result


def _frames_digest(*frames: pl.DataFrame) -> str:
    """One digest of the frames' contents (``hashing.frame_digest`` of each)."""
    return combine(*map(frame_digest, frames))


def _fitted_priors(fit: pl.DataFrame, pairs: pl.DataFrame, memo: ResultMemo, fit_digest: str) -> dict[str, object]:
    """``fit_priors(fit, pairs)``, kept in ``memo`` while ``fit`` (its digest: ``fit_digest``; "" keeps nothing),
    ``pairs`` and the code are unchanged: a gold edit changes neither the train nor the valid questions."""
    inputs = fit_digest and combine(code_digest(("vqa",)), fit_digest, _frames_digest(pairs))
    state = inputs and memo.get("priors", inputs)
    if state:
        return priors_of_state(state)
    fitted = fit_priors(fit, pairs)
    if inputs:
        memo.put("priors", inputs, priors_state(fitted), save=False)
    return fitted


def _run_keys(x: EvaluationInputs, items: pl.DataFrame, query_keys: Mapping[str, str],
              also: tuple[str, ...] = ORACLE_TABLES) -> dict[str, str]:
    """Each query -> the key its runs are kept under: its text and the content of the gold database's tables it
    names (``memo.tables_named``) and of ``also`` (for an image query, those the oracle reads besides:
    ``memo.ORACLE_TABLES``), so an EHR table edit runs again only the queries that name the table (all of them for
    those tables)."""
    if not x.memo:
        return dict(query_keys)
    digests = table_digests(x.gold_database)
    named = tables_named(items.filter(pl.col("neural_sql").is_in(list(query_keys))).select("neural_sql").unique(),
                         digests, by="neural_sql", queries=("neural_sql",))
    always = [n for n in also if n in digests]
    return {q: combine(k, *(digests[n] for n in sorted({*named.get(q, ()), *always}))) for q, k in query_keys.items()}


def _module_inputs(name: str, x: EvaluationInputs, fit_digest: str, trained: Mapping[str, tuple]) -> str | None:
    """What module ``name`` answers EHRXQA's image questions from, as a digest (beside the gold database and the
    code, which the memo's key holds): the answer sheet (the oracle), nothing (yes), the MIMIC-CXR-VQA train and
    valid questions (``fit_digest``) and the pool (the priors), the frames a trained module was built from
    (``trained``: its decided predictions, the answer sheet's images and pairs, and the threshold). None: not kept
    (a remote endpoint's answers are not a function of anything here)."""
    if name == "oracle":
        return file_digest(x.answer_sheet)
    if name == "yes":
        return name
    if name == "prior_most":
        return fit_digest
    if name == "prior_question":
        return combine(fit_digest, _frames_digest(x.pairs))
    if name in trained:
        *frames, threshold = trained[name]
        return combine(_frames_digest(*frames), repr(threshold))
    return None


def merge_ehrxqa(a: dict, b: dict) -> dict:
    """Two ``score_ehrxqa`` results over disjoint items as one (counts added, accuracies recomputed)."""
    def add(x: Mapping | None, y: Mapping | None) -> dict:
        x, y = x or {}, y or {}
        n = x.get("n", 0) + y.get("n", 0)
        correct = x.get("correct", 0) + y.get("correct", 0)
        return {"n": n, "correct": correct, "accuracy": correct / n if n else None,
                "abstentions": x.get("abstentions", 0) + y.get("abstentions", 0),
                "errors": x.get("errors", 0) + y.get("errors", 0)}

    out = add(a, b)
    for key in ("by_modality", "by_modality_scope"):
        names = list(dict.fromkeys([*a.get(key, {}), *b.get(key, {})]))
        out[key] = {k: add(a.get(key, {}).get(k), b.get(key, {}).get(k)) for k in names}
    for key in ("skipped_impossible", "vqa_asked", "vqa_abstentions"):
        out[key] = a.get(key, 0) + b.get(key, 0)
    out["error_examples"] = (a.get("error_examples", []) + b.get("error_examples", []))[:5]
    answers = {**a.get("answers", {}), **b.get("answers", {})}
    out["answers"] = {k: answers[k] for k in sorted(answers)}
    return out


class SheetOracle:
    """``OracleModule(answer_sheet, database=database)``, made on first use: on its first question, or when its
    ``labels`` are read (a trained module's EHRXQA images). Scores whose oracle runs are all kept (the consistency
    check's, an earlier build's) never load the answer sheet (0.4 s for the gold sheet at full scale)."""

    name, batch_size, reads_pixels = OracleModule.name, OracleModule.batch_size, OracleModule.reads_pixels

    def __init__(self, answer_sheet: Path, database: Path):
        self.answer_sheet, self.database = answer_sheet, database

    @functools.cached_property
    def module(self) -> OracleModule:
        return OracleModule(self.answer_sheet, database=self.database)

    @property
    def labels(self):
        return self.module.labels

    def __call__(self, images, questions):
        return self.module(images, questions)


def _ehrxqa_images(oracle: OracleModule | SheetOracle) -> pl.DataFrame:
    return oracle.labels.images.drop("_img")


def _with_sheet_ratios(predictions: Predictions, sheet_images: pl.DataFrame) -> Predictions:
    """CTR / MTR from the answer sheet (the given boxes) where the prediction has none."""
    sheet = sheet_images.select("image_id", pl.col("ctr").alias("_ctr"), pl.col("mtr").alias("_mtr"))
    imgs = (predictions.images.join(sheet, on="image_id", how="left")
            .with_columns(ctr=pl.coalesce("ctr", "_ctr"), mtr=pl.coalesce("mtr", "_mtr")).drop("_ctr", "_mtr"))
    return Predictions(predictions.relations, imgs)


PRIOR_SCALES = (0.0, 0.5, 1.0, 2.0, 4.0)  # candidate decision rules, chosen on the valid split


def prior_corrected(predictions: Predictions, prevalence: pl.DataFrame | None, scale: float = 1.0) -> Predictions:
    """Probabilities with ``scale`` x each pair's training prevalence divided out of the odds:
    ``odds' = odds(p) / odds(scale * prevalence)``, so ``p' >= 0.5`` exactly when ``p >= scale * prevalence``.

    The model's probabilities are calibrated to how rare a finding is (about 1 % of pairs are positive), so
    at 0.5 it rarely affirms one, while MIMIC-CXR-VQA's answers are balanced per template. Within a pair the
    order is unchanged, so AUROC is the same. ``scale`` 0 (or no prevalence) leaves the probabilities as
    they are; pairs without a prevalence keep theirs."""
    if not scale or prevalence is None or not prevalence.height:
        return predictions
    p = pl.col("prob").cast(pl.Float64).clip(1e-6, 1 - 1e-6)
    t = (pl.col("_prev").cast(pl.Float64) * scale).clip(1e-6, 1 - 1e-6)
    odds = (p / (1 - p)) / (t / (1 - t))
    rel = (predictions.relations.join(prevalence.select("object", "attribute", pl.col("prevalence").alias("_prev")),
                                      on=["object", "attribute"], how="left", maintain_order="left")
           .with_columns(prob=pl.when(pl.col("_prev").is_null()).then(pl.col("prob"))
                         .otherwise(odds / (1 + odds)).cast(pl.Float32)).drop("_prev"))
    return Predictions(rel, predictions.images)


def choose_prior_scale(valid: pl.DataFrame, predictions: Predictions, x: EvaluationInputs,
                       threshold: float) -> tuple[float, dict[float, float]]:
    """The ``PRIOR_SCALES`` entry whose answers from a trained model's ``predictions`` are most accurate on the
    valid questions about predicted images (ties: the smaller scale), and each scale's valid accuracy. The test
    split is not used."""
    predicted = predictions.images["image_id"]
    asked = valid.filter(pl.col("image_id").is_in(predicted.implode()))
    if not asked.height or x.prevalence is None:
        return 0.0, {}
    acc = {}
    for scale in PRIOR_SCALES:
        module = ReferenceModule(prior_corrected(predictions, x.prevalence, scale), x.pairs, x.images, threshold)
        acc[scale] = score_mimic_cxr_vqa(asked, answer_mimic_cxr_vqa(module, asked))["accuracy"] or 0.0
    return max(PRIOR_SCALES, key=lambda k: (acc[k], -k)), acc


def evaluate(x: EvaluationInputs, *, seed: int = 0, threshold: float = 0.5, min_positives: int = 10,
             robustness_k: int = 3, log: Callable[[str], None] = lambda _: None) -> Evaluation:
    """Every module's scores (see the module docstring)."""
    test = x.questions.filter(pl.col("split") == "test")
    fit = x.questions.filter(pl.col("split").is_in(["train", "valid"]))
    oracle = SheetOracle(x.answer_sheet, x.gold_database)  # EHRXQA: the gold database's answer sheet
    gold = LabelModule(prepare_labels(x.pairs, x.gold_positives, x.images.filter(pl.col("split") == "test")), "oracle")
    memo = ResultMemo(x.memo)
    fit_digest = _frames_digest(fit) if x.memo else ""  # what the priors are fitted from (0.15 s at full scale)
    fitted = _fitted_priors(fit, x.pairs, memo, fit_digest)
    priors = {"yes": YesModule(), **{k: fitted[k] for k in ("prior_most", "prior_question")}}
    mimic_modules: dict[str, object] = {"oracle": gold, **priors}  # MIMIC-CXR-VQA: its own gold labels
    ehrxqa_modules: dict[str, object] = {"oracle": oracle, **priors}
    out = Evaluation()
    trained = {"reference": x.predictions, **(x.pretrained or {})} if x.predictions is not None else {}
    valid, sheet = x.questions.filter(pl.col("split") == "valid"), _ehrxqa_images(oracle) if trained else None
    mimic_trained, ehrxqa_trained, trained_inputs = {}, {}, {}
    for name, predictions in trained.items():
        scale, valid_acc = choose_prior_scale(valid, predictions, x, threshold)
        log(f"{name} decision: prevalence scale {scale} (valid accuracy per scale {valid_acc})")
        out.decisions[name] = {"prior_scale": scale, "valid_accuracy": {str(k): v for k, v in valid_acc.items()}}
        decided = prior_corrected(predictions, x.prevalence, scale)
        mimic_trained[name] = ReferenceModule(decided, x.pairs, x.images, threshold, name)
        ehrxqa_trained[name] = ReferenceModule(_with_sheet_ratios(decided, sheet), oracle.labels.pairs, sheet,
                                               threshold, name)
        trained_inputs[name] = (decided.relations, decided.images, sheet, oracle.labels.pairs, threshold)
    mimic_modules, ehrxqa_modules = {**mimic_trained, **mimic_modules}, {**ehrxqa_trained, **ehrxqa_modules}
    vision = OpenAIVisionModule(**x.vision) if x.vision else None
    if vision is not None:
        mimic_modules["vision"] = ehrxqa_modules["vision"] = vision

    answers = {}
    for name, module in mimic_modules.items():
        log(f"MIMIC-CXR-VQA test: {name} answers {test.height:,} questions")
        answers[name] = answer_mimic_cxr_vqa(module, test, images=x.images, images_root=x.images_root)
        out.details[name] = {"mimic_cxr_vqa": score_mimic_cxr_vqa(test, answers[name])}
        out.predictions.setdefault(MIMIC_CXR_VQA, {})[name] = [{"id": i, "answer": a}
                                                               for i, a in enumerate(answers[name])]
    if x.predictions is not None:  # E.1.3 on the decomposed Test (verify) set: every pool pair of every test image
        verify = verify_items(x.predictions, x.gold_positives, test["image_id"].unique().sort())
        log(f"relative AUROC: {verify.height:,} decomposed verify questions")
        for name, module in mimic_modules.items():
            if name == "vision":
                continue  # one request per (image, pair): not sent to a remote endpoint for a side metric
            said = answer_mimic_cxr_vqa(module, verify, images=x.images, images_root=x.images_root)
            out.details[name]["auroc"] = verify_auroc(verify, x.predictions, x.gold_positives, min_positives, said)

    is_table = x.ehrxqa_items["modality"] == "table"
    log(f"EHRXQA test: {int(is_table.sum()):,} table items once, {int((~is_table).sum()):,} image items per module")
    store = x.parse_store and ParseStore(x.parse_store, warn=log)
    table_part = table_scores(x, x.ehrxqa_items.filter(is_table), store, memo, log)
    image_items = x.ehrxqa_items.filter(~is_table)

    @functools.cache
    def first_pass() -> dict:  # shared by every module that runs a query
        return first_pass_pairs(x.gold_database, image_items, parse_store=store)

    query_keys = {q: query_key(q) for q in image_items["neural_sql"].unique().to_list() if q}
    run_keys = _run_keys(x, image_items, query_keys)
    for name, module in ehrxqa_modules.items():
        about = _module_inputs(name, x, fit_digest, trained_inputs) if x.memo else None
        inputs = about and memo.inputs(str(x.images_root), about, code=("vqa",))
        kept = (inputs and memo.get(f"gold/image_items/{name}", inputs)) or {}
        known = {q: kept[k] for q, k in run_keys.items() if k in kept}
        if name == "oracle" and x.oracle_runs is not None:  # the check ran them with the oracle on these files
            checked = ResultMemo(x.oracle_runs).get("gold/oracle_runs", oracle_runs_inputs(
                DatabaseFiles(x.gold_database, x.answer_sheet))) or {}
            known = {**{q: checked[k] for q, k in query_keys.items() if k in checked}, **known}
        part = score_ehrxqa(x.gold_database, x.images_root, image_items, module, parse_store=store,
                            first_pass=first_pass, known=known)
        runs = part.pop("runs")
        log(f"EHRXQA test: {name} ran {len(runs) - len(known):,} of {len(runs):,} NeuralSQL queries (the others "
            f"kept from an earlier build{' or the consistency check' if name == 'oracle' else ''})")
        if inputs:
            memo.put(f"gold/image_items/{name}", inputs, {run_keys[q]: run for q, run in runs.items()}, save=False)
        result = merge_ehrxqa(table_part, part)
        out.details.setdefault(name, {})["ehrxqa"] = result
        out.predictions.setdefault(EHRXQA, {})[name] = [{"id": i, "answer": a} for i, a in result["answers"].items()]
    memo.save()

    text_modules = {"prior_question_text": fitted["prior_question_text"], **({"vision": vision} if vision else {})}
    phrased = phrasings(test, x.pools, k=robustness_k, seed=seed)
    robust = paraphrase_robustness(text_modules, phrased, images=x.images, images_root=x.images_root)
    for name, result in robust.items():
        out.details.setdefault(name, {})["robustness"] = result

    for name, d in out.details.items():
        out.scores[name] = module_scores(mimic=d.get("mimic_cxr_vqa"), auroc=d.get("auroc"), ehrxqa=d.get("ehrxqa"),
                                         robustness=d.get("robustness"))
    return out
