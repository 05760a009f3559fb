"""Source validation: is SOURCE_ROOT a complete, intact PhysioNet download the pipeline can build from?

``validate_source`` checks, in order: the layout (root, dataset folders, every file of ``schema.TABLES``
and the semantics files), gzip integrity, required columns, the type of every required value (over the
whole file), key uniqueness, cross-source id consistency (CXR vs MIMIC-IV, Chest ImaGenome vs CXR
metadata, gold vs silver) and the image tree. Errors block a build; warnings describe what ingestion will
quarantine or what downstream steps will miss.

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

from . import readers
from .errors import SourceError
from .readers import POLARS_TYPES, ROW, TYPE_DESCRIPTIONS, parse_expr, parse_failed
from .report import Problem, ValidationReport
from .layout import DATASETS, SourceLayout, holds_datasets, layout_problems
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
                                                           "images_found": None, "releases": {}})
        self.usable: set[str] = set()  # tables that passed every error-level check
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
        for err in layout_problems(self.root):
            self.report.problems.append(Problem.from_error(err))
        releases = self.report.stats["releases"]
        for key, d in DATASETS.items():
            try:
                folder, version = self.root.dataset_dir(key), self.root.version(key)
            except SourceError:
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
        rel = readers.relative(self.root, path)
        entry = self.report.files.setdefault(rel, {"table": sf.name, "rows": None})
        if sf.gzip_ok and path.suffix != ".gz" and path.with_name(path.name + ".gz").is_file():
            self.add("warning", rel, f"both {path.name} and {path.name}.gz exist; the plain file is read",
                     "delete the one you do not want read (the plain file wins)")
        try:
            header = readers.read_header(self.root, sf.name)
            lf = readers.scan_raw(self.root, sf.name, self.cache_dir, row_index_name=ROW)
            n, bad, dups = self._scan(lf, sf, header)
        except SourceError as err:
            self.report.problems.append(Problem.from_error(err))
            return
        except (pl.exceptions.PolarsError, duckdb.Error, OSError) as exc:
            self.report.problems.append(Problem.from_error(readers.read_failure(self.root, sf.name, exc)))
            return
        entry["rows"] = rows[sf.name] = n
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
        if not bad:
            self.usable.add(sf.name)

    def _scan(self, lf: pl.LazyFrame, sf: SourceFile, header: list[str]):
        """One streaming pass: row count, per-column type failures, duplicate keys (via DuckDB)."""
        types = sf.types
        checked = [c for c in sf.required if types[c] != "str"]
        key = list(sf.key) if sf.key and all(k in header for k in sf.key) else []
        exprs = [pl.col(ROW).cast(pl.Int64)]
        for i, c in enumerate(checked):
            failed = parse_failed(c, types[c])
            exprs += [failed.alias(f"_bad{i}"), pl.when(failed).then(pl.col(c)).alias(f"_raw{i}")]
        exprs += [parse_expr(k, types[k]).alias(f"_key{i}") for i, k in enumerate(key)]
        # Projecting every column makes polars check each row's field count (a scan that projects only
        # some columns skips the rest of the line and would accept rows with extra fields).
        exprs.append(pl.sum_horizontal(pl.all().exclude(ROW).is_null()).alias("_empty"))
        query = lf.select(exprs)
        per_batch = [e for i in range(len(checked)) for e in (
            pl.col(f"_bad{i}").sum(), pl.col(ROW).filter(pl.col(f"_bad{i}")).first(),
            pl.col(f"_raw{i}").drop_nulls().first())]
        key_cols = [f"_key{i}" for i in range(len(key))]
        counts = [0] * len(checked)
        first: list[tuple[int, str] | None] = [None] * len(checked)
        state = {"rows": 0}
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
                    if key:
                        yield from df.select(key_cols).drop_nulls().to_arrow().to_batches()
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
        return state["rows"], bad, dups

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
