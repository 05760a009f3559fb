"""release/README.md: what the release folder holds and how to read it.

Grain: one document per release folder, written by ``release/datasheet`` beside ``datasheet.md`` and
``LICENSE.txt``. Source: the gathered statistics (``statistics/tables.json``, ``tables.gather``: records per
split and the empty-answer counts, which it counts from this build's release JSON files), the code section
of the manifest (the release version) and ``identity`` (the published releases reproduced). No time and no
absolute path, so two builds of the same inputs write the same bytes.
"""

from __future__ import annotations

from collections.abc import Mapping

from ehrxqa_pipeline.markdown import count, table
from ehrxqa_pipeline.release import hf
from ehrxqa_pipeline.release.identity import identity_lines, release_version
from ehrxqa_pipeline.release.tables import SPLITS

README_FILE = "README.md"
NO_ANSWER = {"ehrxqa": "none", "mimic_cxr_vqa": "(none)"}  # tables.answer_kind / tables.file_counts

# (path relative to release/, what it is); the README's own table of the folder.
CONTENTS = (
    ("README.md", "this file"),
    ("mimic-cxr-vqa/{train,valid,test}.json", "MIMIC-CXR-VQA: a JSON list of records (image ids, question, "
                                             "template, answer) in the published format"),
    ("mimic-cxr-vqa/answer_vocabulary.json", "every answer a MIMIC-CXR-VQA question can have"),
    ("mimic-cxr-vqa/statistics.{md,json}", "paper Tables B4-B6 and answer entropy per template"),
    ("ehrxqa/{train,valid,test}.json", "EHRXQA: a JSON list of records (question, NeuralSQL query, answer, "
                                      "template tags, `resolved_value`) in the published format"),
    ("ehrxqa/template_catalog.json", "the EHRXQA question templates"),
    ("ehrxqa/statistics.{md,json}", "paper Table C9; per template its counts and why it stayed below its cap"),
    ("ehrxqa/databases/silver/", "the database train and valid queries run on: `mimic_iv_cxr.db` (SQLite), "
                                 "`mimic_iv_cxr.duckdb`, `tables.json` (Spider format)"),
    ("ehrxqa/databases/gold/", "the same for test queries"),
    ("hf/{ehrxqa,mimic-cxr-vqa}/", "the same records as parquet, `{train,valid,test}.parquet`, with a dataset card "
                                   "(`README.md`) for Hugging Face `datasets`, for local use only (below)"),
    ("paraphrases/statistics.{md,json}", "paraphrase pools per dataset and machine rejections per reason"),
    ("statistics/tables.{md,json}", "every table of the build in one place: B4-B6, C9, image-selection funnels, "
                                    "rows set aside per reason, counts per template, answer distributions"),
    ("plots/*.png", "answer distributions, records per template, image-selection funnels"),
    ("images/", "the MIMIC-CXR-JPG images each split uses (`{split}.csv`, `{split}_urls.txt`) and how to "
                "download them (`images/README.md`)"),
    ("scores.{json,md}, predictions/", "VQA modules' scores and their per-item test answers"),
    ("datasheet.md", "the paper's datasheet (appendix A) answered for this build, with the deviations"),
    ("croissant.json", "the folder described in Croissant 1.1 (JSON-LD, with the RAI fields): each file's SHA-256, "
                       "typed record sets per dataset and split (read from `hf/`); load it offline with "
                       "`mlcroissant` (below)"),
    ("LICENSE.txt", "the PhysioNet license and data use agreement these files inherit"),
    ("manifest.json", "every file's SHA-256, the source versions, code version, seed, configuration, "
                      "`release_version` and `identity`"),
    ("SHA256SUMS.txt", "`sha256sum -c SHA256SUMS.txt` checks the folder"),
    ("CHANGELOG.md", "what changed from one release version to the next, as built in this pipeline's home"),
)

LOADING = '''```python
# pandas (dtype=False keeps ids and answers as written)
import pandas as pd
df = pd.read_json("ehrxqa/train.json", orient="records", dtype=False)

# polars (infer_schema_length=None: the nested fields' keys vary by template; EHRXQA answers mix numbers
# and strings, so `answer` becomes a list of strings)
import polars as pl
df = pl.read_json("mimic-cxr-vqa/train.json", infer_schema_length=None)

# Hugging Face datasets (locally only: the license forbids posting these files to the Hub): the parquet export
# with its dataset card (JSON-text columns: hf/<dataset>/README.md shows how to decode them), or the JSON files
from datasets import load_dataset
ds = load_dataset("hf/ehrxqa")
ds = load_dataset("json", data_files={s: f"mimic-cxr-vqa/{s}.json" for s in ("train", "valid", "test")})

# Croissant (mlcroissant: file paths resolve against this folder, nothing is downloaded; the record sets read
# hf/'s parquet, where the template-varying objects and EHRXQA answers are JSON text: json.loads them)
import mlcroissant as mlc
ds = mlc.Dataset(jsonld="croissant.json")
test = list(ds.records("ehrxqa_test"))  # {"ehrxqa_test/question": b"...", ...}: text comes as bytes

# DuckDB (`answer` is a JSON[] list)
import duckdb
duckdb.sql("SELECT split, count(*) AS items, count(*) FILTER (WHERE len(answer) = 0) AS empty "
           "FROM read_json(['ehrxqa/train.json', 'ehrxqa/valid.json', 'ehrxqa/test.json']) GROUP BY split")
```'''

