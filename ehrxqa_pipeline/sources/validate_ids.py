"""Cross-source checks of ``validate_source``: ids agree across MIMIC-IV, MIMIC-CXR and Chest ImaGenome,
and the image tree holds the metadata's JPEGs (a mixin of the validator; it uses its connection, root and
report). The contracts' foreign keys between datasets (CXR subjects and gold patients -> MIMIC-IV patients)
are judged exactly as the build's ``foreign_keys`` check judges them; the other id overlaps (image ids of
Chest ImaGenome vs the metadata) use ``UNKNOWN_ID_ERROR_FRACTION``."""

from __future__ import annotations

import polars as pl

from ehrxqa_pipeline.contracts import ContractError, load_contract, reason_expr
from ehrxqa_pipeline.quality import count_orphans

from . import readers
from .errors import SourceError
from .images import image_relpath_expr, images_dir, list_images
from .report import Problem
from .schema import TABLES

# Above this share of unknown ids the two sources are from different releases (or one is damaged);
# below it the cohort steps simply drop the few unmatched rows.
UNKNOWN_ID_ERROR_FRACTION = 0.01
_FIX_RELEASES = ("use MIMIC-IV, MIMIC-CXR-JPG and Chest ImaGenome releases that belong together (the paper's: "
                 "2.2, 2.0.0 and 1.0.0), all complete (a partial download or another release gives unknown ids)")


