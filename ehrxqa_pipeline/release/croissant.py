"""release/croissant.json: the release described in Croissant 1.1 (MLCommons' JSON-LD format for ML datasets),
with the Croissant RAI fields.

Grain: one JSON-LD document per release folder. Source: the release folder's files (their SHA-256, streamed),
the record fields of the released formats (``questions.ehrxqa.records.FIELD_DICTIONARY``,
``questions.mimic_cxr_vqa.records.FIELD_DICTIONARY``), the datasheet's answers (``datasheet``: the RAI fields
say what datasheet.md says, from the same constants and functions), the license note (``license_note``), the
published releases (``identity``) and the code section of the manifest (``manifest.code_section``: the release
version). No time and no absolute path; keys sorted, so the same inputs give the same bytes.

* ``distribution``: one ``cr:FileObject`` per file of ``DISTRIBUTION`` (the six split files and their parquet
  copies under hf/, the EHRXQA template catalog and SQLite databases, the MIMIC-CXR-VQA answer vocabulary and
  the license), each with ``contentUrl`` relative to the release folder, its size and ``sha256``. The DuckDB
  databases are not listed: their bytes differ from build to build (the manifest lists them by content digest),
  so a SHA-256 of them would make two builds' croissant.json differ; the description names them. Nor is
  datasheet.md: it states the source digest, which names how the source was read (a ZIP or its files), and
  croissant.json does not depend on that (its RAI fields hold the datasheet's answers).
* ``recordSet``: ``splits`` (``dataType: cr:Split``: train, valid, test as ``cr:TrainingSplit`` ...), then one
  record set per dataset and split (``ehrxqa_train`` ...: a field per record key, read from the columns of the
  split's parquet copy, ``hf/<dataset>/<split>.parquet``, whose asset checks that it holds the JSON file's
  records; the ``split`` field references ``splits/name``), and the answer vocabulary. One record set per split
  file, not one per dataset over a FileSet, because only a FileObject carries a SHA-256. The records are read
  from parquet rather than from the JSON files because Croissant has no type for a JSON object whose keys vary
  by template (EHRXQA ``value``, ``o_tag``, ``v_tag``, ``resolved_value``, MIMIC-CXR-VQA
  ``template_arguments``) and mlcroissant 1.1.1's reader cannot cast one to text: in parquet they are JSON
  text (``hf``), typed sc:Text and described as such, so every record set reads with mlcroissant.
* RAI (``rai:``, Croissant RAI 1.0 vocabulary as mlcroissant 1.1.1 reads it): collection, preprocessing,
  annotation (machine-generated answers; paraphrases machine-validated with a review file), limitations,
  biases, use cases with the uses the license forbids, personal and sensitive information, social impact,
  maintenance.

``validate(release_dir)`` checks the written file offline: mlcroissant's static validation (errors and
warnings), every FileObject's SHA-256 against the file beside it, and a read of the answer vocabulary and of
both datasets' test records by mlcroissant's own reader (relative ``contentUrl``\\ s resolve against the folder
of croissant.json, so nothing is downloaded).
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path

import pyarrow.parquet as pq

from ehrxqa_pipeline.atomic import write_text
from ehrxqa_pipeline.questions.ehrxqa.records import FIELD_DICTIONARY as EHRXQA_FIELDS
from ehrxqa_pipeline.questions.mimic_cxr_vqa.records import FIELD_DICTIONARY as VQA_FIELDS
from ehrxqa_pipeline.release import datasheet, hf
from ehrxqa_pipeline.hashing import sha256_file
from ehrxqa_pipeline.release.identity import PUBLISHED, release_version
from ehrxqa_pipeline.release.license_note import DUA, LICENSE, LICENSE_FILE, LICENSE_URL, TERMS
from ehrxqa_pipeline.release.tables import SPLITS

CROISSANT_FILE = "croissant.json"
CONFORMS_TO = ["http://mlcommons.org/croissant/1.1", "http://mlcommons.org/croissant/RAI/1.0"]
SPLIT_URLS = {"train": "cr:TrainingSplit", "valid": "cr:ValidationSplit", "test": "cr:TestSplit"}
SPLITS_ID = "splits"
# The spec's Splits section types the url field cr:Split alone; mlcroissant 1.1.1 rejects a field whose only
# dataType is a semantic one, so sc:URL (what the values are) comes first and cr:Split keeps the meaning.
SPLIT_URL_TYPE = ["sc:URL", "cr:Split"]
VOCABULARY_ID = "mimic_cxr_vqa_answer_vocabulary"
# The JSON-LD context of Croissant 1.1 (the spec's appendix, as mlcroissant 1.1.1 writes it: schema.org over https)
CONTEXT = {
    "@language": "en", "@vocab": "https://schema.org/", "sc": "https://schema.org/",
    "cr": "http://mlcommons.org/croissant/", "rai": "http://mlcommons.org/croissant/RAI/",
    "dct": "http://purl.org/dc/terms/",
    "arrayShape": "cr:arrayShape", "citeAs": "cr:citeAs", "column": "cr:column", "conformsTo": "dct:conformsTo",
    "containedIn": "cr:containedIn", "data": {"@id": "cr:data", "@type": "@json"},
    "dataType": {"@id": "cr:dataType", "@type": "@vocab"}, "description": {"@container": "@language"},
    "equivalentProperty": "cr:equivalentProperty", "examples": {"@id": "cr:examples", "@type": "@json"},
    "extract": "cr:extract", "field": "cr:field", "fileProperty": "cr:fileProperty", "fileObject": "cr:fileObject",
    "fileSet": "cr:fileSet", "format": "cr:format", "includes": "cr:includes", "isArray": "cr:isArray",
    "isLiveDataset": "cr:isLiveDataset", "jsonPath": "cr:jsonPath", "key": "cr:key", "md5": "cr:md5",
    "name": {"@container": "@language"}, "parentField": "cr:parentField", "path": "cr:path",
    "recordSet": "cr:recordSet", "references": "cr:references", "regex": "cr:regex", "repeated": "cr:repeated",
    "replace": "cr:replace", "samplingRate": "cr:samplingRate", "separator": "cr:separator", "source": "cr:source",
    "subField": "cr:subField", "transform": "cr:transform",
}
JSON = "application/json"
# (path relative to release/, encodingFormat, description): the files croissant.json lists with their SHA-256.
DATASETS = {"ehrxqa": ("ehrxqa", "EHRXQA", EHRXQA_FIELDS, "id"),
            "mimic-cxr-vqa": ("mimic_cxr_vqa", "MIMIC-CXR-VQA", VQA_FIELDS, "idx")}
PARQUET = "application/x-parquet"


def parquet_file(folder: str, split: str) -> str:
    """The parquet file of ``folder/split.json`` (``hf``), which the dataset record sets read."""
    return f"{hf.OUT_DIR}/{folder}/{split}.parquet"


DISTRIBUTION = (
    *((f"{folder}/{split}.json", JSON, f"{title} {split} split: a JSON list of records in the published format")
      for folder, (_, title, _, _) in DATASETS.items() for split in SPLITS),
    *((parquet_file(folder, split), PARQUET, f"{title} {split} split: the records of {folder}/{split}.json as "
       "parquet (the Hugging Face export; objects whose keys vary by template, and EHRXQA answers, as JSON text)")
      for folder, (_, title, _, _) in DATASETS.items() for split in SPLITS),
    ("ehrxqa/template_catalog.json", JSON, "the EHRXQA question templates, by template index"),
    *((f"ehrxqa/databases/{db}/{name}", fmt, f"EHRXQA {db} database ({'train / valid' if db == 'silver' else 'test'} "
       f"queries run on it): {what}")
      for db in ("silver", "gold") for name, fmt, what in (
          ("mimic_iv_cxr.db", "application/vnd.sqlite3", "SQLite"),
          ("tables.json", JSON, "its schema in the Spider format"))),
    ("mimic-cxr-vqa/answer_vocabulary.json", JSON, "every answer a MIMIC-CXR-VQA question can have (a JSON list)"),
    (LICENSE_FILE, "text/plain", f"the {LICENSE} and {DUA} these files inherit"),
)
# The Croissant dataType of the ways hf stores a field that are not text (strings, lists of strings and JSON text
# are sc:Text; a JSON-text field's description says so)
DATA_TYPES = {hf.INTEGER.name: "sc:Integer", hf.BOOLEAN.name: "sc:Boolean"}
NULLABLE = {"query": "`null` for the opt-in unanswerable questions"}
JSON_TEXT_NOTE = ("In the JSON file {what}; here JSON text ({why}): json.loads gives the record's value back.")
CITATION = ("@inproceedings{bae2023ehrxqa, title={EHRXQA: A Multi-Modal Question Answering Dataset for Electronic "
            "Health Records with Chest X-ray Images}, author={Bae, Seongsu and Kyung, Daeun and Ryu, Jaehee and Cho, "
            "Eunbyeol and Lee, Gyubok and Kweon, Sunjun and Oh, Jungwoo and Ji, Lei and Chang, Eric I-Chao and Kim, "
            "Tackeun and Choi, Edward}, booktitle={Advances in Neural Information Processing Systems 36 (Datasets "
            "and Benchmarks Track)}, year={2023}}")


def file_id(rel: str) -> str:
    """The ``@id`` of the FileObject of ``rel`` (its path; Croissant ids may hold slashes and dots)."""
    return rel


def file_object(release_dir: Path, rel: str, encoding: str, description: str) -> dict:
    """A FileObject for ``release_dir/rel``: relative contentUrl, size and SHA-256 of its bytes (streamed)."""
    path = Path(release_dir) / rel
    if not path.is_file():
        raise FileNotFoundError(f"{rel} is missing from the release folder {Path(release_dir).name}/: materialize "
                                "the asset that writes it (ehrxqa build), then release/croissant")
    return {"@type": "cr:FileObject", "@id": file_id(rel), "name": rel, "description": description,
            "contentUrl": rel, "encodingFormat": encoding, "contentSize": f"{path.stat().st_size} B",
            "sha256": sha256_file(path)}


def _field(record_set: str, file: str, name: str, kind: hf.Kind, meaning: str) -> dict:
    """The field ``name`` of a dataset record set: read from the column of the parquet file ``file``, typed by
    how ``hf`` stores it (a list of strings: ``isArray``; JSON text: sc:Text, described as such)."""
    description = meaning.rstrip(".") + "."
    if kind.as_json:
        what = "an object whose keys vary by template" if kind is hf.OBJECT_JSON else "a list of numbers or strings"
        description += " " + JSON_TEXT_NOTE.format(what=what, why=kind.why)
    if name in NULLABLE:
        description += f" Text, or {NULLABLE[name]}."
    out = {"@type": "cr:Field", "@id": f"{record_set}/{name}", "name": name, "description": description,
           "dataType": DATA_TYPES.get(kind.name, "sc:Text"),
           "source": {"fileObject": {"@id": file_id(file)}, "extract": {"column": name}}}
    if kind is hf.STRINGS:
        out["isArray"] = True
    if name == "split":
        out["references"] = {"field": {"@id": f"{SPLITS_ID}/name"}}
    return out


def splits_record_set() -> dict:
    """The split names and their Croissant meaning (``cr:Split``), as the spec's Splits section writes them."""
    return {"@type": "cr:RecordSet", "@id": SPLITS_ID, "name": SPLITS_ID, "dataType": "cr:Split",
            "description": "The splits of both datasets: " + datasheet.RECOMMENDED_SPLITS,
            "key": {"@id": f"{SPLITS_ID}/name"},
            "field": [{"@type": "cr:Field", "@id": f"{SPLITS_ID}/name", "name": "name", "dataType": "sc:Text",
                       "description": "the split's name, as in the records' `split` field and the file names"},
                      {"@type": "cr:Field", "@id": f"{SPLITS_ID}/url", "name": "url", "dataType": SPLIT_URL_TYPE,
                       "description": "what the split is for"}],
            "data": [{f"{SPLITS_ID}/name": s, f"{SPLITS_ID}/url": SPLIT_URLS[s]} for s in SPLITS]}


