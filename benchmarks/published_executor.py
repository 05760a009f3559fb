"""The authors' published NeuralSQL executor, unchanged, on a built EHRXQA release (docs/deviations.md, "Published
executor defects"). Not part of `make test`: it needs the authors' repository, which a user fetches.

    git clone --branch dev-experiment https://github.com/baeseongsu/ehrxqa /tmp/ehrxqa-published
    python -m benchmarks.published_executor --repo /tmp/ehrxqa-published [--home EHRXQA_HOME] [--source ROOT]

Each split runs as the authors' ``execute_nsql.py --execute_gt`` runs it (``run_execution_for_gt_query``: their
``post_process_sql``, ``NeuralSQLExecutor.execute_nsql``, their ``post_process_answer``, "null" when a query
fails) on the release's database of its side (``release/ehrxqa/databases/{silver,gold}/mimic_iv_cxr.db``) and the
source's JPEGs, in ``--workers`` processes a split. What is not the authors' is what their repository leaves to
the user:

- the VQA module, an oracle answering from the home's answer sheet (``OracleModule``, in a process of its own:
  the executor imports its vendored sqlglot, this project another one). It receives the images as the executor
  opens them (PIL, RGB), so it knows each image by a SHA-256 of its pixels, computed from the executor's own map
  of studies to image files (every image of the database, once per process: seconds on the demo; on the real
  MIMIC-CXR-JPG, whose films are far larger and many more, budget hours). A list answer is returned as a list,
  empty included: the authors' modules turn an empty list into None, which their executor rejects
  (docs/deviations.md);
- stand-ins for ``transformers`` and the M3AE backbone (``visual_module/backbones``, not in the repository),
  which ``visual_module/__init__.py`` imports for the M3AE module, unused here.

Then the authors' ``experiment/evaluate.py`` scores each split, and every record on which their executor and
the release disagree is sorted by the defect it shows: (a) ``%J`` lower-cased, (b) ``count(distinct ...)``,
(c) ``start of month``, (d) "null" (the query failed) on a ``'+N month'`` shift, (e) the same rows in another
order. Anything else, another failure included, is "unexplained", and a reason to look (exit code 1). Writes
<out>/<split>-<k>/predictions_gt.json, <out>/<split>-pred.json (record id -> answer) and <out>/summary.json.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

from ehrxqa_pipeline.names import SIDE_SPLITS  # imports no sqlglot: the executor's vendored one still comes first

NSQL = Path("experiment") / "NeuralSQL"
SIDES = {split: side for side, splits in SIDE_SPLITS.items() for split in splits}  # split -> database side
DEFECTS = ("a", "b", "c", "d", "e", "unexplained")
_MONTH_SHIFT = re.compile(r"'[+-]?\d+ month'")  # datetime(x, '+N month')


def _published_executor(repo: Path):
    """The authors' executor module and ``execute_nsql``, imported with their vendored sqlglot first on the path."""
    nsql = repo.resolve() / NSQL
    sys.path[:0] = [str(nsql / "executor"), str(nsql)]
    for name, attrs in (("transformers", ["RobertaTokenizerFast"]), ("m3ae", []),
                        ("m3ae.modules", ["M3AETransformerSS"])):
        module = types.ModuleType(name)
        for attr in attrs:
            setattr(module, attr, type(attr, (), {}))
        sys.modules.setdefault(name, module)
    from executor import nsql_executor  # before sqlglot: the vendored sqlglot has a package named executor too
    import execute_nsql
    import sqlglot

    if not Path(sqlglot.__file__).is_relative_to(nsql / "executor"):
        raise SystemExit(f"sqlglot came from {sqlglot.__file__}, not the authors' vendored copy")
    return nsql_executor, execute_nsql


