"""Write a synthetic PhysioNet source: MIMIC-IV 2.2, MIMIC-CXR-JPG 2.0.0 and Chest ImaGenome 1.0.0 layouts.

Same seed and scale give byte-identical files. The manifest at the root records the generator version,
the scale, the row counts and every planted defect with its exact count; the pipeline never reads it,
tests compare the pipeline's funnels against it.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict, replace
from pathlib import Path

import polars as pl

from ehrxqa_pipeline.demo.cohort import make_cohort
from ehrxqa_pipeline.demo.cxr_metadata import make_cxr_metadata
from ehrxqa_pipeline.demo.ehr import make_ehr
from ehrxqa_pipeline.demo.imagenome import make_imagenome
from ehrxqa_pipeline.demo.io import write_json, write_table
from ehrxqa_pipeline.demo.ontology import semantics_files
from ehrxqa_pipeline.demo.scene_graph import write_scene_graph_zip
from ehrxqa_pipeline.demo.scale import SCALES, Scale
from ehrxqa_pipeline.demo.withheld import pick_withheld, withheld_planted
from ehrxqa_pipeline.sources.schema import CXR_FILES_DIR, CXR_METADATA, DEMO_MANIFEST, MIMIC_CXR, TABLES, release_path

# 2: zero-area silver boxes planted; 3: scene_graph.zip, silver rows in its order; 4: CXR patients withheld
# from MIMIC-IV (demo.withheld)
GENERATOR_VERSION = "4"


def resolve_scale(scale: str | Scale = "demo", patients: int | None = None,
                  images: bool | None = None, withheld_share: float | None = None) -> Scale:
    sc = SCALES[scale] if isinstance(scale, str) else scale
    if patients is not None:
        sc = sc.with_patients(patients)
    if images is not None:
        sc = replace(sc, images=images)
    if withheld_share is not None:
        sc = replace(sc, withheld_share=withheld_share)
    return sc


def generate_source(out: Path, seed: int = 0, scale: str | Scale = "demo", patients: int | None = None,
                    images: bool | None = None, compress: bool | None = None, workers: int = 2,
                    force: bool = False, log=print, withheld_share: float | None = None) -> dict:
    """Generate into ``out`` (written to a sibling temp folder, then moved into place)."""
    sc = resolve_scale(scale, patients, images, withheld_share)
    compress = sc.name == "demo" if compress is None else compress  # full scale: plain .csv is faster
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not force:
        raise FileExistsError(f"{out} is not empty; pass --force to replace it")
    tmp = out.with_name(f".{out.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)

    log(f"cohort: {sc.cxr_patients} CXR patients, {sc.ehr_only_patients} EHR-only, {sc.gold_patients} gold")
    cohort = make_cohort(seed, sc)
    metadata, planted_cxr = make_cxr_metadata(seed, sc, cohort)
    log(f"MIMIC-CXR metadata: {metadata.height} images")
    withheld = pick_withheld(seed, sc, cohort.patients)
    log(f"withheld from MIMIC-IV: {withheld.len()} CXR patients")
    counts: dict[str, int] = {}
    # Each part is written and released before the next is built, so peak memory is one part's frames.
    ehr, planted_ehr = make_ehr(seed, sc, cohort.patients, cohort.studies, withheld)
    log("MIMIC-IV: " + ", ".join(f"{k} {v.height}" for k, v in ehr.items()))
    for name, df in ehr.items():
        write_table(df, tmp, TABLES[name], compress)
        counts[name] = df.height
    del ehr
    write_table(metadata, tmp, CXR_METADATA, compress)
    counts[CXR_METADATA.name] = metadata.height
    imagenome = make_imagenome(seed, sc, cohort, metadata)
    planted_withheld = withheld_planted(withheld, cohort.patients, metadata, imagenome.tables["gold_relations"])
    # The silver tables in the order Chest ImaGenome's post-processing of scene_graph.zip gives them here
    # (ehrxqa_pipeline.sources.scene_graph): images by dicom_id; boxes in the scene graph's order; relations
    # by report object (order of first mention), then sentence, then as generated.
    t = imagenome.tables
    t["silver_bbox"] = t["silver_bbox"].sort(pl.col("object_id").str.split("_").list.first(), maintain_order=True)
    t["silver_relations"] = (
        t["silver_relations"].with_row_index("_r")
        .sort("image_id", pl.col("_r").min().over("image_id", "bbox"),
              pl.col("row_id").str.split("|").list.last().cast(pl.Int64), "_r")
        .drop("_r"))
    log("Chest ImaGenome: " + ", ".join(f"{k} {v.height}" for k, v in imagenome.tables.items()))
    for name, df in imagenome.tables.items():
        write_table(df, tmp, TABLES[name], compress=False)  # Chest ImaGenome ships plain text files
        counts[name] = df.height
    # What PhysioNet ships: the silver tables as per-image scene graphs (the tabular files stay as well).
    scene_images = (metadata.select("dicom_id", "subject_id", "study_id", "ViewPosition", "StudyDate", "StudyTime")
                    .join(cohort.patients.select("subject_id", "gender"), on="subject_id", how="left"))
    zip_path = write_scene_graph_zip(tmp, imagenome.tables["silver_bbox"], imagenome.tables["silver_relations"],
                                     scene_images)
    log(f"Chest ImaGenome scene graphs: {zip_path.stat().st_size / 1e6:.1f} MB zip")
    imagenome.tables.clear()
    for rel, data in semantics_files().items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_bytes(data)

    written = 0
    if sc.images:
        from ehrxqa_pipeline.demo.phantom import write_phantoms

        images = metadata.select("subject_id", "study_id", "dicom_id", "Rows", "Columns", "ViewPosition")
        written = write_phantoms(tmp / release_path(MIMIC_CXR, CXR_FILES_DIR), images, imagenome.truth_boxes,
                                 imagenome.truth_findings, seed=seed, workers=workers)
        log(f"phantom radiographs: {written} JPEGs")

    manifest = {
        "generator": "ehrxqa_pipeline.demo", "generator_version": GENERATOR_VERSION, "seed": seed,
        "scale": asdict(sc), "compressed": compress, "rows": counts, "images_written": written,
        "planted": {"cxr": planted_cxr, "ehr": planted_ehr, "imagenome": imagenome.planted,
                    "withheld": planted_withheld},
    }
    write_json(manifest, tmp / DEMO_MANIFEST)
    if out.exists():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, out)
    return manifest
