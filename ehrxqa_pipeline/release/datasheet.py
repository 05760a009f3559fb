"""release/datasheet.md: the paper's datasheet (appendix A, "Datasheets for Datasets") answered from the build.

Fixed answers follow the paper; everything that a build determines (sources and versions, counts, filters
with counts, code version, seed and configuration, deviations) is filled in from the build's facts, so the
datasheet describes this release, not the published one. No time and no absolute path is written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from ehrxqa_pipeline.markdown import count, table
from ehrxqa_pipeline.questions.ehrxqa.records import FIELD_DICTIONARY
from ehrxqa_pipeline.release.identity import identity_lines, release_version
from ehrxqa_pipeline.release.license_note import DUA, LICENSE, LICENSE_FILE
from ehrxqa_pipeline.release.manifest import MANIFEST_NAME, SUMS_NAME
from ehrxqa_pipeline.release.tables import SPLITS

PAPER = {"ehrxqa": "about 46.2K (16,366 image, 16,529 table, 13,257 image+table)",
         "mimic_cxr_vqa": "about 377.4K"}
PHYSIONET = {"mimiciv": "https://physionet.org/content/mimiciv/{v}/",
             "mimic-cxr-jpg": "https://physionet.org/content/mimic-cxr-jpg/{v}/",
             "chest-imagenome": "https://physionet.org/content/chest-imagenome/{v}/"}
SOURCE_NAMES = {"mimiciv": "MIMIC-IV", "mimic-cxr-jpg": "MIMIC-CXR-JPG", "chest-imagenome": "Chest ImaGenome"}

# Answers stated once, for datasheet.md and for the RAI fields of croissant.json (``croissant.rai_fields``).
PURPOSE = ("EHRXQA: multi-modal question answering over structured electronic health records (EHRs) and chest "
           "X-ray images. MIMIC-CXR-VQA, its image part: a benchmark for medical visual question answering.")
INSTANCES = ("EHRXQA: natural-language questions with their SQL / NeuralSQL query and answer over the integrated "
             "MIMIC-IV + chest X-ray database. MIMIC-CXR-VQA: a MIMIC-CXR image id with a question and answer.")
RECOMMENDED_SPLITS = ("Yes: train / valid from the silver labels (patient-disjoint), test from the gold labels; the "
                      "files are split accordingly.")
NOISE = ("Questions are filled templates or paraphrases of them, so some are grammatically awkward. Labels "
         "of train / valid images come from the automatically extracted silver Chest ImaGenome labels.")
CONFIDENTIAL = "No: the sources are de-identified, and the EHRXQA databases are shifted into the years 2100-2105."
PEOPLE = ("It relates to patients; it does not identify subpopulations (questions may ask for a gender or an "
          "age group).")
ACQUISITION = ("Question templates with their SQL / NeuralSQL were written from existing resources, then filled "
               "by sampling the source databases; every EHRXQA NeuralSQL was executed with an oracle VQA module "
               "and checked against its gold SQL answer before release.")
ETHICS = ("N/A: de-identified PhysioNet data used under its data use agreement; no record value is sent to a "
          "remote service (the LLM sees question templates only).")
RAW_DATA = "The sources are read-only; refused rows are kept with their reason."
TASKS = "Question answering over EHRs, chest X-ray images, or both; text-to-SQL / NeuralSQL parsing; VQA."
MAINTENANCE = ("Rebuilding from new source versions or code gives a new release; `manifest.json` records what "
               "it was built from, so two releases can be compared file by file (`ehrxqa changelog OLD NEW` "
               "lists what changed).")


def _qa(question: str, answer: str) -> str:
    """A list item: the question in bold, the answer indented under it (lists and tables included)."""
    lines = answer.strip().split("\n")
    return f"- **{question}**\n\n" + "\n".join("  " + line if line else "" for line in lines)


def _split_counts(records: Mapping[str, int]) -> str:
    return ", ".join(f"{count(records.get(s, 0))} {s}" for s in SPLITS) + f" ({count(sum(records.values()))} in all)"


def _modality_counts(c9: list[Mapping]) -> dict[str, int]:
    out: dict[str, int] = {}
    for row in c9:
        if row["modality"] != "total":
            out[row["modality"]] = out.get(row["modality"], 0) + sum(row[s] for s in SPLITS)
    return out


def source_lines(sources: Mapping) -> str:
    releases, paper = sources["releases"], sources.get("paper_releases", {})
    lines = [f"- {SOURCE_NAMES.get(k, k)} {v}: {PHYSIONET.get(k, '{v}').format(v=v)}"
             + (f" (**not the paper's release**: the EHRXQA paper used {paper[k]}, so counts and answers differ "
                "from the published dataset)" if paper.get(k, v) != v else "") for k, v in releases.items()]
    if sources["synthetic"]:
        g = sources["generator"] or {}
        scale = g.get("scale", {})
        lines.append(f"- **This build read the synthetic source** ({g.get('generator', 'generator')} version "
                     f"{g.get('generator_version', '?')}, seed {g.get('seed', '?')}, scale `{scale.get('name', '?')}`, "
                     f"{count(scale.get('cxr_patients', 0))} X-ray patients): the PhysioNet layout filled with "
                     "generated records, so the counts below describe no real patient.")
    else:
        lines.append("- This build read a PhysioNet source (credentialed data).")
    lines.append(f"- Source content digest (every observed source table): `{sources['digest']}`; per table in "
                 "`manifest.json`.")
    return "\n".join(lines)


_DATASET_NAMES = {"mimic_cxr_vqa": "MIMIC-CXR-VQA", "ehrxqa": "EHRXQA"}


def paraphraser_text(p: Mapping) -> str:
    """Where the released questions' phrasings come from, per dataset, as the build recorded it."""
    datasets = p.get("datasets") or {}
    if not datasets:
        return "by the offline rule-based paraphraser" if p.get("llm_endpoint") is False else "(no record of how)"
    model = f" (model {p.get('model')})" if p.get("model") else ""
    parts = []
    for ds, d in sorted(datasets.items()):
        t = d.get("templates") or {}
        bits = [f"{count(t.get('llm', 0))} templates by an OpenAI-compatible LLM{model}",
                f"{count(t.get('offline', 0))} by the offline rule-based paraphraser",
                f"{count(t.get('original', 0))} keep their template wording"]
        if t.get("reviewer"):
            bits.append(f"{count(t['reviewer'])} only by reviewers")
        failures = d.get("llm_failures") or {}
        if failures:
            bits.append(f"no usable LLM answer for {count(sum(failures.values()))} templates ("
                        + ", ".join(f"{k}: {count(v)}" for k, v in sorted(failures.items())) + ")")
        parts.append(f"{_DATASET_NAMES.get(ds, ds)}: " + ", ".join(bits))
    return "as follows. " + "; ".join(parts)


