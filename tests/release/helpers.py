"""A hand-made release folder (the files the dataset assets write, a few records each) and a fake source."""

import json
from pathlib import Path

from ehrxqa_pipeline.sources.schema import DEMO_MANIFEST, IMAGENOME, SEMANTICS_FILES, TABLES, release_path

SPLITS = ("train", "valid", "test")
VQA_RECORDS = {"train": [("program_1", "presence", "verify", ["yes"]), ("program_1", "presence", "verify", ["no"]),
                         ("program_2", "anatomy", "query", ["left lung", "right lung"])],
               "valid": [("program_2", "anatomy", "query", [])],
               "test": [("program_1", "presence", "verify", ["yes"])]}
EHRXQA_ANSWERS = {"train": [[1], [0], [12], ["2100-01-02 03:04:05"], ["senna"]], "valid": [[]],
                  "test": [["a", "b"], [3.5]]}
FUNNELS = {"silver": [["all_images", 1234], ["frontal_view", 777], ["not_gold_patient", 555]],
           "gold": [["all_images", 1234], ["not_gold_patient", 42], ["first_study_rule", 41]]}
REJECTED = [{"table": "cxr_cohort.silver_rejected", "reason": "frontal_view", "rows": 457},
            {"table": "ingest.admissions_rejected", "reason": "duplicate_key", "rows": 3}]
VQA_MD = ("### Overall (cf. paper Table B4)\n\n| | train |\n|---|---|\n| Images | 4,321 |\n\n"
          "### By content type (cf. Table B5)\n\nB5 rows\n\n### By semantic type (cf. Table B6)\n\nB6 rows\n\n"
          "### Answer entropy per template (bits)\n\nentropy rows\n")
EHRXQA_MD = ("### Samples per modality, patient scope and split (cf. paper Table C9)\n\nC9 rows\n\n"
             "### Per template (2 templates; 1 below a cap)\n\nper-template rows\n")


def _dump(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2) + "\n")


def make_release(root: Path) -> Path:
    """``root``/release with dataset files, statistics and records as the dataset assets write them."""
    rel = root / "release"
    overall = {"images": {"train": 4321, "valid": 12, "test": 7}, "questions": {"train": 9, "valid": 1, "test": 1},
               "answers": {"train": 4, "valid": 1, "test": 1}, "samples": {"train": 3, "valid": 1, "test": 1}}
    _dump(rel / "mimic-cxr-vqa" / "statistics.json", {"overall": overall, "by_content_type": {},
                                                      "by_semantic_type": {}, "answer_entropy": []})
    (rel / "mimic-cxr-vqa" / "statistics.md").write_text(VQA_MD)
    c9 = [{"modality": "image", "patient": "1-image", "train": 3, "valid": 1, "test": 1},
          {"modality": "table", "patient": "single", "train": 2, "valid": 0, "test": 1},
          {"modality": "total", "patient": "", "train": 5, "valid": 1, "test": 2}]
    per_template = [{"template_index": 7, "scope": "TABLE-SINGLE", "modality": "table", "train": 2, "valid": 0,
                     "test": 1, "silver_reason": "", "gold_reason": ""},
                    {"template_index": 1001, "scope": "IMAGE-SINGLE-1", "modality": "image", "train": 3, "valid": 1,
                     "test": 1, "silver_reason": "pool exhausted", "gold_reason": ""}]
    _dump(rel / "ehrxqa" / "statistics.json", {"c9": c9, "per_template": per_template})
    (rel / "ehrxqa" / "statistics.md").write_text(EHRXQA_MD)
    for split in SPLITS:
        _dump(rel / "mimic-cxr-vqa" / f"{split}.json", [
            {"split": split, "template_program": p, "content_type": c, "semantic_type": s, "answer": a}
            for p, c, s, a in VQA_RECORDS[split]])
        _dump(rel / "ehrxqa" / f"{split}.json", [
            {"split": split, "answer": a, "para_type": "original" if i % 2 else "rule-based"}
            for i, a in enumerate(EHRXQA_ANSWERS[split])])
    return rel


def make_source(root: Path, seed: int = 3) -> Path:
    """A source folder with one tiny file per source table (and the generator's manifest)."""
    src = root / "source"
    for t in TABLES.values():
        (src / t.release_path).parent.mkdir(parents=True, exist_ok=True)
        (src / t.release_path).write_text(f"{t.name}\n")
    for rel in (release_path(IMAGENOME, r) for r in SEMANTICS_FILES):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(rel + "\n")
    _dump(src / DEMO_MANIFEST, {"generator": "ehrxqa_pipeline.demo", "generator_version": "1", "seed": seed,
                                "scale": {"name": "demo", "cxr_patients": 40}, "planted": {"secret": 1}})
    return src


def offline_datasets(tmp_path: Path, monkeypatch):
    """Hugging Face ``datasets``, offline, with its caches under ``tmp_path`` (set before its first import in this
    process, and on its config where an earlier test imported it): the tests never reach a hub, nor share a cache
    between xdist workers."""
    for name, value in (("HF_HOME", str(tmp_path / "hf-home")), ("HF_DATASETS_OFFLINE", "1"), ("HF_HUB_OFFLINE", "1"),
                        ("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))):
        monkeypatch.setenv(name, value)
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    return datasets
