"""Group names and asset keys, defined once. An asset key [group, name] is the DuckDB table group.name."""

from __future__ import annotations

SOURCES = "sources"
INGEST = "ingest"
CXR_COHORT = "cxr_cohort"
CXR_LABELS = "cxr_labels"
SPLITS = "splits"
MIMIC_CXR_VQA = "mimic_cxr_vqa"
EHR_DB = "ehr_db"
EHRXQA = "ehrxqa"
PARAPHRASE = "paraphrase"
VQA_SCORING = "vqa_scoring"
RELEASE = "release"

GROUPS = (SOURCES, INGEST, CXR_COHORT, CXR_LABELS, SPLITS, MIMIC_CXR_VQA, EHR_DB, EHRXQA, PARAPHRASE,
          VQA_SCORING, RELEASE)

# The dataset splits, in release order: train and valid come from the silver labels, test from the gold ones
# (the two "sides" of the graph)
DATASET_SPLITS = ("train", "valid", "test")
SIDE_SPLITS = {"silver": ("train", "valid"), "gold": ("test",)}

SEMANTICS = "semantics"  # the Chest ImaGenome semantics files, observed as one source
PARAPHRASE_REVIEW = "paraphrase_review"  # the reviewers' decisions file (paraphrases/reviewed.csv), observed


def rejected(table: str) -> str:
    """Name of the quarantine table that holds the rows a step refused, each with a reason."""
    return f"{table}_rejected"

