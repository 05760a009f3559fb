"""release/hf: the two datasets as parquet with a dataset card, for Hugging Face ``datasets`` on this machine.

Grain: one parquet file per dataset and split, one row per record of the split's JSON file in the file's order,
and one dataset card per dataset. Source: the release JSON files (``<dataset>/{train,valid,test}.json``, read by
DuckDB: no loop over records in Python), the source releases read (``manifest.source_releases``) and the release
version (``identity.release_version``). Files: EHRXQA_HOME/release/hf/{ehrxqa,mimic-cxr-vqa}/{train,valid,
test}.parquet and README.md (the card: YAML front matter with ``configs``, then the text), so that
``datasets.load_dataset("<release>/hf/ehrxqa")`` loads the three splits offline. Nothing here uploads anything:
the PhysioNet data use agreement forbids posting the files to any hub, and the card says so.

Schema: one explicit schema per dataset (``EXPORTS``: a kind per record field, in the order of the records
modules' ``RECORD_FIELDS``), shared by its three splits (``datasets`` requires the features of all splits to
agree). Every record is checked against it in SQL; a record that does not fit raises ``RecordError`` naming the
file, the record's position and the field. Representation: strings, integers and booleans as such; a list of
strings (``t_tag``, MIMIC-CXR-VQA ``answer``) as ``list<string>``; objects whose keys vary by template (EHRXQA
``value``, ``o_tag``, ``v_tag``, ``resolved_value``, MIMIC-CXR-VQA ``template_arguments``) and EHRXQA ``answer``
(its entries mix strings, integers and floats, which no Arrow list holds) as JSON text, which ``json.loads``
turns back into the record's value exactly. A struct instead would give a column the union of every record's
keys (absent keys become nulls) and a different type per split. The content is the JSON files' (the asset check
``matches_json`` compares every record); only its representation differs.

Deterministic bytes: fixed writer options (``PARQUET_OPTIONS``: zstd at a fixed level; ``ROW_GROUP_ROWS``;
no timestamp is written; ``created_by`` names the pyarrow version), so two builds of the same inputs write
byte-identical files; the card holds no time and no absolute path. Files are written atomically
(``ehrxqa_pipeline.atomic``).

Unchanged splits are not converted again (``write_export(memo=...)``, a JSON file outside the release): a split
whose JSON file, this module and the pyarrow and DuckDB versions are those of its last conversion, and whose
parquet file is still the one written then (content hashes), keeps its file and its ``matches_json`` comparison.
A gold label edit rewrites the test splits only, so the silver train and valid splits (most of the records) are
not read again.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from ehrxqa_pipeline.atomic import replacing, write_text
from ehrxqa_pipeline.hashing import combine, file_digest
from ehrxqa_pipeline.markdown import table
from ehrxqa_pipeline.questions.ehrxqa.records import RECORD_FIELDS as EHRXQA_FIELDS
from ehrxqa_pipeline.questions.mimic_cxr_vqa.records import RECORD_FIELDS as VQA_FIELDS
from ehrxqa_pipeline.release.identity import PUBLISHED, release_version
from ehrxqa_pipeline.release.license_note import DUA, LICENSE, LICENSE_FILE, LICENSE_URL, TERMS
from ehrxqa_pipeline.release.memo import OutputMemo
from ehrxqa_pipeline.release.tables import SPLITS
from ehrxqa_pipeline.sources.datasets import DATASETS

OUT_DIR = "hf"
CARD_FILE = "README.md"
LICENSE_NAME = "physionet-credentialed-health-data-license-1.5.0"  # the card's license_name (an id: lower-case)
ROW_GROUP_ROWS = 100_000
PARQUET_OPTIONS = dict(compression="zstd", compression_level=9, use_dictionary=True, write_statistics=True,
                       version="2.6", data_page_version="1.0", store_schema=True, write_page_index=False)
# size_categories of the Hugging Face dataset card, from the records of all splits together
SIZE_CATEGORIES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
                   (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"), (1_000_000_000, "100M<n<1B"))


class RecordError(ValueError):
    """A release JSON file whose records do not fit the export's schema."""