def dataset_record_set(folder: str, split: str) -> dict:
    """The records of ``folder/split.json``, read from its parquet copy (``hf``, the same records: its asset's
    blocking check compares them): one field per record key, described by the release's field dictionary."""
    prefix, title, fields, key = DATASETS[folder]
    meanings = {name: meaning for name, _, meaning in fields}
    rs, file = f"{prefix}_{split}", parquet_file(folder, split)
    return {"@type": "cr:RecordSet", "@id": rs, "name": rs, "key": {"@id": f"{rs}/{key}"},
            "description": f"{title}, {split} split: the records of {folder}/{split}.json (read from {file}), one "
                           "per question.",
            "field": [_field(rs, file, name, kind, meanings[name]) for name, kind in hf.EXPORTS[folder].fields]}


def vocabulary_record_set() -> dict:
    file = "mimic-cxr-vqa/answer_vocabulary.json"
    return {"@type": "cr:RecordSet", "@id": VOCABULARY_ID, "name": VOCABULARY_ID,
            "description": f"One record per answer of {file}.",
            "field": [{"@type": "cr:Field", "@id": f"{VOCABULARY_ID}/answer", "name": "answer", "dataType": "sc:Text",
                       "description": "an answer a MIMIC-CXR-VQA question can have",
                       "source": {"fileObject": {"@id": file_id(file)}, "extract": {"jsonPath": "$[*]"}}}]}


