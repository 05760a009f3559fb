"""The leaderboard orchestration (``vqa.evaluate``): every module scored on the same items, table items run
once and shared, the merge of two partial EHRXQA results by hand, and the modules present or absent."""

from __future__ import annotations

import json
import sqlite3

import polars as pl
import pytest

from ehrxqa_pipeline.questions.ehrxqa import CATALOG, fill_items
from ehrxqa_pipeline.questions.neuralsql import OracleModule
from ehrxqa_pipeline.questions.ehrxqa.records import stored_frame
from ehrxqa_pipeline.questions.ehrxqa.sampling import SampledItem, Sample
from ehrxqa_pipeline.vqa.evaluate import EvaluationInputs, evaluate, merge_ehrxqa
from ehrxqa_pipeline.vqa.scoring import score_ehrxqa
from tests.vqa.helpers_scoring import IMAGES, PAIRS, POSITIVES, QUESTIONS, build_merged_db, predictions


def test_merge_adds_counts_and_recomputes_accuracy():
    a = {"n": 4, "correct": 3, "abstentions": 1, "errors": 0, "vqa_asked": 5, "vqa_abstentions": 2,
         "skipped_impossible": 0, "error_examples": ["x"],
         "by_modality": {"table": {"n": 4, "correct": 3, "abstentions": 1, "errors": 0}},
         "by_modality_scope": {"table/none": {"n": 4, "correct": 3, "abstentions": 1, "errors": 0}}}
    b = {"n": 6, "correct": 3, "abstentions": 0, "errors": 2, "vqa_asked": 7, "vqa_abstentions": 0,
         "skipped_impossible": 1, "error_examples": ["y"],
         "by_modality": {"image": {"n": 6, "correct": 3, "abstentions": 0, "errors": 2}},
         "by_modality_scope": {"table/none": {"n": 2, "correct": 0, "abstentions": 0, "errors": 0},
                               "image/single": {"n": 4, "correct": 3, "abstentions": 0, "errors": 2}}}
    m = merge_ehrxqa(a, b)
    assert (m["n"], m["correct"], m["accuracy"], m["abstentions"], m["errors"]) == (10, 6, 0.6, 1, 2)
    assert (m["vqa_asked"], m["vqa_abstentions"], m["skipped_impossible"]) == (12, 2, 1)
    assert m["error_examples"] == ["x", "y"]
    assert m["by_modality_scope"]["table/none"] == {"n": 6, "correct": 3, "accuracy": 0.5, "abstentions": 1,
                                                    "errors": 0}
    assert list(m["by_modality"]) == ["table", "image"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    db = build_merged_db(tmp_path_factory.mktemp("evaluate"))
    conn = sqlite3.connect(db)
    try:
        filled = fill_items(conn, 0, CATALOG[::5])
    finally:
        conn.close()
    items = stored_frame(Sample([SampledItem.of(f, "test", "gold", 0) for f in filled]))
    fit = pl.concat([QUESTIONS.with_columns(split=pl.lit("train")),
                     QUESTIONS.head(3).with_columns(split=pl.lit("valid"))])
    return EvaluationInputs(questions=pl.concat([fit, QUESTIONS]), images=IMAGES, pairs=PAIRS, gold_positives=POSITIVES,
                            ehrxqa_items=items, gold_database=db, answer_sheet=db, images_root=None,
                            predictions=predictions())


@pytest.fixture(scope="module")
def evaluated(inputs):
    """``evaluate`` of ``inputs`` without a memo, once for the tests that read or compare with it."""
    return evaluate(inputs, min_positives=1, robustness_k=2)


def test_every_module_scored_and_table_items_shared(inputs, evaluated):
    result = evaluated
    assert set(result.scores) == {"reference", "oracle", "yes", "prior_most", "prior_question", "prior_question_text"}
    oracle, reference = result.scores["oracle"], result.scores["reference"]
    assert oracle["mimic_cxr_vqa/accuracy"] == 1.0 and oracle["ehrxqa/accuracy"] == 1.0
    # predictions() equal the gold labels: the reference answers like the oracle on both datasets
    assert reference["mimic_cxr_vqa/accuracy"] == 1.0 and reference["ehrxqa/accuracy"] == 1.0
    # the shared table part equals a per-module run of the table items
    items = inputs.ehrxqa_items.with_columns(
        m=pl.col("scope").str.split("-").list.first())
    alone = score_ehrxqa(inputs.gold_database, None, items.filter(pl.col("m") == "TABLE").drop("m"), None)
    for name in ("yes", "prior_most", "reference"):
        table = result.details[name]["ehrxqa"]["by_modality"]["table"]
        assert (table["n"], table["correct"]) == (alone["n"], alone["correct"]) and alone["n"] > 0
    assert result.scores["yes"]["ehrxqa/n"] == inputs.ehrxqa_items.height
    # yes answers "yes" to every verify item: its MIMIC accuracy is the share of ["yes"] answers (3 of 12)
    assert result.scores["yes"]["mimic_cxr_vqa/accuracy"] == pytest.approx(3 / 12)
    # relative AUROC on the decomposed verify set: the predictions are the gold labels, so the reference is
    # perfect (1.0 of 1.0) and a constant answer ranks nothing (0.5 of 1.0), over the same pairs
    ref, yes = result.scores["reference"], result.scores["yes"]
    assert ref["auroc_rel/pairs"] == yes["auroc_rel/pairs"] > 0
    assert (ref["auroc_rel/mean"], yes["auroc_rel/mean"]) == (pytest.approx(1.0), pytest.approx(0.5))
    # no paraphrase pools here: each item has one phrasing, so there is no pair to compare
    assert result.scores["prior_question_text"]["robustness/pairs"] == 0


def test_without_predictions_no_reference(inputs):
    from dataclasses import replace
    result = evaluate(replace(inputs, predictions=None), robustness_k=2)
    assert "reference" not in result.scores and result.scores["oracle"]["ehrxqa/accuracy"] == 1.0


def test_a_pretrained_backbone_is_scored_beside_the_reference_with_its_own_decision(inputs, evaluated):
    """Its predictions answer through the reference model's module under its own name, with the decision rule
    chosen on its own valid answers, and are ranked against the reference on the verify items; the reference's
    scores do not move, and without one the modules are those of test_every_module_scored_and_table_items_shared."""
    from dataclasses import replace

    alone = evaluated
    wrong = {(img, "right lung", "pleural effusion") for img in IMAGES["image_id"]}
    both = evaluate(replace(inputs, pretrained={"pretrained_resnet18": predictions(flip=wrong)}), min_positives=1,
                    robustness_k=2)
    assert set(both.scores) == set(alone.scores) | {"pretrained_resnet18"}
    assert both.scores["reference"] == alone.scores["reference"]
    assert list(both.scores)[:2] == ["reference", "pretrained_resnet18"]
    probe = both.scores["pretrained_resnet18"]
    # wrong where (right lung, pleural effusion) decides: items 0 and 9 (verify), 2 and 3 (which finding / where),
    # 10 (img21 now has an abnormality)
    assert probe["mimic_cxr_vqa/accuracy"] == pytest.approx(7 / 12) and probe["ehrxqa/n"] == inputs.ehrxqa_items.height
    assert probe["auroc_rel/pairs"] == both.scores["reference"]["auroc_rel/pairs"] and probe["auroc_rel/mean"] < 1
    assert set(both.decisions) == {"reference", "pretrained_resnet18"}
    assert {"reference", "pretrained_resnet18"} <= set(both.predictions["mimic-cxr-vqa"])


def test_prior_correction_moves_the_decision_to_the_prevalence():
    from ehrxqa_pipeline.vqa.evaluate import prior_corrected
    from ehrxqa_pipeline.vqa.predictions import IMAGES_SCHEMA, RELATIONS_SCHEMA, Predictions

    rel = pl.DataFrame({"image_id": ["a", "a", "b", "b"], "object": ["o", "o", "o", "o"],
                        "attribute": ["x", "y", "x", "y"], "prob": [0.05, 0.6, 0.01, 0.4]}, schema=RELATIONS_SCHEMA)
    prev = pl.DataFrame({"object": ["o"], "attribute": ["x"], "prevalence": [0.02]})
    out = prior_corrected(Predictions(rel, pl.DataFrame(schema=IMAGES_SCHEMA)), prev).relations
    p = dict(zip(zip(out["image_id"], out["attribute"]), out["prob"].to_list()))
    # odds(0.05) / odds(0.02) = (1/19) / (1/49) = 49/19 -> 49/68; 0.01 < 0.02 -> below 0.5; y has no prevalence
    assert p[("a", "x")] == pytest.approx(49 / 68, rel=1e-5) and p[("b", "x")] < 0.5
    assert (p[("a", "y")], p[("b", "y")]) == (pytest.approx(0.6), pytest.approx(0.4))


def test_per_item_predictions_rescored_from_files_give_the_same_scores(inputs, evaluated, tmp_path):
    """Each module's per-item answers, written as the scores asset writes them and scored by ``ehrxqa score``'s
    library against release files made from the same items, give the evaluation's numbers exactly."""
    import json

    from ehrxqa_pipeline.questions.ehrxqa.records import catalog_rows, release_record
    from ehrxqa_pipeline.questions.mimic_cxr_vqa.templates import TEMPLATES
    from ehrxqa_pipeline.vqa.prediction_files import write_module_predictions
    from ehrxqa_pipeline.vqa.score_file import score_file

    result = evaluated
    release = tmp_path / "release"
    test = inputs.questions.filter(pl.col("split") == "test")
    types = {t.key: t for t in TEMPLATES}
    mimic = [{"split": "test", "idx": i, "content_type": types[k].content_type,
              "semantic_type": types[k].semantic_type, "answer": a}
             for i, (k, a) in enumerate(zip(test["template_key"], test["answer"].to_list()))]
    (release / "mimic-cxr-vqa").mkdir(parents=True)
    (release / "mimic-cxr-vqa" / "test.json").write_text(json.dumps(mimic))
    (release / "ehrxqa").mkdir()
    (release / "ehrxqa" / "test.json").write_text(json.dumps(
        [release_record(r) for r in inputs.ehrxqa_items.to_dicts()]))
    (release / "ehrxqa" / "template_catalog.json").write_text(json.dumps(catalog_rows()))
    written = write_module_predictions(release, result.predictions)
    assert {p.parent.parent.name for p in written} == {"mimic-cxr-vqa", "ehrxqa"}
    assert set(result.predictions["ehrxqa"]) == set(result.predictions["mimic-cxr-vqa"]) == {
        "reference", "oracle", "yes", "prior_most", "prior_question"}
    assert 0 < result.scores["yes"]["ehrxqa/accuracy"] < 1 and 0 < result.scores["yes"]["mimic_cxr_vqa/accuracy"] < 1
    for path in written:
        dataset, module = path.parent.parent.name, path.stem
        got = score_file(path, release, dataset, "test")["scores"]
        want = {k: v for k, v in result.scores[module].items() if k.startswith(dataset.replace("-", "_") + "/")}
        assert got == want, (dataset, module)


def test_modules_that_read_no_pixels_never_look_for_the_jpegs(tmp_path, monkeypatch):
    """The constant, the priors and the label modules say ``reads_pixels = False``: answering them builds no
    file path (no stat of a JPEG per asked pair); a module that reads pixels gets the paths of the files there."""
    import polars as pl

    from ehrxqa_pipeline.questions.neuralsql import YesModule
    from ehrxqa_pipeline.questions.neuralsql.oracle import LabelModule
    from ehrxqa_pipeline.questions.neuralsql.vqa_modules import reads_pixels
    from ehrxqa_pipeline.vqa import modules
    from ehrxqa_pipeline.vqa.baselines import PriorMost, PriorQuestion, PriorQuestionText

    assert not any(reads_pixels(m) for m in (YesModule(), PriorMost, PriorQuestion, PriorQuestionText, LabelModule))
    roots = []
    monkeypatch.setattr(modules, "image_refs", lambda ids, images, root=None: roots.append(root) or [
        modules.ImageRef(1, i, 2, None) for i in ids])
    questions = pl.DataFrame({"template_key": ["gender_1"], "image_id": ["a"]})

    class Looks:
        name = "looks"

        def __call__(self, images, questions):
            return [True] * len(questions)

    monkeypatch.setattr("ehrxqa_pipeline.vqa.baselines.question_texts", lambda q: pl.Series(["is this female?"]))
    images = pl.DataFrame({"image_id": ["a"], "subject_id": [2], "study_id": [1]})
    assert modules.answer_mimic_cxr_vqa(YesModule(), questions, images=images, images_root=tmp_path) == [["yes"]]
    assert modules.answer_mimic_cxr_vqa(Looks(), questions, images=images, images_root=tmp_path) == [["yes"]]
    assert roots == [None, tmp_path]

    from ehrxqa_pipeline.vqa.robustness import paraphrase_robustness  # the phrasings' refs: the same rule
    phrased = pl.DataFrame({"item": [0, 0], "question": ["is this female?", "is the patient female?"],
                            "image_id": ["a", "a"]})
    roots.clear()
    paraphrase_robustness({"text": PriorQuestionText.fit(pl.DataFrame(
        {"split": ["train"], "template_key": ["gender_1"], "question": ["is this female?"], "answer": [["yes"]]}))},
        phrased, images=images, images_root=tmp_path)
    paraphrase_robustness({"looks": Looks()}, phrased, images=images, images_root=tmp_path)
    assert roots == [None, tmp_path]


def test_the_table_items_runs_are_kept_while_the_tables_their_queries_name_are_unchanged(inputs, evaluated,
                                                                                       tmp_path, ran):
    """With a memo, a table item's query (run once, with no VQA module, for every module) runs again only when it
    is new or a table it names changed: a stale answer runs nothing and its outcome follows; an EHR table edit runs
    the queries that name the table, and the scores equal those of a run without a memo."""
    import re
    import shutil
    from dataclasses import replace

    import ehrxqa_pipeline.vqa.scoring as sc

    table = inputs.ehrxqa_items.filter(pl.col("scope").str.starts_with("TABLE"))
    queries = {r["query"] for r in sc._items(table) if not r["impossible"]}
    kept = replace(inputs, memo=tmp_path / "scores.json")
    first = evaluate(kept, min_positives=1, robustness_k=2)
    assert ran.count(None) == len(queries) > 3
    ran.clear()
    again = evaluate(kept, min_positives=1, robustness_k=2)
    assert ran.count(None) == 0 and len(ran) == 0  # the modules' image items kept too
    ehrxqa = _ehrxqa_details
    assert ehrxqa(again) == ehrxqa(first) and again.predictions == first.predictions and again.scores == first.scores
    assert ehrxqa(again) == ehrxqa(evaluated)  # as without a memo

    first_table = table.row(0, named=True)  # a stale answer: nothing runs, and the outcome follows
    stale = inputs.ehrxqa_items.with_columns(answer=pl.when(pl.col("id") == first_table["id"]).then(pl.lit("[12345]"))
                                             .otherwise(pl.col("answer")))
    changed = evaluate(replace(kept, ehrxqa_items=stale), min_positives=1, robustness_k=2)
    assert ran.count(None) == 0
    assert changed.scores["yes"]["ehrxqa/n"] == first.scores["yes"]["ehrxqa/n"]
    assert changed.details["yes"]["ehrxqa"]["correct"] == first.details["yes"]["ehrxqa"]["correct"] - 1

    edited = tmp_path / "edited.db"  # an EHR table edit (in a copy): the table queries that name it run again
    shutil.copy(inputs.gold_database, edited)
    with sqlite3.connect(edited) as c:
        c.execute("UPDATE admissions SET insurance = 'edited'")
    naming = {q for q in queries if re.search(r"(?i)\badmissions\b", q)}
    assert 0 < len(naming) < len(queries)
    ran.clear()
    moved = replace(kept, gold_database=edited, answer_sheet=edited)
    after = evaluate(moved, min_positives=1, robustness_k=2)
    assert ran.count(None) == len(naming)
    assert ehrxqa(after) == ehrxqa(evaluate(replace(moved, memo=None), min_positives=1, robustness_k=2))


def test_the_priors_are_fitted_again_only_when_what_they_are_fitted_from_changes(inputs, evaluated, tmp_path,
                                                                                monkeypatch):
    """With a memo, the fitted priors are read back while the train and valid questions, the pairs and the code
    are those they were fitted from (a gold edit changes none of them), with the scores of fitting them; an
    edited train answer fits them again, with the scores of an evaluation without a memo."""
    from dataclasses import replace

    import ehrxqa_pipeline.vqa.evaluate as ev

    fits, real = [], ev.fit_priors

    def spy(*args):
        fits.append(args[0].height)
        return real(*args)
    monkeypatch.setattr(ev, "fit_priors", spy)
    kept = replace(inputs, memo=tmp_path / "scores.json")
    first, again = (evaluate(kept, min_positives=1, robustness_k=2) for _ in range(2))
    assert len(fits) == 1
    assert again.scores == first.scores == evaluated.scores and again.predictions == evaluated.predictions

    q = inputs.questions.with_row_index("_r")
    train = q.filter(pl.col("split") == "train")["_r"][0]
    edited = q.with_columns(answer=pl.when(pl.col("_r") == train).then(pl.lit(["no"])).otherwise("answer")).drop("_r")
    assert edited["answer"].to_list() != inputs.questions["answer"].to_list()
    changed = evaluate(replace(kept, questions=edited), min_positives=1, robustness_k=2)
    assert len(fits) == 2
    assert changed.scores == evaluate(replace(inputs, questions=edited), min_positives=1, robustness_k=2).scores


def _ehrxqa_details(e) -> dict:
    """Each module's EHRXQA result but the counts of what it was asked in that run (fewer with runs kept)."""
    return {m: {k: v for k, v in d["ehrxqa"].items() if k not in ("vqa_asked", "vqa_abstentions")}
            for m, d in e.details.items() if "ehrxqa" in d}


@pytest.fixture
def ran(monkeypatch) -> list:
    """The name of the VQA module of every NeuralSQL query ``score_ehrxqa`` runs, in order (``scoring._run``)."""
    import ehrxqa_pipeline.vqa.scoring as sc

    out, real = [], sc._run

    def run(executor, query):
        out.append(getattr(executor.vqa, "name", None))
        return real(executor, query)
    monkeypatch.setattr(sc, "_run", run)
    return out


def test_each_modules_image_item_runs_are_kept_while_what_it_answers_from_is_unchanged(inputs, evaluated, tmp_path,
                                                                                      ran):
    """With a memo, a module runs an image item's query again only when the query is new to it or what it
    answers from changed (the answer sheet, its fitted questions, a trained model's predictions); the outcome is
    decided again against the item's answer now. Results equal those of a run without a memo."""
    from dataclasses import replace

    import ehrxqa_pipeline.vqa.scoring as sc

    image = inputs.ehrxqa_items.filter(~pl.col("scope").str.starts_with("TABLE"))
    queries = len({r["query"] for r in sc._items(image) if not r["impossible"]})
    modules = ("reference", "oracle", "yes", "prior_most", "prior_question")
    kept = replace(inputs, memo=tmp_path / "scores_memo.json")
    first = evaluate(kept, min_positives=1, robustness_k=2)
    assert {m: ran.count(m) for m in modules} == dict.fromkeys(modules, queries) and queries > 5
    ran.clear()
    written = kept.memo.stat().st_ino  # the memo is replaced (a new inode) whenever it is written
    again = evaluate(kept, min_positives=1, robustness_k=2)
    assert ran == []  # every run kept, the table items' too
    assert kept.memo.stat().st_ino == written  # and, with nothing new to keep, the file is not written again
    fresh = evaluated
    assert again.scores == first.scores == fresh.scores and again.predictions == fresh.predictions
    assert _ehrxqa_details(again) == _ehrxqa_details(fresh)

    # an image item's answer changed (a gold label edit): nothing runs, and the oracle is now wrong on it
    item = next(r for r in sc._items(image) if not r["impossible"])
    stale = inputs.ehrxqa_items.with_columns(answer=pl.when(pl.col("id") == item["id"]).then(pl.lit("[12345]"))
                                             .otherwise(pl.col("answer")))
    ran.clear()
    edited = evaluate(replace(kept, ehrxqa_items=stale), min_positives=1, robustness_k=2)
    assert ran == []
    assert edited.details["oracle"]["ehrxqa"]["correct"] == first.details["oracle"]["ehrxqa"]["correct"] - 1
    assert _ehrxqa_details(edited) == _ehrxqa_details(evaluate(replace(inputs, ehrxqa_items=stale),
                                                               min_positives=1, robustness_k=2))

    # the reference model's predictions changed: it alone runs its queries again
    ran.clear()
    image_id, obj, attribute = POSITIVES.row(0)
    other = replace(kept, predictions=predictions(probs={(image_id, obj, attribute): 0.0}))
    moved = evaluate(other, min_positives=1, robustness_k=2)
    assert ran == ["reference"] * queries
    assert _ehrxqa_details(moved) == _ehrxqa_details(evaluate(replace(other, memo=None), min_positives=1,
                                                              robustness_k=2))

    # an EHR table that some image queries name edited (in a copy): each module runs those queries again, and only
    # those; the oracle, which answers from the answer sheet (here the same file), all of them
    import re
    import shutil

    edited = tmp_path / "edited.db"
    shutil.copy(inputs.gold_database, edited)
    with sqlite3.connect(edited) as c:
        c.execute("UPDATE admissions SET insurance = 'edited'")
    naming = {r["query"] for r in sc._items(image) if not r["impossible"] and re.search(r"(?i)\badmissions\b",
                                                                                         r["query"])}
    assert 0 < len(naming) < queries
    ran.clear()
    changed = replace(other, gold_database=edited, answer_sheet=edited)  # (the reference as last kept)
    after = evaluate(changed, min_positives=1, robustness_k=2)
    assert {m: ran.count(m) for m in modules} == {**dict.fromkeys(modules, len(naming)), "oracle": queries}
    assert _ehrxqa_details(after) == _ehrxqa_details(evaluate(replace(changed, memo=None), min_positives=1,
                                                              robustness_k=2))

    # patients edited: the oracle answers sex questions from it, named or not, so every query runs again
    with sqlite3.connect(edited) as c:
        c.execute("UPDATE patients SET gender = CASE gender WHEN 'm' THEN 'f' ELSE 'm' END")
    ran.clear()
    flipped = evaluate(changed, min_positives=1, robustness_k=2)
    assert {m: ran.count(m) for m in modules} == dict.fromkeys(modules, queries)
    assert _ehrxqa_details(flipped) == _ehrxqa_details(evaluate(replace(changed, memo=None), min_positives=1,
                                                                robustness_k=2))


def test_the_oracle_takes_its_image_item_runs_from_the_consistency_check(inputs, evaluated, tmp_path, ran,
                                                                        monkeypatch):
    """The gold consistency check keeps each image item's NeuralSQL run with the oracle (``check_stored``,
    ``oracle_runs``): the scores' oracle then runs none of them and scores what running them gives. Against
    other files (a label edited since the check) it runs them itself."""
    import shutil
    from dataclasses import replace

    import ehrxqa_pipeline.vqa.scoring as sc
    from ehrxqa_pipeline.questions.ehrxqa.records import check_stored
    from ehrxqa_pipeline.questions.ehrxqa.sampling import DatabaseFiles

    runs = tmp_path / "oracle_runs.json"
    files = DatabaseFiles(inputs.gold_database, inputs.answer_sheet)
    assert check_stored(inputs.ehrxqa_items, {"gold": files}, oracle_runs=runs) == []
    checked = evaluate(replace(inputs, oracle_runs=runs), min_positives=1, robustness_k=2)
    image = inputs.ehrxqa_items.filter(~pl.col("scope").str.starts_with("TABLE"))
    queries = len({r["query"] for r in sc._items(image) if not r["impossible"]})
    assert "oracle" not in ran and ran.count("yes") == queries > 5
    fresh = evaluated
    assert checked.scores == fresh.scores and checked.predictions == fresh.predictions
    assert _ehrxqa_details(checked) == _ehrxqa_details(fresh)

    import ehrxqa_pipeline.vqa.evaluate as ev
    made = []
    monkeypatch.setattr(ev, "OracleModule", lambda *a, **k: made.append(1) or OracleModule(*a, **k))
    untrained = evaluate(replace(inputs, predictions=None, oracle_runs=runs), min_positives=1, robustness_k=2)
    assert made == [] and _ehrxqa_details(untrained)["oracle"] == _ehrxqa_details(fresh)["oracle"]  # sheet not loaded
    assert ev.SheetOracle(inputs.answer_sheet, inputs.gold_database).labels is not None and made == [1]  # (the spy)

    edited = tmp_path / "edited.db"  # one relation flipped: other files than those the check ran on
    shutil.copy(inputs.gold_database, edited)
    with sqlite3.connect(edited) as c:
        c.execute("UPDATE tb_cxr_plus SET relation = 1 - relation WHERE row_id = 0")
    ran.clear()
    evaluate(replace(inputs, gold_database=edited, answer_sheet=edited, oracle_runs=runs), min_positives=1,
             robustness_k=2)
    assert ran.count("oracle") == ran.count("yes") == queries


def test_a_module_that_runs_few_queries_passes_over_them_alone_with_the_same_results(inputs, tmp_path, monkeypatch):
    """One image item swapped for an item of another filling (a new query): with the others kept, each module
    runs that one query, its executor passing over it alone instead of over every item's first pass; the
    results equal those of a run without a memo, where every module runs every query with the shared pass."""
    from dataclasses import replace

    import ehrxqa_pipeline.vqa.scoring as sc

    kept = replace(inputs, memo=tmp_path / "scores_memo.json")
    evaluate(kept, min_positives=1, robustness_k=2)
    conn = sqlite3.connect(inputs.gold_database)
    try:
        others = [f for f in fill_items(conn, 7, CATALOG[::5]) if f.template.scope.startswith("IMAGE-SINGLE")]
    finally:
        conn.close()
    new = next(f for f in others if f.neural_sql not in set(inputs.ehrxqa_items["neural_sql"]))
    row = inputs.ehrxqa_items.filter(pl.col("template_index") == new.template.index).row(0, named=True)
    swapped = inputs.ehrxqa_items.with_columns(
        neural_sql=pl.when(pl.col("id") == row["id"]).then(pl.lit(new.neural_sql)).otherwise(pl.col("neural_sql")),
        answer=pl.when(pl.col("id") == row["id"]).then(pl.lit(json.dumps(new.answer))).otherwise(pl.col("answer")))
    passes, real = [], sc.NeuralSqlExecutor.first_pass

    def first_pass(self, queries):
        queries = list(queries)
        passes.append(len(queries))
        return real(self, queries)
    monkeypatch.setattr(sc.NeuralSqlExecutor, "first_pass", first_pass)
    again = evaluate(replace(kept, ehrxqa_items=swapped), min_positives=1, robustness_k=2)
    assert passes and set(passes) == {1}  # no module took the first pass over every query
    fresh = evaluate(replace(inputs, ehrxqa_items=swapped), min_positives=1, robustness_k=2)
    assert again.scores == fresh.scores and again.predictions == fresh.predictions
    assert _ehrxqa_details(again) == _ehrxqa_details(fresh)
