"""``ehrxqa score``: a file of per-item predictions scored against a built release's split file, with the
paper's metrics and the comparisons the scores asset uses (so the two give the same numbers).

Grain: one score report per (predictions file, dataset, split). Sources: ``release/<dataset>/<split>.json``
(the gold answers; MIMIC-CXR-VQA: each record's ``content_type`` and ``semantic_type``; EHRXQA: each record's
``query``, ``q_tag`` and ``is_impossible``) and ``release/ehrxqa/template_catalog.json`` (each ``q_tag``'s
modality and patient scope); the predictions file (``prediction_files.read_predictions``).

- MIMIC-CXR-VQA: accuracy (exact set match) and micro F1 over answer words, overall, per content type and
  per semantic type (``scoring.score_mimic_cxr_vqa``, as the scores asset; ``null`` is an abstention).
- EHRXQA: execution accuracy Acc_EX overall, per modality (image, table, image+table), per patient scope
  (none, single, group) and per modality x patient scope (paper Table E16), over the answerable items; each
  item decided by ``scoring.ehrxqa_outcome`` (as multisets, in order only when the query has a root ORDER BY;
  an answer that is null or has a null in it and is wrong counts as an abstention).
- EHRXQA with the opt-in unanswerable items (some ``is_impossible`` true): EHRSQL's reliability score RS(c)
  for c in 0, 5, 10 and N (N = the number of items), over all items: +1 for a correct answer to an answerable
  item and for an abstention (answer null) on an unanswerable one, -c for a wrong answer to an answerable item
  and for any answer to an unanswerable one, 0 for an abstention on an answerable item; divided by N.

``scores`` in the result holds the leaderboard's metric names (``leaderboard.module_scores``), so a module's
entry of ``release/scores.json`` can be compared with the score of its file in ``release/predictions/``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import polars as pl

from ehrxqa_pipeline.markdown import table
from ehrxqa_pipeline.questions.ehrxqa.stats import scope_axes
from ehrxqa_pipeline.questions.neuralsql import NeuralSqlError, same_answer
from ehrxqa_pipeline.questions.neuralsql.parser import parse_neuralsql
from ehrxqa_pipeline.vqa.leaderboard import PATIENT_SCOPES, module_scores
from ehrxqa_pipeline.vqa.metrics import execution_accuracy
from ehrxqa_pipeline.vqa.prediction_files import DATASETS, EHRXQA, MIMIC_CXR_VQA, read_predictions
from ehrxqa_pipeline.vqa.scoring import ehrxqa_outcome, score_mimic_cxr_vqa, summarise_ehrxqa

RS_PENALTIES = ("0", "5", "10", "N")
CATALOG_FILE = "template_catalog.json"


class ReleaseError(ValueError):
    """The release folder lacks what scoring needs; the message names the file and the fix."""


def release_split(release_dir: str | Path, dataset: str, split: str) -> tuple[Path, list[dict]]:
    """(path, records) of ``release/<dataset>/<split>.json``."""
    if dataset not in DATASETS:
        raise ReleaseError(f"unknown dataset {dataset!r}: expected one of {', '.join(DATASETS)}")
    path = Path(release_dir) / dataset / f"{split}.json"
    if not path.is_file():
        raise ReleaseError(f"{path}: no such release file; build the release (ehrxqa build) or pass --release "
                           "with the folder that holds mimic-cxr-vqa/ and ehrxqa/")
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ReleaseError(f"{path} cannot be read as a release split file: {err}") from None
    return path, records


def _ids(records: Sequence[Mapping], dataset: str) -> list[int]:
    return [int(r["idx"] if dataset == MIMIC_CXR_VQA else r["id"]) for r in records]


# -- MIMIC-CXR-VQA ------------------------------------------------------------------------------------------
def score_mimic_records(records: Sequence[Mapping], answers: Mapping[int, list | None]) -> dict:
    """``scoring.score_mimic_cxr_vqa`` over released records, one answer per record by its ``idx``."""
    frame = pl.DataFrame({"content_type": [r["content_type"] for r in records],
                          "semantic_type": [r["semantic_type"] for r in records],
                          "answer": [list(r["answer"]) for r in records]},
                         schema={"content_type": pl.String, "semantic_type": pl.String, "answer": pl.List(pl.String)})
    pred = pl.Series([answers[int(r["idx"])] for r in records], dtype=pl.List(pl.String))
    return score_mimic_cxr_vqa(frame, pred)


# -- EHRXQA ---------------------------------------------------------------------------------------------------
def _catalog(release_dir: Path) -> dict[str, dict]:
    path = release_dir / EHRXQA / CATALOG_FILE
    if not path.is_file():
        raise ReleaseError(f"{path}: no such file; it gives each template's modality and patient scope (written by "
                           "ehrxqa/catalog): build the release or pass --release with a complete release folder")
    return {row["question_template"]: row for row in json.loads(path.read_text(encoding="utf-8")).values()}


def _axes(record: Mapping, catalog: Mapping[str, dict]) -> tuple[str, str]:
    row = catalog.get(record["q_tag"])
    if row is None:
        raise ReleaseError(f"ehrxqa record id {record['id']}: its q_tag {record['q_tag']!r} is not in "
                           f"{CATALOG_FILE}; the split file and the catalog come from different builds")
    axes = scope_axes(row["scope"]) if row.get("scope") else row
    return axes["modality"], axes["patient_scope"]


def _ordered(record: Mapping, answer: list, gold: list) -> bool:
    """Whether the query has a root ORDER BY, parsed only where it decides (equal as multisets, not in order)."""
    if same_answer(answer, gold, ordered=True) or not same_answer(answer, gold):
        return False
    try:
        return parse_neuralsql(record["query"]).ordered
    except NeuralSqlError as err:
        raise ReleaseError(f"ehrxqa record id {record['id']}: its query does not parse ({err})") from None


def reliability_scores(rows: Sequence[tuple[bool, str]]) -> dict[str, float | None]:
    """RS(c) for c in ``RS_PENALTIES`` from (impossible, kind) per item, kind ``correct`` / ``wrong`` /
    ``abstain`` (answerable) or ``abstain`` / ``answered`` (unanswerable); see the module docstring."""
    n = len(rows)
    if not n:
        return {c: None for c in RS_PENALTIES}
    good = sum(1 for imp, k in rows if (not imp and k == "correct") or (imp and k == "abstain"))
    bad = sum(1 for imp, k in rows if (not imp and k == "wrong") or (imp and k == "answered"))
    return {c: (good - (n if c == "N" else int(c)) * bad) / n for c in RS_PENALTIES}


def score_ehrxqa_records(records: Sequence[Mapping], answers: Mapping[int, list | None],
                         catalog: Mapping[str, dict]) -> dict:
    """Acc_EX (``scoring.summarise_ehrxqa`` plus ``by_patient_scope``) over the answerable records, and, when
    some record is unanswerable, ``reliability`` (RS(c)) over all of them."""
    triples, rs_rows = [], []
    for r in records:
        answer = answers[int(r["id"])]
        if r.get("is_impossible"):
            rs_rows.append((True, "abstain" if answer is None else "answered"))
            continue
        gold = list(r["answer"])
        ordered = answer is not None and _ordered(r, answer, gold)
        outcome = ehrxqa_outcome(answer, gold, ordered=ordered)
        modality, scope = _axes(r, catalog)
        triples.append((modality, scope, outcome))
        rs_rows.append((False, "abstain" if answer is None else ("correct" if outcome == "correct" else "wrong")))
    out = summarise_ehrxqa(triples)
    out["by_patient_scope"] = {s: execution_accuracy(o for _, ss, o in triples if ss == s)
                               for s in PATIENT_SCOPES if any(ss == s for _, ss, _ in triples)}
    impossible = sum(imp for imp, _ in rs_rows)
    out["unanswerable"] = impossible
    if impossible:
        out["reliability"] = {"n": len(rs_rows), "rs": reliability_scores(rs_rows),
                              "abstained_unanswerable": sum(1 for imp, k in rs_rows if imp and k == "abstain"),
                              "abstained_answerable": sum(1 for imp, k in rs_rows if not imp and k == "abstain")}
    return out


# -- the command ----------------------------------------------------------------------------------------------
def score_file(predictions: str | Path, release_dir: str | Path, dataset: str = EHRXQA, split: str = "test") -> dict:
    """Score a predictions file against ``release_dir``'s split file (see the module docstring). Raises
    ``ReleaseError`` / ``PredictionsError`` with a message naming the file and the fix."""
    release_dir = Path(release_dir)
    path, records = release_split(release_dir, dataset, split)
    ids = _ids(records, dataset)
    answers = read_predictions(predictions, dataset, ids, split)
    out = {"predictions": str(predictions), "release": str(path), "dataset": dataset, "split": split}
    if dataset == MIMIC_CXR_VQA:
        result = score_mimic_records(records, answers)
        return {**out, **result, "scores": module_scores(mimic=result)}
    result = score_ehrxqa_records(records, answers, _catalog(release_dir))
    return {**out, **result, "scores": module_scores(ehrxqa=result)}


def _pct(value) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def format_report(result: Mapping) -> str:
    """The scores as Markdown tables (percentages, as the paper reports them)."""
    head = [f"{result['predictions']} scored against {result['release']}", ""]
    if result["dataset"] == MIMIC_CXR_VQA:
        rows = [["all", result["n"], _pct(result["accuracy"]), _pct(result["micro_f1"])]]
        for axis in ("content_type", "semantic_type"):
            rows += [[f"{axis.replace('_', ' ')}: {k}", b["n"], _pct(b["accuracy"]), _pct(b["micro_f1"])]
                     for k, b in result[f"by_{axis}"].items()]
        body = [table(["items", "n", "Acc", "F1 (micro)"], rows), "",
                f"abstentions (answer null): {result['abstentions']}"]
        return "\n".join(head + body) + "\n"
    rows = [["all", "", result["n"], result["correct"], _pct(result["accuracy"])]]
    rows += [[m, "", b["n"], b["correct"], _pct(b["accuracy"])] for m, b in result["by_modality"].items()]
    rows += [["", s, b["n"], b["correct"], _pct(b["accuracy"])] for s, b in result["by_patient_scope"].items()]
    for key, b in result["by_modality_scope"].items():
        m, s = key.split("/")
        rows.append([m, s, b["n"], b["correct"], _pct(b["accuracy"])])
    body = [table(["modality", "patient scope", "n", "correct", "Acc_EX"], rows), "",
            f"answerable items: {result['n']} (abstentions: {result['abstentions']}); unanswerable items: "
            f"{result['unanswerable']}"]
    if "reliability" in result:
        rel = result["reliability"]
        body += ["", table([f"RS({c})" for c in RS_PENALTIES], [[_pct(rel["rs"][c]) for c in RS_PENALTIES]]), "",
                 f"over {rel['n']} items; abstained on {rel['abstained_unanswerable']} of {result['unanswerable']} "
                 f"unanswerable and {rel['abstained_answerable']} answerable items"]
    return "\n".join(head + body) + "\n"