def _funnel_lines(tables: Mapping) -> list[str]:
    """The image-selection funnels and rows set aside (datasheet ``filters_section``) as plain sentences."""
    lines = [f"Image selection, {f['cohort']} cohort (images remaining after each rule): "
             + "; ".join(f"{rule} {n:,}" for rule, n in f["steps"]) + "." for f in tables["funnels"]]
    rejected = tables["rejected"]
    lines.append("Rows set aside by every filter of the build (each kept with its reason in a `*_rejected` table): "
                 + ("; ".join(f"{r['table']} {r['reason']} {r['rows']:,}" for r in rejected) if rejected else "none")
                 + ".")
    return lines


def rai_fields(tables: Mapping, sources: Mapping, code: Mapping, seed: int, config: Mapping) -> dict:
    """The Croissant RAI properties, from the datasheet's answers (``datasheet``) and the license note."""
    d = datasheet
    tool = f"{code['package']} {code['version']} (source digest {code['sha256']})"
    releases = ", ".join(f"{d.SOURCE_NAMES.get(k, k)} {v}" for k, v in sources["releases"].items())
    synthetic = (["This folder was built from the synthetic source (generated records in the PhysioNet layout): "
                  "it describes no real patient."] if sources["synthetic"] else [])
    return {
        "rai:dataCollection": f"{d.ACQUISITION} Sources: {releases} (PhysioNet, credentialed access). "
                              f"{d.mechanisms_text(config)}",
        "rai:dataCollectionType": ["Secondary use of existing databases", "Template-based generation"],
        "rai:dataCollectionMissingData": d.missing_text(tables),
        "rai:dataCollectionRawData": d.RAW_DATA,
        "rai:dataPreprocessingProtocol": [d.sample_text(seed, config), d.sampling_strategy_text(seed),
                                          *_funnel_lines(tables)],
        "rai:dataAnnotationProtocol": [
            "Machine-generated, no human labeling per item: " + d.ACQUISITION,
            "Labels: " + d.RECOMMENDED_SPLITS, d.NOISE,
            "Questions paraphrased " + d.paraphraser_text(config.get("paraphraser") or {})
            + "; paraphrases are machine-validated, with a human review file (paraphrase review)."],
        "rai:dataAnnotationPlatform": [f"machine-generated by {tool}"],
        "rai:machineAnnotationTools": [tool, d.mechanisms_text(config)],
        "rai:annotationsPerItem": "One machine-generated answer per question.",
        "rai:dataLimitations": [*synthetic, d.NOISE, d.future_uses_text(sources), d.missing_text(tables)],
        "rai:dataBiases": [d.sample_text(seed, config), d.NOISE, d.PEOPLE],
        "rai:dataUseCases": [f"Intended: {d.TASKS}", f"Purpose: {d.PURPOSE}",
                             *(f"Not permitted ({LICENSE}): {t}" for t in TERMS)],
        "rai:personalSensitiveInformation": [d.CONFIDENTIAL, d.PEOPLE, TERMS[-1]],
        "rai:dataSocialImpact": f"{d.PURPOSE} {d.ETHICS}",
        "rai:dataReleaseMaintenancePlan": d.MAINTENANCE,
    }