def filters_section(tables: Mapping) -> str:
    parts = []
    for f in tables["funnels"]:
        parts += [f"Image selection, {f['cohort']} cohort (images remaining after each rule):",
                  table(["rule", "images"], [[rule, count(n)] for rule, n in f["steps"]])]
    rejected = tables["rejected"]
    parts += ["Rows set aside by every filter of the build, per reason (the `*_rejected` tables of the "
              "warehouse, each row kept with its reason):",
              table(["table", "reason", "rows"], [[r["table"], r["reason"], count(r["rows"])] for r in rejected])
              if rejected else "No row was set aside."]
    return "\n\n".join(parts)


def deviations_section(deviations: str | None) -> str:
    if not deviations:
        return "See `docs/deviations.md` in the pipeline's repository."
    body = deviations.split("\n| #", 1)
    return ("Where the published builders are defective, this pipeline does the right thing; every such "
            "place (from `docs/deviations.md`):\n\n| #" + body[1].rstrip() if len(body) == 2 else deviations.strip())


DISTRIBUTION = (f"The files of this folder inherit the {LICENSE} and the {DUA} of their PhysioNet sources "
                f"(`{LICENSE_FILE}`): only credentialed users who signed the agreement may use them, and they may "
                "not be shared or posted to dataset hubs; derived data is shared only through PhysioNet. The "
                "published dataset's code: https://github.com/baeseongsu/ehrxqa and "
                "https://github.com/baeseongsu/mimic-cxr-vqa (MIT license); this pipeline's code is licensed "
                "separately from the data.")


def sample_text(seed: int, config: Mapping) -> str:
    """Whether the dataset is a sample, with the caps the build ran with."""
    caps = config.get("ehrxqa_sampling") or {}
    return ("A sample: per template, questions are drawn with per-step seeded generators (seed "
            f"{seed}); caps per template: {caps.get('train_valid', '80')} train+valid and {caps.get('test', '10')} "
            "test for EHRXQA (paper: 80 and 10); MIMIC-CXR-VQA is balanced per template by answer entropy.")


def missing_text(tables: Mapping) -> str:
    return (f"No. {tables['ehrxqa']['templates_below_cap']} EHRXQA templates have fewer questions than their cap; "
            "`ehrxqa/statistics.md` gives the reason for each.")


def mechanisms_text(config: Mapping) -> str:
    """The tools, and where the released questions' phrasings come from (``paraphraser_text``)."""
    return ("This Dagster pipeline (Python, polars, DuckDB, SQLite); questions paraphrased "
            + paraphraser_text(config.get("paraphraser") or {})
            + "; paraphrases are machine-validated, with a human review file.")


def sampling_strategy_text(seed: int) -> str:
    return (f"Random with fixed seeds: every random step has its own generator seeded by (seed {seed}, step "
            "name), so the same source, configuration and seed give the same files.")


def future_uses_text(sources: Mapping) -> str:
    return ("A release built from the synthetic source is for testing only." if sources["synthetic"] else
            "Train / valid answers inherit the noise of the silver labels.")


