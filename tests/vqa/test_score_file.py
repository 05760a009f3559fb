"""``ehrxqa score`` on hand-made release folders: every metric derived by hand (MIMIC-CXR-VQA Acc and micro F1
per content / semantic type; EHRXQA Acc_EX per modality and patient scope, an ORDER BY query compared in order;
RS(c) with a planted abstention on an answerable item and two unanswerable items), each malformed predictions
file refused with exit 2 and a message naming the file and the ids, and the per-item prediction files written
as the scores asset writes them."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from ehrxqa_pipeline.cli import main
from ehrxqa_pipeline.vqa.prediction_files import (PredictionsError, predictions_json, read_predictions,
                                                  write_module_predictions)
from ehrxqa_pipeline.vqa.score_file import reliability_scores, score_file

CATALOG = {"0": {"question_template": "how many patients?", "scope": "TABLE-NONE"},
           "1": {"question_template": "which names, sorted?", "scope": "TABLE-NONE"},
           "2": {"question_template": "what did patient {patient_id} get?", "scope": "TABLE-SINGLE"},
           "3": {"question_template": "is there ${attribute}?", "scope": "IMAGE-SINGLE-1"},
           "4": {"question_template": "which patients with ${attribute} got {drug}?", "scope": "MULTIMODAL-GROUP"}}


def _ehrxqa(i, q_tag, query, answer, impossible=False):
    return {"db_id": "mimic_iv_cxr", "split": "test", "id": i, "question": q_tag, "template": q_tag, "query": query,
            "q_tag": q_tag, "is_impossible": impossible, "answer": answer}


EHRXQA_RECORDS = [
    _ehrxqa(0, "how many patients?", "select count(*) from patients", [3]),
    _ehrxqa(1, "which names, sorted?", "select name from t order by name", ["a", "b"]),
    _ehrxqa(2, "what did patient {patient_id} get?", "select drug from t where subject_id = 1", ["a", "b"]),
    _ehrxqa(3, "is there ${attribute}?", 'select func_vqa("is there x?", t.study_id) from t', [1]),
    _ehrxqa(4, "is there ${attribute}?", 'select func_vqa("is there y?", t.study_id) from t', [1]),
    _ehrxqa(5, "which patients with ${attribute} got {drug}?", "select subject_id, drug from t", [[1, "x"]]),
    _ehrxqa(6, "what is the blood type of patient 1?", None, [], impossible=True),
    _ehrxqa(7, "which ward was patient 2 in?", None, [], impossible=True),
]
# correct (3 == 3.0), wrong (ORDER BY: order counts), correct (no ORDER BY: as multisets), wrong, abstain,
# correct (a two-column row), abstain on an unanswerable item, an answer ([]) to an unanswerable item
EHRXQA_PREDICTIONS = [[3.0], ["b", "a"], ["b", "a"], [0], None, [[1, "x"]], None, []]


def _mimic(i, content, semantic, answer):
    return {"split": "test", "idx": i, "question": "q", "semantic_type": semantic, "content_type": content,
            "answer": answer}


MIMIC_RECORDS = [_mimic(0, "presence", "verify", ["yes"]), _mimic(1, "presence", "verify", ["no"]),
                 _mimic(2, "anatomy", "query", ["left lung", "right lung"]),
                 _mimic(3, "anatomy", "query", ["left lung"]),
                 _mimic(4, "attribute", "choose", ["a"]), _mimic(5, "anatomy", "choose", ["right lung"])]
MIMIC_PREDICTIONS = [["yes"], ["yes"], ["right lung", "left lung"], ["left lung", "right lung"], None,
                     ["right lung", "right lung"]]


@pytest.fixture
def release(tmp_path):
    root = tmp_path / "release"
    (root / "ehrxqa").mkdir(parents=True)
    (root / "mimic-cxr-vqa").mkdir()
    (root / "ehrxqa" / "test.json").write_text(json.dumps(EHRXQA_RECORDS))
    (root / "ehrxqa" / "template_catalog.json").write_text(json.dumps(CATALOG))
    (root / "mimic-cxr-vqa" / "test.json").write_text(json.dumps(MIMIC_RECORDS))
    return root


def _write(path, answers, ids=None):
    ids = range(len(answers)) if ids is None else ids
    path.write_text(json.dumps([{"id": i, "answer": a} for i, a in zip(ids, answers)]))
    return path


def _block(n, correct, abstentions=0):
    return {"n": n, "correct": correct, "accuracy": correct / n, "abstentions": abstentions, "errors": 0}


def test_ehrxqa_acc_ex_by_modality_and_patient_scope_by_hand(release, tmp_path):
    r = score_file(_write(tmp_path / "p.json", EHRXQA_PREDICTIONS), release, "ehrxqa", "test")
    assert {k: r[k] for k in ("n", "correct", "accuracy", "abstentions", "errors")} == _block(6, 3, 1)
    assert r["by_modality"] == {"image": _block(2, 0, 1), "table": _block(3, 2), "image+table": _block(1, 1)}
    assert r["by_patient_scope"] == {"none": _block(2, 1), "single": _block(3, 1, 1), "group": _block(1, 1)}
    assert r["by_modality_scope"] == {"image/single": _block(2, 0, 1), "table/none": _block(2, 1),
                                      "table/single": _block(1, 1), "image+table/group": _block(1, 1)}
    assert r["unanswerable"] == 2
    # RS over 8 items: +1 for 3 correct answers and 1 abstention on an unanswerable item; -c for 2 wrong answers
    # and 1 answer to an unanswerable item; 0 for the abstention on answerable item 4
    rel = r["reliability"]
    assert rel["n"] == 8 and (rel["abstained_unanswerable"], rel["abstained_answerable"]) == (1, 1)
    assert rel["rs"] == {"0": 4 / 8, "5": (4 - 15) / 8, "10": (4 - 30) / 8, "N": (4 - 24) / 8}
    assert r["scores"]["ehrxqa/accuracy"] == 0.5 and r["scores"]["ehrxqa/accuracy/table/none"] == 0.5


def test_no_reliability_score_without_unanswerable_items(release, tmp_path):
    records = [r for r in EHRXQA_RECORDS if not r["is_impossible"]]
    (release / "ehrxqa" / "test.json").write_text(json.dumps(records))
    r = score_file(_write(tmp_path / "p.json", EHRXQA_PREDICTIONS[:6]), release)
    assert "reliability" not in r and r["unanswerable"] == 0 and r["accuracy"] == 0.5


def test_reliability_score_definition():
    rows = [(False, "correct"), (False, "wrong"), (False, "abstain"), (True, "abstain"), (True, "answered")]
    assert reliability_scores(rows) == {"0": 2 / 5, "5": (2 - 10) / 5, "10": (2 - 20) / 5, "N": (2 - 10) / 5}
    assert reliability_scores([(False, "correct")] * 3) == {"0": 1.0, "5": 1.0, "10": 1.0, "N": 1.0}


def test_mimic_cxr_vqa_acc_and_micro_f1_by_hand(release, tmp_path):
    r = score_file(_write(tmp_path / "p.json", MIMIC_PREDICTIONS), release, "mimic-cxr-vqa")
    # TP/FP/FN per item: (1,0,0) (0,1,1) (2,0,0) (1,1,0) (0,0,1) (1,0,0) -> F1 = 2*5 / (2*5 + 2 + 2)
    assert (r["n"], r["accuracy"], r["abstentions"]) == (6, 0.5, 1)
    assert Fraction(r["micro_f1"]).limit_denominator(100) == Fraction(5, 7)
    anatomy = {"n": 3, "accuracy": pytest.approx(2 / 3), "micro_f1": pytest.approx(8 / 9)}
    assert r["by_content_type"] == {"presence": {"n": 2, "accuracy": 0.5, "micro_f1": 0.5}, "anatomy": anatomy,
                                    "attribute": {"n": 1, "accuracy": 0.0, "micro_f1": 0.0}}
    assert r["by_semantic_type"] == {"verify": {"n": 2, "accuracy": 0.5, "micro_f1": 0.5},
                                     "choose": {"n": 2, "accuracy": 0.5, "micro_f1": pytest.approx(2 / 3)},
                                     "query": {"n": 2, "accuracy": 0.5, "micro_f1": pytest.approx(6 / 7)}}
    assert r["scores"]["mimic_cxr_vqa/accuracy/anatomy"] == pytest.approx(2 / 3)


def test_cli_prints_the_report_and_json(release, tmp_path, capsys):
    path = _write(tmp_path / "p.json", EHRXQA_PREDICTIONS)
    assert main(["score", str(path), "--release", str(release)]) == 0
    out = capsys.readouterr().out
    assert "| all |  | 6 | 3 | 50.0 |" in out and "| RS(0) | RS(5) | RS(10) | RS(N) |" in out
    assert "| 50.0 | -137.5 | -325.0 | -250.0 |" in out
    assert main(["score", str(path), "--release", str(release), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["reliability"]["rs"]["0"] == 0.5
    home = tmp_path / "home"
    home.mkdir()
    release.rename(home / "release")  # the default: EHRXQA_HOME/release (--home overrides it)
    assert main(["score", str(path), "--home", str(home), "--dataset", "ehrxqa", "--split", "test"]) == 0


def _error(capsys, path, release, *args) -> str:
    assert main(["score", str(path), "--release", str(release), *args]) == 2
    err = capsys.readouterr().err
    assert str(path) in err, err
    return err


def test_unknown_ids_named(release, tmp_path, capsys):
    path = _write(tmp_path / "p.json", EHRXQA_PREDICTIONS + [[1]] * 7, ids=[*range(8), *range(100, 107)])
    err = _error(capsys, path, release)
    assert "7 ids are not in ehrxqa/test.json: 100, 101, 102, 103, 104 and 2 more" in err


def test_missing_items_counted_and_listed(release, tmp_path, capsys):
    path = _write(tmp_path / "p.json", EHRXQA_PREDICTIONS[:1])
    err = _error(capsys, path, release)
    assert "7 of the 8 items of ehrxqa/test.json have no prediction: ids 1, 2, 3, 4, 5 and 2 more" in err


def test_duplicate_ids_named(release, tmp_path, capsys):
    path = _write(tmp_path / "p.json", EHRXQA_PREDICTIONS + [[3], [3]], ids=[*range(8), 2, 5])
    assert "2 ids appear more than once: 2, 5" in _error(capsys, path, release)


def test_malformed_answers_named(release, tmp_path, capsys):
    answers = list(EHRXQA_PREDICTIONS)
    answers[1], answers[4] = "a", 3
    assert "2 answers are not a list: ids 1, 4" in _error(capsys, _write(tmp_path / "p.json", answers), release)
    answers = list(MIMIC_PREDICTIONS)
    answers[0] = [1]
    err = _error(capsys, _write(tmp_path / "m.json", answers), release, "--dataset", "mimic-cxr-vqa")
    assert "1 answer is not a list of strings: ids 0" in err


def test_not_json_and_not_a_list(release, tmp_path, capsys):
    path = tmp_path / "p.json"
    path.write_text('[{"id": 0, "answer": [1]},')
    assert "is not JSON: Expecting value at line 1 column 27" in _error(capsys, path, release)
    path.write_text('{"0": [1]}')
    assert "holds a JSON dict, not an array" in _error(capsys, path, release)
    path.write_text('[{"id": 0}, [1], {"id": "x", "answer": []}]')
    err = _error(capsys, path, release)
    assert '2 entries are not objects with "id" and "answer" (positions 0, 1' in err
    assert "1 id is not an integer: 'x'" in err


def test_missing_release_file_named(tmp_path, capsys):
    path = _write(tmp_path / "p.json", [[1]])
    assert main(["score", str(path), "--release", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "nowhere" / "ehrxqa" / "test.json") in err and "no such release file" in err


def test_prediction_files_round_trip_and_stale_modules_removed(tmp_path):
    rows = [{"id": 0, "answer": [(1, "x"), 2.5]}, {"id": 1, "answer": None}]
    text = predictions_json(rows)
    assert text == '[\n{"id": 0, "answer": [[1, "x"], 2.5]},\n{"id": 1, "answer": null}\n]\n'
    written = write_module_predictions(tmp_path, {"ehrxqa": {"oracle": rows, "yes": rows}})
    assert [p.relative_to(tmp_path).as_posix() for p in written] == ["predictions/ehrxqa/test/oracle.json",
                                                                       "predictions/ehrxqa/test/yes.json"]
    assert read_predictions(written[0], "ehrxqa", [0, 1]) == {0: [[1, "x"], 2.5], 1: None}
    write_module_predictions(tmp_path, {"ehrxqa": {"oracle": rows}})
    assert sorted(p.name for p in (tmp_path / "predictions").rglob("*.json")) == ["oracle.json"]
    with pytest.raises(PredictionsError, match="no such file"):
        read_predictions(tmp_path / "none.json", "ehrxqa", [0])