@dataclass(frozen=True)
class Kind:
    """How a record field is stored: its Arrow type, the JSON types it accepts (DuckDB's ``json_type`` names)
    and the ``datasets`` feature of the column (the card's ``dataset_info``)."""

    name: str  # as the card and the errors say it
    arrow: pa.DataType
    json_types: tuple[str, ...]
    feature: Mapping[str, str]
    element: str | None = None  # the JSON type of every element (lists)
    as_json: bool = False  # stored as JSON text
    why: str = ""  # why JSON text, for the card


STRING = Kind("string", pa.string(), ("VARCHAR",), {"dtype": "string"})
INTEGER = Kind("integer", pa.int64(), ("BIGINT", "UBIGINT"), {"dtype": "int64"})
BOOLEAN = Kind("boolean", pa.bool_(), ("BOOLEAN",), {"dtype": "bool"})
STRINGS = Kind("list of strings", pa.list_(pa.string()), ("ARRAY",), {"list": "string"}, element="VARCHAR")
OBJECT_JSON = Kind("object, stored as JSON text", pa.string(), ("OBJECT",), {"dtype": "string"}, as_json=True,
                   why="an object's keys vary by template, and a struct column would hold the union of every "
                       "record's keys, absent ones as nulls")
ARRAY_JSON = Kind("array, stored as JSON text", pa.string(), ("ARRAY",), {"dtype": "string"}, as_json=True,
                  why="the answer's entries mix strings, integers and floats, which no Arrow list holds")


@dataclass(frozen=True)
class Export:
    """One dataset's export: ``folder`` is its release folder (``<folder>/{split}.json``) and ``hf/<folder>``."""

    folder: str
    fields: tuple[tuple[str, Kind], ...]  # in record order
    nullable: frozenset[str]  # fields whose JSON value may be null
    task_categories: tuple[str, ...]
    tags: tuple[str, ...]
    about: str  # what a record is, for the card
    images: str  # how records name their images, for the card

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([pa.field(name, kind.arrow, nullable=name in self.nullable) for name, kind in self.fields])

    @property
    def json_columns(self) -> tuple[str, ...]:
        return tuple(name for name, kind in self.fields if kind.as_json)

    @property
    def published(self):
        return PUBLISHED[self.folder]


def _fields(order: Sequence[str], kinds: Mapping[str, Kind], where: str) -> tuple[tuple[str, Kind], ...]:
    """``kinds`` in record order; a field of the records without a kind (or a kind without a field) is an error
    here, at import, rather than a column silently left out."""
    if set(order) != set(kinds):
        raise RuntimeError(f"ehrxqa_pipeline/release/hf.py: the kinds of {where} ({sorted(kinds)}) do not name the "
                           f"record fields {list(order)}: give every record field a kind")
    return tuple((name, kinds[name]) for name in order)


