"""Source validation: is SOURCE_ROOT a complete, intact PhysioNet download the pipeline can build from?

``validate_source`` checks, in order: the layout (root, dataset folders, every file of ``schema.TABLES``
and the semantics files), gzip integrity, required columns, the type of every required value (over the
whole file), the table's data contract (``data_contracts/ingest.<table>.yaml``: the refusal reason of every
row, computed by the expression ingestion uses), key uniqueness, every contract foreign key (within
MIMIC-IV and between datasets, e.g. CXR subjects -> MIMIC-IV patients) with the build's measure and limit,
cross-source id consistency (Chest ImaGenome vs CXR metadata, gold vs silver) and the image tree. Errors block a build (a
table whose quarantine would pass the contract's ``max_rejected_fraction`` is an error, as the build's
quarantine check fails on it; so is a foreign key above its ``max_orphan_fraction``); warnings describe
what ingestion will quarantine or what downstream steps will miss; notes count rows that are out of scope (a contract scope rule: real data the pipeline skips).

Memory stays bounded at full scale: each table is read once as a polars stream; type failures are counted
per batch, key columns are streamed into DuckDB (which spills its aggregate to disk past
``DUCKDB_MEMORY_LIMIT``); only per-image id sets (a few hundred thousand values) are held in memory.
Messages hold counts and file/column names, never record values, except the first unparseable raw value
of a column, which the user needs to find the damage.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa

from ehrxqa_pipeline.contracts import ContractError, load_contract, reason_expr, split_reasons

from . import readers
from .errors import SourceError
from .files import quoting
from .readers import PARSE_ERROR, POLARS_TYPES, ROW, TYPE_DESCRIPTIONS, parse_error_expr, parse_expr, parse_failed
from .report import Problem, ValidationReport
from .datasets import DATASETS
from .layout import SourceLayout, holds_datasets
from .schema import TABLES, SourceFile
from .semantics import read_semantics, semantics_paths
from .validate_ids import UNKNOWN_ID_ERROR_FRACTION, IdChecks

# DuckDB spills the key-uniqueness aggregate to disk beyond this.
DUCKDB_MEMORY_LIMIT = "2GB"

_FIX_TYPES = ("re-download the file from PhysioNet; if it was edited, restore each bad value (or leave it "
              "empty). Ingestion quarantines rows whose values do not parse")


class _Validator(IdChecks):
    def __init__(self, layout: SourceLayout, cache_dir: Path | None, tmp: str):
        self.root = layout  # readers take the layout wherever they take a root
        self.cache_dir = cache_dir
        self.report = ValidationReport(layout.root, stats={"rows": {}, "duplicate_keys": {}, "overlaps": {},
                                                           "foreign_keys": {}, "quarantine": {}, "out_of_scope": {},
                                                           "images_found": None, "releases": {}})
        self.usable: set[str] = set()  # tables that passed every error-level check
        self.parent_keys: dict[tuple, pl.DataFrame] = {}  # foreign keys' parent key sets (IdChecks._parent_keys)
        self.con = duckdb.connect(config={"memory_limit": DUCKDB_MEMORY_LIMIT, "temp_directory": tmp,
                                          "preserve_insertion_order": False})

    def add(self, severity: str, file: str, message: str, fix: str, column: str | None = None) -> None:
        self.report.problems.append(Problem(severity, file, column, message, fix))

    # -- layout ---------------------------------------------------------------------------------------
    def check_layout(self) -> bool:
        root = self.root.root
        if not root.is_dir():
            self.add("error", str(root), "source root does not exist or is not a folder",
                     "set EHRXQA_SOURCE_ROOT (or pass ROOT) to the folder holding mimiciv/, mimic-cxr-jpg/ "
                     "and chest-imagenome/")
            return False
        if not holds_datasets(root):
            hint = _find_physionet_root(root)
            self.add("error", ".", "does not look like a PhysioNet root: none of "
                     f"{', '.join(DATASETS)} is below it (as {{name}}/{{version}}, physionet.org/files/... or the "
                     "unpacked ZIP folders such as mimic-iv-2.2)",
                     f"point at {hint}, which has them" if hint else
                     "point at the folder that holds mimiciv/2.2, mimic-cxr-jpg/2.0.0 and chest-imagenome/1.0.0")
            return False
        releases = self.report.stats["releases"]
        for key, d in DATASETS.items():
            try:
                folder, version = self.root.dataset_dir(key), self.root.version(key)
            except SourceError as err:  # missing, or a release not named by the settings
                self.report.problems.append(Problem.from_error(err))
                continue
            releases[key] = {"title": d.title, "version": version, "paper": d.paper,
                             "folder": self.root.relative(folder)}
            if version != d.paper:
                self.add("warning", self.root.relative(folder),
                         f"{d.title} {version} is read (opted in); the EHRXQA paper used {d.paper}, so counts "
                         "and answers will differ from the published dataset",
                         "none needed if intended; the manifest and datasheet record the release read")
        return True

    # -- one table --------------------------------------------------------------------------------------
    def check_table(self, sf: SourceFile) -> None:
        rows = self.report.stats["rows"]
        rows[sf.name] = None
        try:
            self.root.dataset_dir(sf.dataset)
        except SourceError:  # the dataset's folder is missing or refused: reported once by check_layout
            self.report.files[sf.release_path] = {"table": sf.name, "rows": None, "status": "MISSING"}
            return
        try:
            path = readers.resolve(self.root, sf.name)
        except SourceError as err:
            self.report.files[err.file] = {"table": sf.name, "rows": None, "status": "MISSING"}
            self.report.problems.append(Problem.from_error(err))
            return
        rel = readers.file_label(self.root, sf.name)
        entry = self.report.files.setdefault(rel, {"table": sf.name, "rows": None})
        if sf.gzip_ok and path.suffix != ".gz" and path.with_name(path.name + ".gz").is_file():
            self.add("warning", rel, f"both {path.name} and {path.name}.gz exist; the plain file is read",
                     "delete the one you do not want read (the plain file wins)")
        try:
            header = readers.read_header(self.root, sf.name)
            lf = readers.scan_raw(self.root, sf.name, self.cache_dir, row_index_name=ROW)
            n, bad, dups, reasons = self._scan(lf, sf, header)
        except SourceError as err:
            self.report.problems.append(Problem.from_error(err))
            return
        except (pl.exceptions.PolarsError, duckdb.Error, OSError) as exc:
            self.report.problems.append(Problem.from_error(readers.read_failure(self.root, sf.name, exc)))
            return
        entry["rows"] = rows[sf.name] = n
        mode = quoting(self.root, sf.name)
        if mode.literal:
            self.add("warning", rel, f"{mode.reason}; {n:,} rows read", "none needed: ingestion reads the file "
                     "the same way; to restore standard quoting, quote such fields as pandas' to_csv does "
                     "(\"...\" with inner quotes doubled)")
        for column, (count, row, value) in bad.items():
            self.report.problems.append(Problem.from_error(SourceError(
                rel, f"column '{column}' has a value that is not {TYPE_DESCRIPTIONS[sf.types[column]]}",
                column=column, row=row, value=value, count=count, fix=_FIX_TYPES)))
        if dups:
            dup_rows, dup_keys = dups
            self.report.stats["duplicate_keys"][sf.name] = dup_rows
            rows_repeat = "row repeats" if dup_rows == 1 else "rows repeat"
            self.add("warning", rel, f"{dup_rows:,} {rows_repeat} the key ({', '.join(sf.key)}) of an earlier row "
                     f"({dup_keys:,} key{'s' * (dup_keys != 1)} affected)",
                     "none needed if expected: ingestion keeps one row per key and quarantines the rest; "
                     "otherwise re-download the file", column=", ".join(sf.key))
        self._check_contract(sf, rel, n, reasons, dups, type_errors=bool(bad))
        if not bad:
            self.usable.add(sf.name)

    def _check_contract(self, sf: SourceFile, rel: str, n: int, reasons: dict[str, int], dups, type_errors: bool):
        """What ingestion will refuse: out-of-scope rows (a note), quarantined rows (a warning, or an error
        above the contract's limit -- unless a type error already fails the table)."""
        contract = _contract(sf.name)
        if contract is None:
            return
        quarantined, out_of_scope = split_reasons(reasons)
        if dups and tuple(sf.key) == contract.primary_key:
            quarantined["duplicate_key"] = dups[0]  # ingestion keeps the first row of a key
        self.report.stats["quarantine"][sf.name] = quarantined
        self.report.stats["out_of_scope"][sf.name] = out_of_scope
        skipped = sum(out_of_scope.values())
        if skipped:
            self.add("note", rel, f"{skipped:,} of {n:,} rows are out of scope ({_counts(out_of_scope)}): "
                     "ingestion skips them into its rejected table, outside the quarantine limit",
                     "none needed: the pipeline does not use these rows ("
                     + "; ".join(f"{r.name}: {r.why}" for r in contract.scope) + ")")
        refused = sum(quarantined.values())
        if not refused or type_errors:
            return
        in_scope = n - skipped
        share = refused / in_scope if in_scope else 0.0
        rows = "rows in scope" if contract.scope else "rows"
        shown = _counts({r: c for r, c in quarantined.items() if r != "duplicate_key"})
        where = f"ingest.{sf.name}_rejected"
        column = _reason_column(max(quarantined, key=quarantined.get))
        if share > contract.max_rejected_fraction:
            self.add("error", rel, f"{refused:,} of {in_scope:,} {rows} ({share:.2%}) would be quarantined "
                     f"({_counts(quarantined)}); the contract allows {contract.max_rejected_fraction:.2%}",
                     f"re-download the file from PhysioNet; if it was edited, restore the refused values "
                     f"(the build's quarantine check fails above the limit: {contract.why_max_rejected})",
                     column=column)
        elif shown:
            self.add("warning", rel, f"{refused:,} of {in_scope:,} {rows} ({share:.2%}) will be quarantined "
                     f"({_counts(quarantined)}), within the contract's {contract.max_rejected_fraction:.2%}",
                     f"none needed if expected: ingestion writes them with their reasons to {where}",
                     column=column)

    def _scan(self, lf: pl.LazyFrame, sf: SourceFile, header: list[str]):
        """One streaming pass: row count, per-column type failures, each row's contract reason (as ingestion
        computes it), duplicate keys among the rows ingestion keeps (via DuckDB)."""
        types = sf.types
        checked = [c for c in sf.required if types[c] != "str"]
        key = list(sf.key) if sf.key and all(k in header for k in sf.key) else []
        typed = [c for c in header if c in types]  # what ingestion types (readers.scan_table)
        exprs = [pl.col(ROW).cast(pl.Int64)]
        for i, c in enumerate(checked):
            failed = parse_failed(c, types[c])
            exprs += [failed.alias(f"_bad{i}"), pl.when(failed).then(pl.col(c)).alias(f"_raw{i}")]
        exprs += [parse_expr(k, types[k]).alias(f"_key{i}") for i, k in enumerate(key)]
        # Projecting every column makes polars check each row's field count (a scan that projects only
        # some columns skips the rest of the line and would accept rows with extra fields).
        exprs.append(pl.sum_horizontal(pl.all().exclude(ROW).is_null()).alias("_empty"))
        # Typed values under their own names (every expression of a select reads the raw input), then the
        # contract's reason over them.
        exprs += [parse_expr(c, types[c]).alias(c) for c in typed] + [parse_error_expr(sf, typed)]
        contract = _contract(sf.name)
        reason = reason_expr(contract, typed) if contract is not None else pl.lit(None, pl.String).alias("_reason")
        query = lf.select(exprs).with_columns(reason).drop(*typed, PARSE_ERROR)
        per_batch = [e for i in range(len(checked)) for e in (
            pl.col(f"_bad{i}").sum(), pl.col(ROW).filter(pl.col(f"_bad{i}")).first(),
            pl.col(f"_raw{i}").drop_nulls().first())]
        key_cols = [f"_key{i}" for i in range(len(key))]
        counts = [0] * len(checked)
        first: list[tuple[int, str] | None] = [None] * len(checked)
        state = {"rows": 0}
        reasons: dict[str, int] = {}
        failure: list[BaseException] = []

        def batches():
            try:
                for df in query.collect_batches():  # in file order, so the first bad row is the earliest
                    state["rows"] += df.height
                    if checked:
                        agg = df.select([e.alias(f"a{j}") for j, e in enumerate(per_batch)]).row(0)
                        for i in range(len(checked)):
                            n, row, value = agg[3 * i: 3 * i + 3]
                            if n:
                                counts[i] += n
                                first[i] = first[i] or (row, value)
                    for r, n in df.get_column("_reason").drop_nulls().value_counts().iter_rows():
                        reasons[r] = reasons.get(r, 0) + n
                    if key:
                        kept = df.filter(pl.col("_reason").is_null())  # ingestion finds duplicates among these
                        yield from kept.select(key_cols).drop_nulls().to_arrow().to_batches()
            except BaseException as exc:
                failure.append(exc)
                raise

        dups = None
        try:
            if key:
                schema = pl.DataFrame(schema={f"_key{i}": POLARS_TYPES[types[k]] for i, k in enumerate(key)})
                reader = pa.RecordBatchReader.from_batches(schema.to_arrow().schema, batches())
                self.con.register("keys", reader)
                try:
                    cols = ", ".join(f'"{c}"' for c in key_cols)
                    dup_rows, dup_keys = self.con.execute(
                        f"SELECT coalesce(sum(n) - count(*), 0), count(*) FILTER (WHERE n > 1) "
                        f"FROM (SELECT count(*) AS n FROM keys GROUP BY {cols})").fetchone()
                finally:
                    self.con.unregister("keys")
                dups = (int(dup_rows), int(dup_keys)) if dup_rows else None
            else:
                for _ in batches():
                    pass
        except duckdb.Error:
            if failure:
                raise failure[0] from None
            raise
        bad = {c: (counts[i], first[i][0], first[i][1]) for i, c in enumerate(checked) if counts[i]}
        return state["rows"], bad, dups, dict(sorted(reasons.items()))

    # -- semantics -------------------------------------------------------------------------------------
    def check_semantics(self) -> None:
        try:
            paths = semantics_paths(self.root)
        except SourceError:  # no usable Chest ImaGenome folder: reported once by check_layout
            return
        missing = False
        rels = [self.root.relative(p) for p in paths]
        for path, rel in zip(paths, rels):
            self.report.files[rel] = {"table": "semantics", "rows": None}
            if not path.is_file():
                missing = True
                self.report.files[rel]["status"] = "MISSING"
                self.add("error", rel, "file not found",
                         "download the Chest ImaGenome 1.0.0 semantics/ folder from PhysioNet")
        if missing:
            return
        try:
            sem = read_semantics(self.root)
        except SourceError as err:
            self.report.problems.append(Problem.from_error(err))
            return
        counts = (len(sem.objects), len(sem.attributes), len(sem.all_children))
        for rel, n in zip(rels, counts):
            self.report.files[rel]["rows"] = n

    def close(self) -> None:
        self.con.close()


def _contract(table: str):
    """The ingestion contract of a source table (None when it has none)."""
    try:
        return load_contract(f"ingest/{table}")
    except ContractError:
        return None


def _counts(reasons: dict[str, int]) -> str:
    return ", ".join(f"{r} {n:,}" for r, n in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0])))