def build_croissant(release_dir: Path, *, tables: Mapping, sources: Mapping, code: Mapping, seed: int,
                    config: Mapping) -> dict:
    """The Croissant document of ``release_dir`` (``tables``: ``statistics/tables.json``; ``sources``, ``code``:
    the manifest's sections; ``seed``, ``config``: as the datasheet takes them)."""
    published = [PUBLISHED[k] for k in DATASETS]
    description = (
        "EHRXQA and MIMIC-CXR-VQA rebuilt by the ehrxqa-pipeline: " + " ".join(d for d in (
            datasheet.PURPOSE, datasheet.INSTANCES)) + " It rebuilds "
        + " and ".join(f"{p.name} ({p.url})" for p in published) + ". The release folder also holds the EHRXQA "
        "DuckDB databases (ehrxqa/databases/{silver,gold}/mimic_iv_cxr.duckdb), not listed here because their "
        "bytes differ from build to build (manifest.json lists them by content digest), statistics, plots, "
        "image lists, datasheet.md, README.md and manifest.json / SHA256SUMS.txt with every file's SHA-256.")
    return {
        "@context": CONTEXT, "@type": "sc:Dataset", "conformsTo": CONFORMS_TO,
        "name": "EHRXQA and MIMIC-CXR-VQA (this build)", "description": description,
        "version": release_version(code), "url": published[0].url, "citeAs": CITATION,
        "license": LICENSE_URL, "inLanguage": "en",
        "conditionsOfAccess": f"{LICENSE} and {DUA}: " + " ".join(TERMS),
        "isBasedOn": [datasheet.PHYSIONET.get(k, "{v}").format(v=v) for k, v in sources["releases"].items()]
                     + [p.url for p in published],
        "keywords": ["question answering", "visual question answering", "electronic health records",
                     "chest X-ray", "text-to-SQL", "MIMIC-IV", "MIMIC-CXR"],
        "creator": {"@type": "sc:Organization", "name": f"{code['package']} (rebuild of the EHRXQA paper's design)"},
        "distribution": [file_object(release_dir, rel, fmt, what) for rel, fmt, what in DISTRIBUTION],
        "recordSet": [splits_record_set(),
                      *(dataset_record_set(folder, split) for folder in DATASETS for split in SPLITS),
                      vocabulary_record_set()],
        **rai_fields(tables, sources, code, seed, config),
    }