EHRXQA = Export(
    "ehrxqa",
    _fields(EHRXQA_FIELDS, {
        "db_id": STRING, "split": STRING, "id": INTEGER, "question": STRING, "template": STRING, "query": STRING,
        "value": OBJECT_JSON, "q_tag": STRING, "t_tag": STRINGS, "o_tag": OBJECT_JSON, "v_tag": OBJECT_JSON,
        "tag": STRING, "para_type": STRING, "is_impossible": BOOLEAN, "answer": ARRAY_JSON,
        "resolved_value": OBJECT_JSON}, "EHRXQA"),
    frozenset({"query"}),  # null for the opt-in unanswerable questions
    ("table-question-answering", "visual-question-answering", "question-answering"),
    ("medical", "electronic-health-records", "chest-x-ray", "text-to-sql"),
    "a question on a patient's electronic health record (MIMIC-IV) and chest X-ray studies (MIMIC-CXR-JPG with "
    "Chest ImaGenome labels), its NeuralSQL query (SQL plus `func_vqa` on an image) and the answer",
    "EHRXQA queries name studies by `study_id` and run on the split's database in `../../ehrxqa/databases/` "
    "(train, valid: silver; test: gold), whose TB_CXR table maps studies to images",
)
MIMIC_CXR_VQA = Export(
    "mimic-cxr-vqa",
    _fields(VQA_FIELDS, {
        "split": STRING, "idx": INTEGER, "subject_id": INTEGER, "study_id": INTEGER, "image_id": STRING,
        "image_path": STRING, "question": STRING, "semantic_type": STRING, "content_type": STRING,
        "template": STRING, "template_program": STRING, "template_arguments": OBJECT_JSON, "answer": STRINGS},
        "MIMIC-CXR-VQA"),
    frozenset(),
    ("visual-question-answering",),
    ("medical", "chest-x-ray"),
    "a question on one chest X-ray image (MIMIC-CXR-JPG, labels from Chest ImaGenome) with its template and "
    "answer",
    "`image_path` is the JPEG's path under MIMIC-CXR-JPG's `files/` folder",
)
EXPORTS: dict[str, Export] = {e.folder: e for e in (EHRXQA, MIMIC_CXR_VQA)}


def _problem(name: str, x: str, kind: Kind, nullable: bool) -> str:
    """SQL: NULL when ``x`` (the JSON value of field ``name``, NULL when absent) fits ``kind``, else what is
    wrong with it."""
    found = f"json_type({x})"
    accepted = ", ".join(f"'{t}'" for t in (*kind.json_types, *(("NULL",) if nullable else ())))
    fits, describe = f"{found} IN ({accepted})", found
    if kind is INTEGER:
        fits += f" AND ({found} = 'NULL' OR TRY_CAST({x} AS BIGINT) IS NOT NULL)"
        describe = f"CASE WHEN {found} = 'UBIGINT' THEN 'UBIGINT above the int64 range' ELSE {found} END"
    if kind.element is not None:
        others = f"list_filter(json_type({x}, '$[*]'), t -> t <> '{kind.element}')"
        fits += f" AND len({others}) = 0"
        describe = f"CASE WHEN {found} = 'ARRAY' THEN 'ARRAY with a ' || {others}[1] || ' element' ELSE {found} END"
    wanted = kind.name + (" or null" if nullable else "")
    return (f"CASE WHEN {x} IS NULL THEN '{name}: missing' WHEN NOT ({fits}) "
            f"THEN '{name}: ' || {describe} || ', not {wanted}' END")


def _value(x: str, kind: Kind) -> str:
    """SQL: ``x`` (a field's JSON value) as its column holds it; casts are guarded, so a misfit is reported by
    ``_problem``, not raised by DuckDB."""
    if kind.as_json:
        return f"CASE WHEN json_type({x}) = 'NULL' THEN NULL ELSE {x}::VARCHAR END"
    if kind is STRINGS:
        return f"CASE WHEN json_type({x}) = 'ARRAY' THEN TRY_CAST({x} AS VARCHAR[]) END"
    if kind is STRING:
        return f"{x} ->> '$'"
    return f"TRY_CAST({x} AS {'BIGINT' if kind is INTEGER else 'BOOLEAN'})"


def records_sql(export: Export) -> str:
    """SQL over ``read_json_objects(?)``: one row per record, in the file's order, with a column per field and
    ``_problems`` (what does not fit the schema; empty when the record fits). Each record is parsed once
    (``json_extract`` of every field's path); the checks parse the extracted values only."""
    names = [n for n, _ in export.fields]
    paths = ", ".join("'$.\"" + n + "\"'" for n in names)
    values = [(n, k, f"v[{i}]") for i, (n, k) in enumerate(export.fields, start=1)]
    columns = ", ".join(f'{_value(x, k)} AS "{n}"' for n, k, x in values)
    problems = ", ".join(["CASE WHEN t <> 'OBJECT' THEN 'the record: ' || t || ', not an object' END",
                          *(_problem(n, x, k, n in export.nullable) for n, k, x in values)])
    known = "[" + ", ".join(f"'{n}'" for n in names) + "]"
    return (f"WITH r AS (SELECT json_type(json) AS t, coalesce(json_keys(json), []) AS keys, "
            f"json_extract(json, [{paths}]) AS v FROM read_json_objects(?, format = 'array')) "
            f"SELECT {columns}, list_filter([{problems}], p -> p IS NOT NULL) || list_transform("
            f"list_filter(keys, k -> NOT list_contains({known}, k)), k -> k || ': not a field of the schema') "
            "AS _problems FROM r")