HF_NOTE = (
    f"`{hf.OUT_DIR}/<dataset>/` holds the same records as parquet, one file per split in the JSON file's order, with "
    "one schema for the three splits, in which objects whose keys vary by template and EHRXQA's `answer` (strings "
    "and numbers mixed) are JSON text (" + "; ".join(
        f"`{folder}`: " + ", ".join(f"`{c}`" for c in e.json_columns) for folder, e in hf.EXPORTS.items())
    + "), which `json.loads` turns back into the record's value. That is a representation, not a difference of "
    "content: the build checks every record against the JSON file (`release/hf`, check `matches_json`). Never "
    "push the folder to the Hugging Face Hub or any other hub.")

IDS = (
    "MIMIC-CXR-VQA records carry MIMIC-CXR-JPG's own `subject_id`, `study_id` and `image_id` (its `dicom_id`), "
    "unchanged, and `image_path`, the JPEG's path under MIMIC-CXR-JPG's `files/` folder "
    "(`pXX/pSUBJECT/sSTUDY/DICOM_ID.jpg`); they hold no time. In the EHRXQA databases, TB_CXR keeps the same "
    "`subject_id` (MIMIC-IV's and MIMIC-CXR-JPG's), `study_id` and `image_id`, so every study can be looked up "
    "in MIMIC-CXR-JPG; what changes is time: every time of a patient, `studydatetime` included, is shifted by "
    "one whole-day offset per patient into the years 2100-2105, so a study's date is not its MIMIC-CXR-JPG "
    "StudyDate, while the order of a patient's studies and every interval between the patient's records are "
    "kept. A record's `resolved_value` names the study ids its query picks.")


def empty_answers(tables: Mapping) -> list[list]:
    """Rows (dataset, split, records, empty answers, share) from the gathered statistics."""
    rows = []
    for key, title, counts in (("mimic_cxr_vqa", "MIMIC-CXR-VQA", "answers"), ("ehrxqa", "EHRXQA", "answer_kinds")):
        stats = tables[key]
        for split in SPLITS:
            n = stats["records"].get(split, 0)
            empty = stats[counts].get(split, {}).get(NO_ANSWER[key], 0)
            rows.append([title, split, count(n), count(empty), f"{100 * empty / n:.1f} %" if n else "-"])
    return rows


def render_readme(tables: Mapping, code: Mapping) -> str:
    """The text of README.md for the release folder gathered in ``tables`` (``tables.gather``), built by
    ``code`` (``manifest.code_section``)."""
    sections = [
        "# EHRXQA and MIMIC-CXR-VQA: release folder",
        f"Release version `{release_version(code)}` (`{code['package']}` {code['version']} + the first 12 hex "
        "characters of its code digest; the source versions, seed and configuration are in `manifest.json`). "
        "This folder rebuilds:\n\n" + identity_lines(),
        "Credentialed PhysioNet users only: see `LICENSE.txt` before using or sharing anything here.",
        "## What is here",
        table(["path", "content"], [[f"`{p}`", what] for p, what in CONTENTS]),
        "## Loading the question files",
        "Each `{train,valid,test}.json` is one JSON list of records (paths relative to this folder):",
        LOADING,
        HF_NOTE,
        "EHRXQA queries run on the split's SQLite database (train / valid: `ehrxqa/databases/silver/`, test: "
        "`ehrxqa/databases/gold/`) after replacing `current_time` by `'2105-12-31 23:59:00'`; queries with "
        "`func_vqa` need a VQA module (the pipeline's `NeuralSqlExecutor`).",
        "## Empty answers",
        "An empty answer list `[]` is a valid answer, not a missing one: the question's answer is \"none\" (no "
        "finding of the asked kind in the image, no row matching the query). Score it like any other answer. "
        "In EHRXQA, the opt-in unanswerable questions (`is_impossible: true`) also have `[]`. In this build:",
        table(["dataset", "split", "records", "empty answers", "share"], empty_answers(tables)),
        "## Study ids and MIMIC-CXR-JPG",
        IDS,
    ]
    return "\n\n".join(sections) + "\n"