def dumps(doc: Mapping) -> str:
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_croissant(doc: Mapping, release_dir: Path) -> Path:
    """Write ``release_dir/croissant.json`` atomically."""
    return write_text(Path(release_dir) / CROISSANT_FILE, dumps(doc))


@contextmanager
def _root_logger_kept():
    """mlcroissant logs its validation report with the logging module's root-level functions, which give the root
    logger a stream handler when it has none: every library's records, Dagster's debug lines included, would
    then print in the build's output. The report is the check's result; it stays out of the log, and the root
    logger is left as it was."""
    root, absl = logging.getLogger(), logging.getLogger("absl")
    handlers, level, absl_level = root.handlers[:], root.level, absl.level
    absl.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        absl.setLevel(absl_level)


def validate(release_dir: Path) -> list[str]:
    """Problems of ``release_dir/croissant.json``, offline, each ``error: ...`` or ``warning: ...`` (empty: valid):
    mlcroissant's validation, every FileObject's SHA-256 against the file, and the answer vocabulary read by
    mlcroissant's reader."""
    with _root_logger_kept():
        return _validate(release_dir)


def _validate(release_dir: Path) -> list[str]:
    import mlcroissant as mlc  # imported here: the rest of the module needs no mlcroissant

    release_dir = Path(release_dir)
    path = release_dir / CROISSANT_FILE
    if not path.is_file():
        return [f"error: {CROISSANT_FILE} is missing from {release_dir.name}/: materialize release/croissant"]
    ctx = mlc.Context()
    try:
        dataset = mlc.Dataset.from_metadata(mlc.Metadata.from_file(ctx=ctx, file=path))
    except mlc.ValidationError:
        dataset = None  # its errors are in ctx.issues
    except Exception as e:  # noqa: BLE001 - a document mlcroissant cannot even parse
        return [f"error: {CROISSANT_FILE}: mlcroissant could not read it: {e!r}"]
    problems = [f"error: {e}" for e in sorted(ctx.issues.errors)]
    problems += [f"warning: {w}" for w in sorted(ctx.issues.warnings)]
    problems += check_files(release_dir, json.loads(path.read_text()))
    if dataset is not None and not any(p.startswith("error:") for p in problems):
        problems += _check_reader(dataset, release_dir)
    return problems