@contextmanager
def _connection(con: duckdb.DuckDBPyConnection | None) -> Iterator[duckdb.DuckDBPyConnection]:
    """``con``, or an in-memory database of its own for one call (starting one takes about 13 ms: a caller that
    reads several files passes one)."""
    if con is not None:
        yield con
        return
    with duckdb.connect() as own:
        yield own


def read_records(path: Path, export: Export, con: duckdb.DuckDBPyConnection | None = None) -> pa.Table:
    """The records of the JSON file ``path`` (a JSON list) as a table of ``export.schema``, in the file's order.
    Raises ``RecordError`` (file, record position, field) when a record does not fit. ``con``: an in-memory
    DuckDB connection to read with (else one of its own)."""
    path = Path(path)
    try:
        with _connection(con) as db:
            frame = db.execute(records_sql(export), [str(path)]).fetch_arrow_table()
    except duckdb.Error as e:
        raise RecordError(f"{path}: not a JSON list of {export.folder} records ({e}); rebuild it "
                          f"(materialize its release asset)") from e
    bad = pc.indices_nonzero(pc.greater(pc.list_value_length(frame["_problems"]), 0))
    if len(bad):
        first = bad[0].as_py()
        problems = "; ".join(frame["_problems"][first].as_py())
        raise RecordError(f"{path}: {len(bad)} of {frame.num_rows} records do not fit the {export.folder} export's "
                          f"schema; the first is record {first} (0-based): {problems}. Fix the records (rebuild "
                          f"the release JSON) or, where the record format changed on purpose, the field kinds in "
                          f"ehrxqa_pipeline/release/hf.py (EXPORTS)")
    return frame.drop_columns(["_problems"]).cast(export.schema)


def write_parquet(frame: pa.Table, path: Path) -> Path:
    """``frame`` written to ``path`` atomically with ``PARQUET_OPTIONS`` in row groups of ``ROW_GROUP_ROWS`` (the
    same rows give the same bytes). An empty split gets no row group at all: a row group of 0 rows trips readers
    that size their batches by the first row group (``datasets``: "BatchSize must be greater than 0")."""
    with replacing(path) as tmp:
        with pq.ParquetWriter(tmp, frame.schema, **PARQUET_OPTIONS) as writer:
            if frame.num_rows:
                writer.write_table(frame, row_group_size=ROW_GROUP_ROWS)
    return Path(path)


def size_category(n: int) -> str:
    for limit, label in SIZE_CATEGORIES:
        if n < limit:
            return label
    return "n>1B"


def card_metadata(export: Export, counts: Mapping[str, int], sources: Mapping) -> dict:
    """The card's YAML front matter (Hugging Face dataset card fields) for split record ``counts`` and the
    source releases read (``sources["releases"]``: key -> version). A split without records is left out of
    ``configs``: ``datasets`` cannot load an empty split ("corresponds to no data"); its file is still written."""
    return {
        "pretty_name": export.published.title,
        "license": "other",
        "license_name": LICENSE_NAME,
        "license_link": LICENSE_URL,
        "language": ["en"],
        "multilinguality": "monolingual",
        "task_categories": list(export.task_categories),
        "tags": list(export.tags),
        "annotations_creators": ["machine-generated"],
        "language_creators": ["machine-generated"],
        "source_datasets": [f"{DATASETS[k].title} {v}" for k, v in sources["releases"].items()],
        "size_categories": [size_category(sum(counts.values()))],
        "configs": [{"config_name": "default",
                     "data_files": [{"split": s, "path": f"{s}.parquet"} for s in SPLITS if counts[s]]}],
        "dataset_info": {"config_name": "default",
                         "features": [{"name": n, **k.feature} for n, k in export.fields]},
    }