class IdChecks:
    # -- cross-source ids ------------------------------------------------------------------------------
    def _collect(self, name: str, exprs: list[pl.Expr], unique: bool = True) -> pl.DataFrame | None:
        """Some typed columns of a table that passed its checks (distinct rows), else None."""
        if name not in self.usable:
            return None
        try:
            lf = readers.scan_table(self.root, name, self.cache_dir).select(exprs).drop_nulls()
            return (lf.unique() if unique else lf).collect(engine="streaming")
        except SourceError as err:
            self.report.problems.append(Problem.from_error(err))
        except (pl.exceptions.PolarsError, OSError) as exc:
            self.report.problems.append(Problem.from_error(readers.read_failure(self.root, name, exc)))
        self.usable.discard(name)
        return None

    def _ids(self, name: str, expr: pl.Expr) -> pl.Series | None:
        df = self._collect(name, [expr.alias("id")])
        return None if df is None else df["id"]

    def _overlap(self, label: str, name: str, column: str, ids: pl.Series | None, known: pl.Series | None,
                 what: str, against: str, *, strict: bool = True) -> None:
        if ids is None or known is None:
            return
        unknown = int((~ids.is_in(known.implode())).sum())
        total = ids.len()
        self.report.stats["overlaps"][label] = {"ids": total, "unknown": unknown}
        if not unknown:
            return
        share = unknown / total
        severity = "error" if strict and share > UNKNOWN_ID_ERROR_FRACTION else "warning"
        self.add(severity, self._rel(name), f"{unknown:,} of {total:,} {what} ({share:.1%}) in column "
                 f"'{column}' are not in {against}", _FIX_RELEASES, column=column)

    def _rel(self, name: str) -> str:
        return readers.file_label(self.root, name)

    # -- foreign keys of the contracts -------------------------------------------------------------------
    def check_foreign_keys(self) -> None:
        """Every contract foreign key (within MIMIC-IV, and from MIMIC-CXR and Chest ImaGenome into MIMIC-IV
        patients), judged as the build's ``foreign_keys`` check judges it: the same measure
        (``quality.count_orphans`` over the rows ingestion keeps) and the contract's limit. One scan per
        child table; each key is counted per distinct value, so memory follows the keys, not the rows."""
        for name in TABLES:
            try:
                contract = load_contract(f"ingest/{name}")
            except ContractError:
                continue
            fks = [fk for fk in contract.foreign_keys
                   if name in self.usable and fk.references in self.usable]  # else already an error
            if fks:
                self._foreign_keys(contract, fks)

    def _kept_rows(self, contract) -> pl.LazyFrame:
        """The rows ingestion keeps: no refusal reason, the first row of each primary key."""
        lf = readers.scan_table(self.root, contract.table, self.cache_dir)
        present = lf.collect_schema().names()
        lf = lf.with_columns(reason_expr(contract, present)).filter(pl.col("_reason").is_null())
        key = [k for k in contract.primary_key if k in present]
        return lf.unique(subset=key, keep="first", maintain_order=True) if key else lf

    def _foreign_keys(self, contract, fks: list) -> None:
        child = contract.table
        try:
            kept = self._kept_rows(contract)
            per_key = pl.collect_all([kept.group_by(list(fk.columns)).agg(pl.len().alias("_n")) for fk in fks],
                                     engine="streaming")
            parents = [self._parent_keys(fk) for fk in fks]
        except SourceError as err:
            self.report.problems.append(Problem.from_error(err))
            return
        except (pl.exceptions.PolarsError, OSError) as exc:
            self.report.problems.append(Problem.from_error(readers.read_failure(self.root, child, exc)))
            return
        for fk, counts, keys in zip(fks, per_key, parents):
            self.con.register("_fk_counts", counts)
            self.con.register("_fk_parent", keys)
            cols = ", ".join(f'"{c}"' for c in fk.columns)
            self.con.execute(f"CREATE OR REPLACE TEMP VIEW _fk_child AS SELECT {cols} FROM _fk_counts, range(_n)")
            try:
                count = count_orphans(self.con, "_fk_child", ["_fk_parent"], fk)
            finally:
                self.con.execute("DROP VIEW _fk_child")
                self.con.unregister("_fk_counts")
                self.con.unregister("_fk_parent")
            self._judge(child, fk, count)

    def _parent_keys(self, fk) -> pl.DataFrame:
        """The distinct values of ``fk``'s referenced columns, read once per validation: admissions, patients,
        icustays and d_items are each referenced by several tables."""
        key = (fk.references, tuple(fk.ref_columns))
        if key not in self.parent_keys:
            self.parent_keys[key] = (readers.scan_table(self.root, fk.references, self.cache_dir)
                                     .select(list(fk.ref_columns)).unique().collect(engine="streaming"))
        return self.parent_keys[key]

    def _judge(self, child: str, fk, count) -> None:
        parent = fk.references
        label = f"{child}.{'_'.join(fk.columns)}->{parent}"
        self.report.stats["foreign_keys"][label] = {
            "rows": count.rows, "orphans": count.orphans, "orphan_keys": count.orphan_keys,
            "orphan_fraction": round(count.share, 6), "max_orphan_fraction": fk.max_orphan_fraction}
        if not count.orphans:
            return
        column = ", ".join(fk.columns)
        what = (f"{count.summary(fk)} in column '{column}' point at no row of {self._rel(parent)}")
        limit = f"{fk.max_orphan_fraction:.2%} (data_contracts/ingest.{child}.yaml)"
        if count.passes(fk):
            self.add("warning", self._rel(child), f"{what}, within the contract's {limit}",
                     f"none needed if the source is complete: {fk.why}", column=column)
        else:
            self.add("error", self._rel(child), f"{what}; the contract allows {limit}",
                     f"{_FIX_RELEASES} (the build's foreign_keys check fails above the limit: {fk.why})",
                     column=column)

    def check_ids(self) -> pl.DataFrame | None:
        """Cross-source id consistency; returns the metadata ids (for the image check) when readable."""
        strip = pl.col("image_id").str.strip_suffix(".dcm")
        meta = self._collect("cxr_metadata", [pl.col("dicom_id"), pl.col("subject_id"), pl.col("study_id")],
                             unique=False)
        images = meta["dicom_id"].drop_nulls().unique() if meta is not None else None
        subjects = meta["subject_id"].drop_nulls().unique() if meta is not None else None
        meta_rel = self._rel("cxr_metadata") if meta is not None else ""
        self.check_foreign_keys()
        silver = self._ids("silver_relations", strip)
        boxes = self._ids("silver_bbox", pl.col("object_id").str.splitn("_", 2).struct.field("field_0"))
        gold = self._ids("gold_relations", strip)
        gold_boxes = self._ids("gold_bbox", strip)
        gold_patients = self._ids("gold_relations", pl.col("patient_id"))
        image_ids = "image ids (without .dcm)"
        self._overlap("silver_relation_images", "silver_relations", "image_id", silver, images, image_ids, meta_rel)
        self._overlap("silver_bbox_images", "silver_bbox", "object_id", boxes, images,
                      "image ids (object_id before '_')", meta_rel)
        self._overlap("gold_relation_images", "gold_relations", "image_id", gold, images, image_ids, meta_rel)
        self._overlap("gold_bbox_images", "gold_bbox", "image_id", gold_boxes, images, image_ids, meta_rel)
        self._overlap("gold_patients_in_cxr", "gold_relations", "patient_id", gold_patients, subjects,
                      "gold patients", meta_rel)
        if silver is not None:
            silver_rel = self._rel("silver_relations")
            self._overlap("gold_relation_images_in_silver", "gold_relations", "image_id", gold, silver,
                          image_ids, silver_rel, strict=False)
            self._overlap("gold_bbox_images_in_silver", "gold_bbox", "image_id", gold_boxes, silver,
                          image_ids, silver_rel, strict=False)
        return meta

    # -- images ----------------------------------------------------------------------------------------
    def check_images(self, meta: pl.DataFrame | None) -> None:
        try:
            files = images_dir(self.root)
        except SourceError:
            return  # the dataset folder itself is missing: reported by the layout check
        shown = readers.relative(self.root, files)
        self.report.stats["images_dir"] = shown
        if not files.is_dir():
            self.report.stats["images_found"] = 0
            self.add("warning", shown, "no images; image-dependent steps will fail",
                     f"download the MIMIC-CXR-JPG files/ folder (all of p10..p19, or the parts you build) "
                     f"into {files}")
            return
        found = list_images(self.root)
        self.report.stats["images_found"] = found.height
        empty = int((found["bytes"] == 0).sum())
        if empty:
            self.add("warning", shown, f"{empty:,} JPEG files are empty (0 bytes)",
                     "re-download those images; image integrity checks will drop them")
        if meta is None:
            return
        expected = meta.select(image_relpath_expr().alias("relpath")).drop_nulls().unique()
        absent = expected.join(found.select("relpath"), on="relpath", how="anti").height
        self.report.stats["images_missing"] = absent
        if absent:
            self.add("warning", shown, f"{absent:,} of {expected.height:,} metadata images have no JPEG "
                     "under files/", "download the missing pNN folders of MIMIC-CXR-JPG if those images "
                     "are needed; image steps skip them")