def check_files(release_dir: Path, doc: Mapping) -> list[str]:
    """Every FileObject of ``doc``: present beside croissant.json, with a sha256 equal to its bytes'."""
    problems = []
    for f in doc.get("distribution", []):
        if f.get("@type") != "cr:FileObject":
            continue
        rel, expected = f.get("contentUrl", ""), f.get("sha256")
        path = Path(release_dir) / rel
        if not expected:
            problems.append(f"error: {CROISSANT_FILE}: {rel} has no sha256: rematerialize release/croissant")
        elif not path.is_file():
            problems.append(f"error: {CROISSANT_FILE} lists {rel}, missing from the release folder: rebuild the "
                            "release, then release/croissant")
        elif sha256_file(path) != expected:
            problems.append(f"error: {CROISSANT_FILE}: the sha256 of {rel} differs from the file's: the file "
                            "changed after croissant.json was written; rematerialize release/croissant")
    return problems


READ_SPLIT = "test"  # the split whose record sets the check reads through mlcroissant
# Of each, the records read through mlcroissant: enough to show its reader reads the parquet file as the metadata
# describes it. Every record through it took 2.7 s of the demo's release/croissant (4,146 + 1,338, one Python
# object per record), which a gold edit re-runs; the record count comes from the parquet file's footer, and
# every value of every record is release/hf's check's (the parquet against the JSON files).
READ_RECORDS = 200


def _check_reader(dataset, release_dir: Path) -> list[str]:
    """mlcroissant's own reader, on the local files: the answer vocabulary, and the first ``READ_RECORDS`` of
    each dataset's test records, which must be the JSON file's (keys in order), as must the parquet file's count
    of records (``hf``'s check compares every value)."""
    rel = "mimic-cxr-vqa/answer_vocabulary.json"
    try:
        got = [r[f"{VOCABULARY_ID}/answer"] for r in dataset.records(VOCABULARY_ID)]
    except Exception as e:  # noqa: BLE001 - the reader's own error is the message
        return [f"error: mlcroissant could not read {VOCABULARY_ID} from {rel}: {e!r}"]
    want = json.loads((Path(release_dir) / rel).read_text())
    problems = []
    if [g.decode() if isinstance(g, bytes) else g for g in got] != want:
        problems.append(f"error: mlcroissant read {len(got)} records of {VOCABULARY_ID}, {rel} holds {len(want)}")
    for folder, (prefix, _, _, key) in DATASETS.items():
        rs, file = f"{prefix}_{READ_SPLIT}", f"{folder}/{READ_SPLIT}.json"
        want = [r[key] for r in json.loads((Path(release_dir) / file).read_text())]
        parquet = parquet_file(folder, READ_SPLIT)
        try:
            got = [r[f"{rs}/{key}"] for r in itertools.islice(dataset.records(rs), READ_RECORDS)] if want else []
            count = pq.ParquetFile(Path(release_dir) / parquet).metadata.num_rows if want else 0
        except Exception as e:  # noqa: BLE001
            problems.append(f"error: mlcroissant could not read {rs} from {parquet}: {e!r}")
            continue
        if got != want[:READ_RECORDS] or count != len(want):
            problems.append(f"error: {rs}: {parquet} holds {count} records, {file} {len(want)}, or mlcroissant "
                            f"read its first {len(got)} in another order or with other {key} values: rematerialize "
                            "release/hf, then release/croissant")
    return problems
