"""The authors' published MIMIC-CXR-VQA cohort and label scripts, unchanged, on the source a home was built from:
each split's images against this build's (docs/deviations.md, "The cohort against the authors' scripts"). Not part
of `make test`: it needs the authors' repository and a Python with their packages.

    git clone https://github.com/baeseongsu/mimic-cxr-vqa /tmp/mimic-cxr-vqa-published
    python3 -m venv /tmp/published-env && /tmp/published-env/bin/pip install "pandas<3" numpy scikit-learn tqdm
    ehrxqa demo-source --scale full --patients 4000 --no-images /tmp/src4000     # 500 gold patients
    EHRXQA_SOURCE_ROOT=/tmp/src4000 EHRXQA_HOME=/tmp/home4000 EHRXQA_CHECK_IMAGES=0 \\
        ehrxqa build --select "+key:release/mimic_cxr_vqa"
    EHRXQA_SOURCE_ROOT=/tmp/src4000 EHRXQA_HOME=/tmp/home4000 python -m benchmarks.published_builder \\
        --repo /tmp/mimic-cxr-vqa-published --python /tmp/published-env/bin/python

Their scripts assert the real release's 500 gold patients (the demo source has 40) and need about 70 GiB on the
full-scale source; a source of 4,000 CXR patients holds 500 gold ones and runs in minutes. They read plain files
in PhysioNet's layout: gzipped tables are unpacked into <out>/physionet, the other files linked. Then
``dataset_builder/preprocess_cohort.py`` and ``preprocess_label.py`` run as ``build_dataset.sh`` runs them, and
each image that one side has and the other has not is explained by a documented deviation, or is "unexplained":

- only theirs, refused by our cohort for ``has_36_boxes`` (row 2: their images without 36 boxes escape the box
  rules);
- only ours, in their cohort but with no row in their label table (their ``silver_dataset.csv`` / ``gold_dataset.csv``):
  every relation of the image is a removed label or outside ``possible_attribute_of``, so their table, built from
  relation rows, has nothing for it, where this build keeps the image with its negatives implied (the row "The
  label table is built from relation rows");
- only ours, with a study order of at most 20 for a patient with more than 20 studies in the metadata (row 1: their
  StudyOrder also counts lateral-only studies and tied times, so such a study can rank above their cut of 20).

Train and valid are compared as one pool: the two sides assign patients to them differently (row 10). Answers are
not compared: the labels differ by design (rows 4, 5, 6, 8). Writes <out>/summary.json and prints it; exit code 1
when anything is unexplained.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

from ehrxqa_pipeline.names import SIDE_SPLITS

TABLES = ("cxr_metadata", "silver_bbox", "silver_relations", "gold_relations", "gold_bbox")  # what the two scripts read
MAX_STUDY_ORDER = 20  # preprocess_cohort.py's --max_study_order


def stage_source(source: Path, staging: Path) -> dict[str, Path]:
    """The files the scripts read, at the paths they read them from, below ``staging``: a folder per dataset."""
    from ehrxqa_pipeline.sources.files import resolve
    from ehrxqa_pipeline.sources.layout import as_layout
    from ehrxqa_pipeline.sources.schema import IMAGENOME, MIMIC_CXR, SEMANTICS_FILES, TABLES as FILES

    layout = as_layout(source)
    dirs = {key: staging / key for key in (MIMIC_CXR, IMAGENOME)}
    files = [(resolve(layout, name), dirs[FILES[name].dataset] / FILES[name].path) for name in TABLES]
    files += [(layout.path(IMAGENOME, rel), dirs[IMAGENOME] / rel) for rel in SEMANTICS_FILES]
    for origin, target in files:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        if origin.name.endswith(".gz"):
            with gzip.open(origin, "rb") as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
        else:
            target.symlink_to(origin.resolve())
    return {"mimic_cxr_jpg_dir": dirs[MIMIC_CXR], "chest_imagenome_dir": dirs[IMAGENOME]}


def explain(only_theirs: dict[str, str | None], only_ours: dict[str, tuple[int, int, bool]]) -> dict[str, int]:
    """Counts of the differences by the deviation that explains them. ``only_theirs``: image -> the reason our
    cohort refused it (None: not refused); ``only_ours``: image -> (our study order, the patient's studies in the
    metadata, whether their cohort has the image and their label table has no row for it)."""
    out = {"row 2: has_36_boxes": 0, "row 1: study order": 0, "no label row in theirs": 0, "unexplained": 0}
    for reason in only_theirs.values():
        out["row 2: has_36_boxes" if reason == "has_36_boxes" else "unexplained"] += 1
    for order, studies, without_labels in only_ours.values():
        if without_labels:
            out["no label row in theirs"] += 1
        else:
            out["row 1: study order" if order <= MAX_STUDY_ORDER < studies else "unexplained"] += 1
    return out


def compare(home: Path, source: Path, preprocessed: Path) -> dict:
    import duckdb
    import polars as pl

    from ehrxqa_pipeline.sources.files import resolve

    def theirs(*files: str) -> set[str]:
        return set(pl.concat(pl.read_csv(preprocessed / f"{f}.csv", columns=["image_id"], infer_schema_length=0)
                             for f in files)["image_id"])

    studies = dict(pl.read_csv(resolve(source, "cxr_metadata"), columns=["subject_id", "study_id"],
                               infer_schema_length=0).group_by("subject_id").agg(pl.col("study_id").n_unique())
                   .with_columns(pl.col("subject_id").cast(pl.Int64)).iter_rows())
    summary = {}
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as con:
        refused = dict(con.execute("SELECT image_id, reason FROM cxr_cohort.silver_rejected "
                                   "UNION ALL SELECT image_id, reason FROM cxr_cohort.gold_rejected").fetchall())
        for side, splits in SIDE_SPLITS.items():
            name = "+".join(splits)
            ours = {i: (o, studies.get(s, 0)) for i, o, s in con.execute(
                f"SELECT s.image_id, c.study_order, s.subject_id FROM splits.{side} s "
                f"JOIN cxr_cohort.{side} c USING (image_id)").fetchall()}
            their = theirs(*(f"{s}_dataset" for s in splits))
            unlabelled = theirs(f"cohort_{side}") - theirs(f"{side}_dataset")  # their cohort, no label row
            summary[name] = {"ours": len(ours), "theirs": len(their), "shared": len(their & set(ours)),
                             **explain({i: refused.get(i) for i in their - set(ours)},
                                       {i: (*v, i in unlabelled) for i, v in ours.items() if i not in their})}
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repo", required=True, type=Path, help="a checkout of baeseongsu/mimic-cxr-vqa")
    p.add_argument("--python", required=True, help="a Python with pandas<3, numpy and scikit-learn")
    p.add_argument("--home", type=Path, default=None, help="the built home; default: the build's (EHRXQA_HOME)")
    p.add_argument("--source", type=Path, default=None,
                   help="the source root; default: the build's (EHRXQA_SOURCE_ROOT)")
    p.add_argument("--out", type=Path, default=None, help="default HOME/published-builder")
    a = p.parse_args(argv)
    from ehrxqa_pipeline.config import Settings

    settings = Settings.resolve(home=a.home and str(a.home), source_root=a.source and str(a.source))
    out = (a.out or settings.home / "published-builder").absolute()
    dirs = stage_source(settings.source_dir, out / "physionet")
    preprocessed = out / "preprocessed_data"
    preprocessed.mkdir(parents=True, exist_ok=True)
    with open(out / "builder.log", "w") as log:
        for script in ("preprocess_cohort.py", "preprocess_label.py"):
            done = subprocess.run([a.python, f"dataset_builder/{script}", "--mimic_cxr_jpg_dir",
                                   str(dirs["mimic_cxr_jpg_dir"]), "--chest_imagenome_dir",
                                   str(dirs["chest_imagenome_dir"]), "--save_dir", str(preprocessed)],
                                  cwd=a.repo, stdout=log, stderr=subprocess.STDOUT)
            if done.returncode:
                raise SystemExit(f"{script} failed; see {out / 'builder.log'}")
    summary = compare(settings.home, settings.source_dir, preprocessed)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    for name, s in summary.items():
        print(name, s)
    return 1 if any(s["unexplained"] for s in summary.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