def render_datasheet(tables: Mapping, sources: Mapping, code: Mapping, seed: int, config: Mapping,
                     deviations: str | None = None) -> str:
    vqa, ehrxqa = tables["mimic_cxr_vqa"], tables["ehrxqa"]
    overall = vqa["overall"]
    modality = _modality_counts(ehrxqa["c9"])
    sections = [
        "# Datasheet: EHRXQA and MIMIC-CXR-VQA (this build)",
        "The questions of the paper's datasheet (appendix A, after Gebru et al., *Datasheets for Datasets*), "
        "answered for the files in this release folder. Counts come from this build; `statistics/tables.md` "
        f"has the full tables, `{MANIFEST_NAME}` and `{SUMS_NAME}` the checksums, `{LICENSE_FILE}` the terms of use.",
        f"Release version `{release_version(code)}` (package version + code digest). It rebuilds these "
        "published PhysioNet releases:\n\n" + identity_lines(),
        "## A.1 Motivation",
        _qa("For what purpose was the dataset created?", PURPOSE),
        _qa("Who created the dataset and on behalf of which entity?",
            "The dataset design is the EHRXQA paper's (Bae et al., NeurIPS 2023 Datasets and Benchmarks). "
            "This release was rebuilt by the ehrxqa-pipeline from the sources below."),
        _qa("Who funded the creation of the dataset?", "See the paper's datasheet for the original work."),
        "## A.2 Composition",
        _qa("What do the instances represent?", INSTANCES),
        _qa("How many instances are there in total?",
            f"EHRXQA: {_split_counts(ehrxqa['records'])}; by modality "
            + ", ".join(f"{count(n)} {m}" for m, n in modality.items()) + f" (paper: {PAPER['ehrxqa']}). "
            f"MIMIC-CXR-VQA: {_split_counts(vqa['records'])} over {_split_counts(overall['images'])} images "
            f"(paper: {PAPER['mimic_cxr_vqa']})."),
        _qa("Does the dataset contain all possible instances or is it a sample?", sample_text(seed, config)),
        _qa("What data does each instance consist of?",
            "EHRXQA: (question, SQL / NeuralSQL, answer) with template tags; MIMIC-CXR-VQA: (question, image id, "
            "answer) with template and arguments. Record formats as published; EHRXQA records add "
            "`resolved_value` (see *EHRXQA record fields* below)."),
        _qa("Is there a label or target associated with each instance?", "The answer of each question."),
        _qa("Is any information missing from individual instances?", missing_text(tables)),
        _qa("Are relationships between individual instances made explicit?", "No."),
        _qa("Are there recommended data splits?", RECOMMENDED_SPLITS),
        _qa("Are there any errors, sources of noise, or redundancies in the dataset?", NOISE),
        _qa("Is the dataset self-contained, or does it rely on external resources?",
            "It relies on three PhysioNet databases (credentialed access); this build used:\n\n"
            + source_lines(sources)),
        _qa("Does the dataset contain data that might be considered confidential?", CONFIDENTIAL),
        _qa("Does the dataset relate to people? Does it identify subpopulations?", PEOPLE),
        "## A.3 Collection process",
        _qa("How was the data associated with each instance acquired?", ACQUISITION),
        _qa("What mechanisms or procedures were used?", mechanisms_text(config)),
        _qa("What was the sampling strategy?", sampling_strategy_text(seed)),
        _qa("Over what timeframe was the data collected?",
            "MIMIC-IV covers 2008-2019 and MIMIC-CXR 2011-2016 (real sources); the release is rebuilt on demand."),
        _qa("Were any ethical review processes conducted? Consent?", ETHICS),
        "## A.4 Preprocessing / cleaning / labeling",
        _qa("Was any preprocessing / cleaning / labeling done?",
            "Yes; every filter and its counts:\n\n" + filters_section(tables)),
        _qa("Was the raw data saved?", RAW_DATA),
        _qa("Is the software available?",
            f"{code['package']} {code['version']}; source digest `{code['sha256']}` over {code['files']} files "
            f"of {', '.join(code['dirs'])}."),
        "## A.5 Uses",
        _qa("What tasks could the dataset be used for?", TASKS),
        _qa("Is there anything about the composition that might impact future uses?", future_uses_text(sources)),
        "## A.6 Distribution",
        _qa("How will the dataset be distributed? License?", DISTRIBUTION),
        "## A.7 Maintenance",
        _qa("Will the dataset be updated?", MAINTENANCE),
        "## EHRXQA record fields",
        "`ehrxqa/{train,valid,test}.json`: a list of records with these fields, in this order (the published "
        "fields, then `resolved_value`):",
        table(["field", "JSON type", "meaning"], FIELD_DICTIONARY),
        "## Build",
        table(["setting", "value"], [["release version", release_version(code)], ["seed", seed],
                                     ["code", f"{code['version']} / {code['sha256'][:16]}"],
                                     ["source digest", sources["digest"]],
                                     *[[k, json.dumps(v, sort_keys=True)] for k, v in sorted(config.items())]]),
        "## Known deviations from the paper and the published scripts",
        deviations_section(deviations),
    ]
    return "\n\n".join(sections) + "\n"