def run_part(a: argparse.Namespace) -> None:
    """One part (every ``n``-th record from the ``k``-th) of one split's ``a.records`` through the published
    executor, on the database in ``a.database_dir`` with the oracle of ``a.answer_sheet``."""
    nsql_executor, execute_nsql = _published_executor(Path(a.repo))
    from PIL import Image

    db_dir = Path(a.database_dir)
    executor = nsql_executor.NeuralSQLExecutor(str(db_dir), str(a.images), vqa_module_type="yes")
    by_pixels: dict[str, str] = {}
    for study, path in executor.sid_to_ipath_map.items():
        digest = hashlib.sha256(Image.open(path).convert("RGB").tobytes()).hexdigest()
        if digest in by_pixels:
            raise SystemExit(f"{path}: the same pixels as image {by_pixels[digest]}; the oracle cannot tell them apart")
        by_pixels[digest] = executor.sid_to_iid_map[study]
    oracle = subprocess.Popen([sys.executable, "-m", "benchmarks.published_executor", "oracle", a.answer_sheet,
                               str(db_dir / "mimic_iv_cxr.db")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)

    def module(images, questions):  # visual_module/vqa_module.py's interface: (images, questions) -> answers
        ids = [by_pixels[hashlib.sha256(image.tobytes()).hexdigest()] for image in images]
        oracle.stdin.write(json.dumps(list(zip(ids, questions))) + "\n")
        oracle.stdin.flush()
        return json.loads(oracle.stdout.readline())

    executor.vqa_module = module
    k, n = map(int, a.part.split("/"))
    records = json.loads(Path(a.records).read_text())[k::n]
    os.makedirs(a.out, exist_ok=True)
    execute_nsql.run_execution_for_gt_query(types.SimpleNamespace(debug=False, save_dir=a.out),
                                            executor, {str(r["id"]): r["query"] for r in records})
    oracle.stdin.close()
    oracle.wait()


def serve_oracle(sheet: str, database: str) -> None:
    """JSON lines on stdin, [[image_id, question], ...], answered on stdout by the oracle module."""
    from ehrxqa_pipeline.questions.neuralsql.oracle import OracleModule
    from ehrxqa_pipeline.questions.neuralsql.vqa_modules import ImageRef

    oracle = OracleModule(sheet, database=database)
    for line in sys.stdin:
        pairs = json.loads(line)
        sys.stdout.write(json.dumps(oracle([ImageRef(0, image_id, 0) for image_id, _ in pairs],
                                           [question for _, question in pairs])) + "\n")
        sys.stdout.flush()


def defect(record: dict, answer, post_process_answer) -> str | None:
    """None when the published executor's ``answer`` is the record's; else the defect it shows."""
    query = " ".join(record["query"].lower().split())
    if answer == "null":  # the query failed: (d) raises on a month shift, any other failure is unexplained
        return "d" if _MONTH_SHIFT.search(query) else "unexplained"
    gold, got = post_process_answer(record["answer"]), post_process_answer(answer)
    if gold == got:
        return None
    if sorted(map(repr, gold)) == sorted(map(repr, got)):
        return "e"
    if "%j" in query:
        return "a"
    if "count(distinct" in query.replace("( ", "("):
        return "b"
    if "start of month" in query:
        return "c"
    return "unexplained"


def compare(released: Path, repo: Path, out: Path, workers: int) -> dict:
    """Per split of the release's EHRXQA folder ``released``: the published evaluate.py's output and the
    disagreements by defect."""
    sys.path.insert(0, str(repo / "experiment"))
    from post_processing import post_process_answer

    summary: dict = {}
    for split in SIDES:
        split_file = released / f"{split}.json"
        records = json.loads(split_file.read_text())
        predicted = {}
        for k in range(workers):
            part = records[k::workers]
            got = json.loads((out / f"{split}-{k}" / "predictions_gt.json").read_text())
            if len(got) != len(part):
                raise SystemExit(f"{split} part {k}: {len(got)} answers for {len(part)} records")
            predicted |= {str(r["id"]): got[str(i)] for i, r in enumerate(part)}  # keyed by position there
        path = out / f"{split}-pred.json"
        path.write_text(json.dumps(predicted))
        evaluated = subprocess.run([sys.executable, "evaluate.py", "--gt_path", str(split_file), "--pred_path",
                                    str(path)], cwd=repo / "experiment", capture_output=True, text=True,
                                   check=True).stdout.strip()
        found = collections.Counter(defect(r, predicted[str(r["id"])], post_process_answer) for r in records
                                    if not r.get("is_impossible"))
        failed = sum(predicted[str(r["id"])] == "null" for r in records if not r.get("is_impossible"))
        summary[split] = {"records": len(records), "ran": len(records) - failed, "agree": found[None],
                          **{d: found[d] for d in DEFECTS}, "published_evaluate": evaluated}
    return summary


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["oracle"]:
        serve_oracle(*argv[1:])
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repo", required=True, type=Path, help="a checkout of baeseongsu/ehrxqa, branch dev-experiment")
    p.add_argument("--home", type=Path, default=None,
                   help="the built home (its release/ and answer_sheets/); default: the build's (EHRXQA_HOME)")
    p.add_argument("--source", type=Path, default=None,
                   help="the source root with mimic-cxr-jpg/2.0.0/files; default: the build's (EHRXQA_SOURCE_ROOT)")
    p.add_argument("--out", type=Path, default=None, help="default HOME/published-executor")
    p.add_argument("--workers", type=int, default=2, help="processes a split")
    for hidden in ("--part", "--records", "--database-dir", "--answer-sheet", "--images"):  # one part, in a worker
        p.add_argument(hidden, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.part:
        run_part(a)
        return 0
    from assets.ehr_db import answer_sheet_dir, database_dir
    from ehrxqa_pipeline.config import Settings
    from ehrxqa_pipeline.sources.images import images_dir

    settings = Settings.resolve(home=a.home and str(a.home), source_root=a.source and str(a.source))
    released, images = settings.release_dir / "ehrxqa", images_dir(settings.source_dir)
    out = a.out or settings.home / "published-executor"
    out.mkdir(parents=True, exist_ok=True)
    for split in SIDES:
        logs = [open(out / f"{split}-{k}.log", "w") for k in range(a.workers)]  # the executor's own printing
        side = SIDES[split]
        parts = [subprocess.Popen([sys.executable, "-m", "benchmarks.published_executor", "--repo", str(a.repo),
                                   "--records", str(released / f"{split}.json"), "--part", f"{k}/{a.workers}",
                                   "--database-dir", str(database_dir(settings, side)),
                                   "--answer-sheet", str(answer_sheet_dir(settings, side) / "tb_cxr_plus.db"),
                                   "--images", str(images), "--out", str(out / f"{split}-{k}")],
                                  stdout=log, stderr=subprocess.STDOUT)
                 for k, log in enumerate(logs)]
        failed = [k for k, part in enumerate(parts) if part.wait()]
        for log in logs:
            log.close()
        if failed:
            raise SystemExit(f"{split}: part(s) {failed} failed; see {out}/{split}-<part>.log")
    summary = compare(released, a.repo, out, a.workers)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    for split, s in summary.items():
        print(split, {k: v for k, v in s.items() if k != "published_evaluate"})
        print("  published evaluate.py:", s["published_evaluate"].splitlines()[0])
    return 1 if any(s["unexplained"] for s in summary.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