def _reason_column(reason: str) -> str | None:
    """The column a reason names (``not_allowed:categoryID`` -> ``categoryID``), if any."""
    kind, _, column = reason.partition(":")
    return column if column and kind in ("null", "not_allowed", "out_of_range", "unparsable") else None


def _find_physionet_root(root: Path) -> Path | None:
    """A nearby folder (ancestor, or at most 3 levels below) that holds the PhysioNet dataset folders."""
    holds = holds_datasets
    for parent in list(root.resolve().parents)[:3]:
        if holds(parent):
            return parent
    frontier = [root]
    for _ in range(3):
        nxt = []
        for folder in frontier:
            try:
                subdirs = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
            except OSError:
                continue
            for sub in subdirs[:50]:
                if holds(sub):
                    return sub
            nxt += subdirs[:50]
        frontier = nxt
    return None


def validate_source(root: Path | SourceLayout, cache_dir: Path | None = None) -> ValidationReport:
    """Check a PhysioNet source root (at the paper's releases, or at those a ``SourceLayout`` names);
    ``report.ok`` is False when any error-level problem was found."""
    layout = root if isinstance(root, SourceLayout) else SourceLayout(Path(root))
    if layout.cache_dir is None and cache_dir is not None:
        layout.cache_dir = Path(cache_dir)  # where a scene-graph zip is converted
    cache_dir = Path(cache_dir) if cache_dir is not None else None
    if cache_dir is not None:
        cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ehrxqa-validate-", dir=cache_dir) as tmp:
        v = _Validator(layout, cache_dir, tmp)
        try:
            if v.check_layout():
                for sf in TABLES.values():
                    v.check_table(sf)
                v.check_semantics()
                v.check_images(v.check_ids())
        finally:
            v.close()
    return v.report


__all__ = ["DUCKDB_MEMORY_LIMIT", "Problem", "UNKNOWN_ID_ERROR_FRACTION", "ValidationReport",
           "validate_source"]
