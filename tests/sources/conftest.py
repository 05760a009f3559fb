"""A tiny hand-built PhysioNet source: a few consistent rows per file, in the real layout.

Independent of ehrxqa_pipeline.demo on purpose: these tests pin the readers and the validator, so the
fixture is written here from schema.TABLES headers and hand-chosen values. Tests plant one fault at a time
with ``TinySource.write`` / ``TinySource.rewrite``.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from PIL import Image

from ehrxqa_pipeline.sources.schema import (CXR_FILES_DIR, IMAGENOME, MIMIC_CXR, SEMANTICS_ATTRIBUTES,
                                            SEMANTICS_OBJECTS, SEMANTICS_UMLS, TABLES, image_relpath,
                                            release_path)

ATTRIBUTES_FILE = release_path(IMAGENOME, SEMANTICS_ATTRIBUTES)
OBJECTS_FILE = release_path(IMAGENOME, SEMANTICS_OBJECTS)
UMLS_FILE = release_path(IMAGENOME, SEMANTICS_UMLS)
IMAGES_DIR = release_path(MIMIC_CXR, CXR_FILES_DIR)

SUBJECTS = [10000032, 10000033, 11000011]
HADMS = [20000001, 20000002, 20000003]
STAYS = [30000001, 30000002, 30000003]
# (dicom_id, subject_id, study_id, ViewPosition, StudyDate, StudyTime)
IMAGES = [
    ("0a1b2c3d-11111111-22222222-33333333-44444444", 10000032, 50000001, "PA", 21500101, "123456.789"),
    ("0a1b2c3d-11111111-22222222-33333333-55555555", 10000032, 50000001, "LATERAL", 21500101, "123456.789"),
    ("1f2e3d4c-66666666-77777777-88888888-99999999", 10000033, 50000002, "AP", 21500203, "80102.5"),
    ("2a3b4c5d-aaaaaaaa-bbbbbbbb-cccccccc-dddddddd", 11000011, 50000003, "PA", 21500305, "1234.5"),
]
FRONTAL = [img for img in IMAGES if img[3] != "LATERAL"]
GOLD = IMAGES[2]
BOXES = ["right lung", "left lung"]
OBJECTS_TEXT = "right lung,\nleft lung,\n\ncardiac silhouette,\n"
ATTRIBUTES_TEXT = ("anatomicalfinding|yes|lung opacity,\ndisease|yes|pneumonia\n\n"
                   "tubesandlines|yes|endotracheal tube\n")
UMLS = {"all_children": {"lung opacity": ["pneumonia"], "right lung": []},
        "possible_attribute_of": {"lung opacity": ["right lung", "left lung"], "pneumonia": ["right lung"]},
        "other": {"kept": True}}


def _generic(table: str, n: int = 3) -> list[dict]:
    """Rows for an event/dictionary table: coherent ids, every other column unique per row."""
    rows = []
    for i in range(n):
        row = {}
        for col in TABLES[table].columns:
            if col.name in ("subject_id", "hadm_id", "stay_id"):
                row[col.name] = {"subject_id": SUBJECTS, "hadm_id": HADMS, "stay_id": STAYS}[col.name][i % 3]
            elif col.type == "int":
                row[col.name] = 100 + i
            elif col.type == "float":
                row[col.name] = 1.5 + i
            elif col.type == "datetime":
                row[col.name] = f"2150-01-0{i + 1} 10:0{i}:00"
            elif col.type == "date":
                row[col.name] = f"2150-01-0{i + 1}"
            else:
                row[col.name] = f"{col.name} {i}"
        rows.append(row)
    return rows


def default_rows() -> dict[str, list[dict]]:
    rows = {name: _generic(name) for name in TABLES}
    rows["patients"] = [
        {"subject_id": s, "gender": g, "anchor_age": a, "anchor_year": 2150, "anchor_year_group": "2017 - 2019",
         "dod": d}
        for s, g, a, d in zip(SUBJECTS, "MFM", (52, 67, 80), ("", "2151-03-04", ""))]
    rows["admissions"][0]["deathtime"] = ""  # optional values may be empty
    # Values the ingestion contracts allow, so the clean source has nothing to quarantine.
    for i, row in enumerate(rows["transfers"]):
        row["eventtype"] = ("ED", "admit", "transfer")[i]
    for name in ("diagnoses_icd", "procedures_icd", "d_icd_diagnoses", "d_icd_procedures"):
        for i, row in enumerate(rows[name]):
            row["icd_version"] = (9, 10)[i % 2]
    for name, base in (("d_labitems", 50000), ("d_items", 220000)):
        for i, row in enumerate(rows[name]):
            row["itemid"] = base + i
    for row in rows["d_items"]:
        row["linksto"] = "chartevents"
    # events name items of the dictionaries (the contracts' foreign keys, checked by validate-source too)
    for name, base in (("labevents", 50000), ("chartevents", 220000), ("inputevents", 220000),
                       ("outputevents", 220000)):
        for i, row in enumerate(rows[name]):
            row["itemid"] = base + i
    rows["cxr_metadata"] = [
        {"dicom_id": d, "subject_id": s, "study_id": st, "PerformedProcedureStepDescription": "CHEST (PA AND LAT)",
         "ViewPosition": v, "Rows": 3056, "Columns": 2544, "StudyDate": date, "StudyTime": time,
         "ProcedureCodeSequence_CodeMeaning": "CHEST (PA AND LAT)", "ViewCodeSequence_CodeMeaning": "postero-anterior",
         "PatientOrientationCodeSequence_CodeMeaning": "Erect"}
        for d, s, st, v, date, time in IMAGES]
    rows["silver_bbox"] = [
        {"object_id": f"{d}_{b}", "x1": 10.0 + k, "y1": 20.0, "x2": 100.0, "y2": 200.0, "width": 90.0 - k,
         "height": 180.0, "bbox_name": b, "synsets": "['C0225706']", "name": b.title(), "original_x1": 100,
         "original_y1": 200, "original_x2": 1000, "original_y2": 2000, "original_width": 900, "original_height": 1800}
        for d, *_ in FRONTAL for k, b in enumerate(BOXES)]
    rows["silver_relations"] = [
        {"study_id": st, "image_id": f"{d}.dcm", "row_id": f"{st}|{d}|{k}", "sent_loc": float(k), "bbox": b,
         "relation": k % 2, "label_name": "lung opacity", "categoryID": "anatomicalfinding", "context": "yes"}
        for d, _s, st, *_ in FRONTAL for k, b in enumerate([*BOXES, "unknown"])]
    d, s, st, *_ = GOLD
    rows["gold_relations"] = [
        {"patient_id": s, "study_id": st, "image_id": f"{d}.dcm", "row_id": f"{st}|{d}|{k}", "sent_loc": float(k),
         "bbox": b, "relation": 1, "label_name": "pneumonia", "categoryID": "disease", "annot_id": f"a{k}"}
        for k, b in enumerate(BOXES)]
    rows["gold_bbox"] = [
        {"image_id": f"{d}.dcm", "x1": 10, "y1": 20, "x2": 100, "y2": 200, "width": 90, "height": 180,
         "bbox_name": b, "annot_id": f"b{k}", "original_x1": 100, "original_x2": 1000, "original_y1": 200,
         "original_y2": 2000, "original_width": 900, "original_height": 1800, "annotator": "r1",
         "coord224": f"[10, 20, {100 + k}, 200]", "coord_original": "[100, 200, 1000, 2000]"}
        for k, b in enumerate(BOXES)]
    return rows


def encode_table(name: str, rows: list[dict], header: list[str] | None = None) -> bytes:
    sf = TABLES[name]
    header = list(sf.header) if header is None else header
    buf = io.StringIO()
    writer = csv.writer(buf, delimiter=sf.sep, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow(["" if row.get(c) is None else row.get(c) for c in header])
    return buf.getvalue().encode()


@dataclass
class TinySource:
    root: Path
    rows: dict[str, list[dict]] = field(default_factory=default_rows)

    def path(self, name: str, gz: bool | None = None) -> Path:
        sf = TABLES[name]
        gz = (sf.gzip_ok if gz is None else gz)
        return self.root / (sf.release_path + (".gz" if gz else ""))

    def write(self, name: str, rows: list[dict] | None = None, header: list[str] | None = None,
              gz: bool | None = None, raw: bytes | None = None) -> Path:
        """(Re)write one table; MIMIC files default to .csv.gz (gzip mtime 0), Chest ImaGenome to plain."""
        path = self.path(name, gz)
        for old in (self.path(name, False), self.path(name, True)):
            old.unlink(missing_ok=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = raw if raw is not None else encode_table(name, self.rows[name] if rows is None else rows, header)
        path.write_bytes(gzip.compress(data, mtime=0) if path.name.endswith(".gz") else data)
        return path

    def write_all(self, images: bool = True) -> TinySource:
        for name in TABLES:
            self.write(name)
        sem = {OBJECTS_FILE: OBJECTS_TEXT, ATTRIBUTES_FILE: ATTRIBUTES_TEXT,
               UMLS_FILE: json.dumps(UMLS, indent=1)}
        for rel, text in sem.items():
            (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.root / rel).write_text(text)
        if images:
            for d, s, st, *_ in IMAGES:
                path = self.root / IMAGES_DIR / image_relpath(s, st, d)
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.new("L", (8, 8), color=128).save(path, format="JPEG")
        return self


@pytest.fixture
def source(tmp_path) -> TinySource:
    return TinySource(tmp_path / "physionet").write_all()