def _decode_snippet(export: Export, counts: Mapping[str, int]) -> str:
    return f'''```python
import json
from datasets import load_dataset

# from the release folder; offline, nothing is downloaded (set HF_DATASETS_OFFLINE=1 to make sure)
ds = load_dataset("{OUT_DIR}/{export.folder}")  # DatasetDict: {", ".join(s for s in SPLITS if counts[s])}

JSON_COLUMNS = {export.json_columns!r}  # JSON text: json.loads gives the record's value back


def decode(batch):
    return {{c: [json.loads(v) for v in batch[c]] if c in JSON_COLUMNS else batch[c] for c in batch}}


test = ds["test"].with_transform(decode)
test[0]  # == the first record of {export.folder}/test.json
```'''


def render_card(export: Export, counts: Mapping[str, int], sources: Mapping, code: Mapping) -> str:
    """The text of ``hf/<folder>/README.md``: YAML front matter, then what the files are, the license and data use
    agreement, how to load and decode them, and the records per split."""
    p, folder = export.published, export.folder
    front = yaml.safe_dump(card_metadata(export, counts, sources), sort_keys=False, allow_unicode=True, width=120)
    kinds = [[f"`{n}`", k.name + (" or null" if n in export.nullable else ""), f"`{k.arrow}`"]
             for n, k in export.fields]
    sections = [
        f"# {p.title}: parquet for Hugging Face `datasets` (local use only)",
        f"The records of `{folder}/{{{','.join(SPLITS)}}}.json` of this release folder, one parquet file per "
        f"split, in the same order: each record is {export.about}. The release rebuilds **{p.name}** ({p.url}); "
        f"release version `{release_version(code)}` (see `../../manifest.json` for the source versions, seed and "
        "configuration, `../../datasheet.md` for what each field means).",
        "## License and data use agreement",
        f"License: {LICENSE} ({LICENSE_URL}); data use agreement: {DUA}. These files are derived from "
        f"credentialed PhysioNet databases and inherit their terms (`../../{LICENSE_FILE}`):\n\n"
        + "\n".join(f"- {t}" for t in TERMS)
        + "\n\nSo this folder is for `datasets` on a machine of a credentialed user: never push it to the Hugging "
          "Face Hub or any other hub, nor share it. Loading it needs no network.",
        *([("This folder was built from the synthetic source (generated records in the PhysioNet layout, no real "
            "patient); a folder built from the PhysioNet sources is bound by the terms above.")]
          if sources.get("synthetic") else []),
        "## Loading",
        _decode_snippet(export, counts),
        "## Columns",
        f"One schema for the three splits. Stored as JSON text: {', '.join(f'`{c}`' for c in export.json_columns)} "
        f"({'; '.join(dict.fromkeys(k.why for _, k in export.fields if k.as_json))}); `json.loads` gives back the "
        "JSON file's value exactly. That is a representation, not a difference of content: every record "
        "equals the JSON file's (the build's check `matches_json` compares them all).",
        table(["field", "JSON value", "parquet type"], kinds),
        "## Images",
        "The chest X-ray images are not included: `../../images/{split}.csv` lists the MIMIC-CXR-JPG images each "
        f"split uses and `../../images/README.md` says how a credentialed user downloads them. {export.images}.",
        "## Records per split",
        table(["split", "file", "records"], [[s, f"`{s}.parquet`", f"{counts[s]:,}" + (
            "" if counts[s] else " (not in `configs`: `datasets` cannot load an empty split)")] for s in SPLITS]),
        "## Source datasets",
        "\n".join(f"- {DATASETS[k].title} {v}" for k, v in sources["releases"].items()),
    ]
    return f"---\n{front}---\n\n" + "\n\n".join(sections) + "\n"


