"""Group names and asset keys, defined once. An asset key [group, name] is the DuckDB table group.name."""

from __future__ import annotations

from ehrxqa_pipeline.ehr.config import WHICH, schemas

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

SEMANTICS = "semantics"  # the Chest ImaGenome semantics files, observed as one source


def rejected(table: str) -> str:
    """Name of the quarantine table that holds the rows a step refused, each with a reason."""
    return f"{table}_rejected"


# The catalog of the warehouse: every table belongs to the one asset that writes it. By convention table
# group.name is asset [group, name] and rejected(table) is its quarantine; these are the other tables, each with
# its asset ("schema.*": every table of the schema; two assets: the multi-asset step writes it for both).
# ehrxqa_pipeline.lineage resolves tables with it, and tests/test_lineage.py checks every step of a build
# against it: each reads only the tables of its own assets and of its declared deps, and writes only its own.
OTHER_TABLES: dict[str, str | tuple[str, ...]] = {
    f"{CXR_COHORT}.box_width_stats": f"{CXR_COHORT}/image_rules",
    f"{CXR_COHORT}.funnel": (f"{CXR_COHORT}/silver", f"{CXR_COHORT}/gold"),
    **{f"{CXR_LABELS}.{t}": f"{CXR_LABELS}/ontology" for t in (
        "pairs", "pairs_all", "ontology_objects", "ontology_attributes", "ontology_object_closure",
        "ontology_attribute_closure")},
    **{f"{CXR_LABELS}.{c}_{t}": f"{CXR_LABELS}/{c}" for c in ("silver", "gold") for t in ("images", "pairs")},
    **{f"{schema}.*": f"{EHR_DB}/{w}" for w in WHICH for schema in schemas(w)},
    **{f"{EHRXQA}.{t}": f"{EHRXQA}/questions" for t in ("sampling_report", "sampling_config")},
    **{f"{MIMIC_CXR_VQA}.{t}": f"{MIMIC_CXR_VQA}/questions" for t in ("answer_entropy", "vocabulary")},
    **{f"{PARAPHRASE}.{t}": f"{PARAPHRASE}/candidates" for t in ("paraphraser", "llm_failures")},
    f"{SPLITS}.ratio_gaps": f"{SPLITS}/images",
    **{f"{VQA_SCORING}.{t}": f"{VQA_SCORING}/predictions" for t in ("predicted_images", "predicted_relations")},
}


def table_assets(table: str, assets: set[str]) -> tuple[str, ...]:
    """The asset keys (user strings, of ``assets``) that write ``table`` (schema.name, lower case); () when the
    catalog does not know it."""
    schema, _, name = table.partition(".")
    found = OTHER_TABLES.get(table) or OTHER_TABLES.get(f"{schema}.*")
    if found:
        return (found,) if isinstance(found, str) else found
    if f"{schema}/{name}" in assets:
        return (f"{schema}/{name}",)
    base = name.removesuffix(rejected(""))
    return table_assets(f"{schema}.{base}", assets) if base != name else ()
