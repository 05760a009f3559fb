"""Per-item prediction files: ``[{"id": ..., "answer": [...]}, ...]``, the EHRXQA ML4H shared-task format
(answers are lists; ``null`` is an abstention), read by ``ehrxqa score`` and written by the scores asset.

Grain: one record per item of one split of one dataset. Written (``write_module_predictions``): one file per
(dataset, split, module) under ``EHRXQA_HOME/release/predictions/<dataset>/<split>/<module>.json``, from the
answers ``vqa.evaluate`` collected (source: the modules' answers to the released test items; ``id`` is the
record's ``idx`` in ``mimic-cxr-vqa/<split>.json``, its ``id`` in ``ehrxqa/<split>.json``), one record per line
in release order, so two builds give the same bytes and files diff item by item. Read
(``read_predictions``): a user's file, checked against the ids of the release split it is scored on; every
problem (not JSON, not a list, entries without ``id`` / ``answer``, duplicate, unknown or missing ids,
answers that are not lists) is one line naming the file and at most ``SHOWN`` offending ids, plus a count.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from ehrxqa_pipeline.atomic import write_text

MIMIC_CXR_VQA, EHRXQA = "mimic-cxr-vqa", "ehrxqa"  # dataset names = their release folders
DATASETS = (EHRXQA, MIMIC_CXR_VQA)
PREDICTIONS_DIR = "predictions"  # under release/
SHOWN = 5  # offending ids listed per problem


class PredictionsError(ValueError):
    """A predictions file that cannot be scored; the message names the file and what to fix."""


def predictions_path(release_dir: str | Path, dataset: str, split: str, module: str) -> Path:
    return Path(release_dir) / PREDICTIONS_DIR / dataset / split / f"{module}.json"


def _plain(value):
    """JSON-ready answer entries: tuples (multi-column rows) as lists."""
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


def predictions_json(rows: Iterable[Mapping]) -> str:
    """``rows`` ({"id", "answer"}) as a JSON array, one record per line, newline-terminated."""
    lines = [json.dumps({"id": r["id"], "answer": None if r["answer"] is None else _plain(list(r["answer"]))},
                        ensure_ascii=False, allow_nan=False) for r in rows]
    return "[\n" + ",\n".join(lines) + ("\n" if lines else "") + "]\n"


def write_module_predictions(release_dir: str | Path, predictions: Mapping[str, Mapping[str, Sequence[Mapping]]],
                             split: str = "test") -> list[Path]:
    """Write dataset -> module -> rows as ``predictions/<dataset>/<split>/<module>.json`` (atomically), then
    remove every other ``.json`` file under ``predictions/`` (a module no longer scored, e.g. no reference model
    on a source without JPEGs), so the folder holds exactly this build's files. Returns the paths written."""
    root = Path(release_dir) / PREDICTIONS_DIR
    written = []
    for dataset in sorted(predictions):
        for module in sorted(predictions[dataset]):
            path = predictions_path(release_dir, dataset, split, module)
            write_text(path, predictions_json(predictions[dataset][module]))
            written.append(path)
    keep = set(written)
    for old in sorted(root.rglob("*.json")) if root.is_dir() else []:
        if old not in keep and not old.name.startswith("."):
            old.unlink()
    return written


def _listed(ids: Sequence) -> str:
    shown = ", ".join(json.dumps(i) if not isinstance(i, str) else repr(i) for i in ids[:SHOWN])
    return shown + (f" and {len(ids) - SHOWN} more" if len(ids) > SHOWN else "")


def _n(items: Sequence, one: str, many: str) -> str:
    return f"{len(items)} {one if len(items) == 1 else many}"


def _id(value):
    """An item id as the release writes it (an integer); a string of digits is read as that integer."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _answer_problem(answer, dataset: str) -> str | None:
    if answer is None:
        return None
    if not isinstance(answer, list):
        return "not a list"
    if dataset == MIMIC_CXR_VQA and not all(isinstance(a, str) for a in answer):
        return "not a list of strings"
    return None


def read_predictions(path: str | Path, dataset: str, ids: Sequence[int], split: str = "test") -> dict[int, list | None]:
    """id -> answer (None: abstention) for every id of ``ids`` (the release split's), from a predictions file.

    Raises ``PredictionsError`` naming the file and each problem (see the module docstring); MIMIC-CXR-VQA
    answers must be lists of strings, EHRXQA answers lists of JSON values (a multi-column row as a list)."""
    path = Path(path)
    where = f"{path}"
    shape = (f'a JSON array of {{"id": <the item\'s id in {dataset}/{split}.json>, "answer": [...] or null}} '
             'objects, one per item')
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PredictionsError(f"{where}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise PredictionsError(f"{where}: cannot be read ({err})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise PredictionsError(f"{where} is not JSON: {err.msg} at line {err.lineno} column {err.colno}; "
                               f"write {shape}") from None
    if not isinstance(doc, list):
        raise PredictionsError(f"{where}: the file holds a JSON {type(doc).__name__}, not an array; write {shape}")
    problems, bad_entries, bad_ids, got = [], [], [], {}
    malformed: dict[str, list] = {}
    for position, entry in enumerate(doc):
        if not isinstance(entry, dict) or "id" not in entry or "answer" not in entry:
            bad_entries.append(position)
            continue
        key = _id(entry["id"])
        if key is None:
            bad_ids.append(entry["id"])
            continue
        problem = _answer_problem(entry["answer"], dataset)
        if problem:
            malformed.setdefault(problem, []).append(key)
        got.setdefault(key, []).append(entry["answer"])
    if bad_entries:
        problems.append(f"{_n(bad_entries, 'entry is', 'entries are')} not objects with \"id\" and \"answer\" "
                        "(positions "
                        f"{_listed(bad_entries)} in the array)")
    if bad_ids:
        problems.append(f"{_n(bad_ids, 'id is not an integer', 'ids are not integers')}: {_listed(bad_ids)}")
    duplicates = sorted(k for k, answers in got.items() if len(answers) > 1)
    if duplicates:
        problems.append(f"{_n(duplicates, 'id appears', 'ids appear')} more than once: {_listed(duplicates)}; "
                        "keep one answer each")
    expected = set(ids)
    unknown = sorted(set(got) - expected)
    if unknown:
        problems.append(f"{_n(unknown, 'id is', 'ids are')} not in {dataset}/{split}.json: {_listed(unknown)}")
    missing = [i for i in ids if i not in got]
    if missing:
        problems.append(f"{len(missing)} of the {len(ids)} items of {dataset}/{split}.json have no prediction: "
                        f"ids {_listed(missing)}; give every item an entry (answer null to abstain)")
    for problem, keys in malformed.items():
        kind = "lists of strings" if dataset == MIMIC_CXR_VQA else "lists"
        problems.append(f"{_n(keys, 'answer is', 'answers are')} {problem}: ids {_listed(sorted(keys))}; "
                        f"answers are {kind} "
                        "(e.g. [\"yes\"], [] for none) or null to abstain")
    if problems:
        raise PredictionsError(f"{where}: " + "\n  ".join(["cannot be scored:", *problems]))
    return {i: got[i][0] for i in ids}