def write_export(release_dir: Path, sources: Mapping, code: Mapping, memo: Path | None = None
                 ) -> dict[str, dict[str, dict]]:
    """Write ``release_dir/hf/<folder>/{split}.parquet`` and ``README.md`` for every dataset of ``EXPORTS`` from
    ``release_dir/<folder>/{split}.json``. Returns dataset -> split -> {"rows", "bytes", "compared"} (``compare``
    of the two files) and "card" -> its path. ``memo``: the JSON file that remembers each split's conversion;
    a split whose inputs and parquet file are as it remembers is left as it is (module docstring)."""
    release_dir, done = Path(release_dir), OutputMemo(memo)
    out: dict[str, dict[str, dict]] = {}
    with duckdb.connect() as con:  # one in-memory database reads every split
        for folder, export in EXPORTS.items():
            out[folder] = _export(release_dir, folder, export, done, sources, code, con)
    done.save()
    return out


def _export(release_dir: Path, folder: str, export: Export, done: OutputMemo, sources: Mapping, code: Mapping,
            con: duckdb.DuckDBPyConnection) -> dict[str, dict]:
    """One dataset of ``write_export``: its splits (each converted unless ``done`` keeps it) and its card."""
    target, written = release_dir / OUT_DIR / folder, {}
    for split in SPLITS:
        source, parquet = release_dir / folder / f"{split}.json", target / f"{split}.parquet"
        if not source.is_file():
            raise FileNotFoundError(f"{source}: missing; materialize the {folder} release before release/hf")
        name, inputs = f"{folder}/{split}", combine(file_digest(source), _CODE)
        facts = done.kept(name, inputs, parquet)
        if facts is None:
            frame = read_records(source, export, con)
            write_parquet(frame, parquet)
            facts = done.record(name, inputs, file_digest(parquet), {
                "rows": frame.num_rows, "compared": compare(release_dir, export, split, con)})
        written[split] = {"rows": facts["rows"], "bytes": parquet.stat().st_size, "compared": facts["compared"]}
    card = write_text(target / CARD_FILE, render_card(export, {s: w["rows"] for s, w in written.items()},
                                                      sources, code))
    return {**written, "card": {"path": str(card), "bytes": card.stat().st_size}}


# What else a split's conversion depends on: this module (its schema and writer options) and the libraries.
_CODE = combine(file_digest(Path(__file__)), pa.__version__, duckdb.__version__)


def compare(release_dir: Path, export: Export, split: str, con: duckdb.DuckDBPyConnection | None = None) -> dict:
    """The parquet file of ``export``'s ``split`` against its JSON file: record counts and how many records differ
    (``first``: up to 5 positions). Each side is written as canonical JSON by DuckDB, independently of
    ``read_records``: the JSON file's records as read, the parquet rows rebuilt as objects (JSON-text columns
    parsed back), compared position by position in Arrow."""
    release_dir = Path(release_dir)
    source = release_dir / export.folder / f"{split}.json"
    parquet = release_dir / OUT_DIR / export.folder / f"{split}.parquet"
    rebuilt = ", ".join(f"'{n}', " + (f'json("{n}")' if k.as_json else f'"{n}"') for n, k in export.fields)
    with _connection(con) as db:
        want = db.execute("SELECT json(json)::VARCHAR AS r FROM read_json_objects(?, format = 'array')",
                          [str(source)]).fetch_arrow_table()["r"]
        got = db.execute(f"SELECT json_object({rebuilt})::VARCHAR AS r FROM read_parquet(?)",
                         [str(parquet)]).fetch_arrow_table()["r"]
    n = min(len(want), len(got))
    differ = pc.indices_nonzero(pc.invert(pc.fill_null(pc.equal(want[:n], got[:n]), False)))
    return {"json_records": len(want), "parquet_rows": len(got), "differing": len(differ) + abs(len(want) - len(got)),
            "first": differ[:5].to_pylist()}
