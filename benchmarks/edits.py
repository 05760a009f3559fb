"""The upstream edits a user makes to a built home, as `make bench` (stage ``edit``) and tests/test_pipeline.py
apply them: a Chest ImaGenome gold label and a silver label negated in place, and a MIMIC-IV lab name
respelled. Each edit is chosen from the built warehouse so that it changes a label the datasets use, and the
edited image keeps another finding its file states itself (its split row, whose ``abnormal`` says whether it
has any, stays as it is). ``Edit.apply()`` writes the edited file, ``Edit.undo()`` the original bytes."""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

import duckdb

from ehrxqa_pipeline.sources.readers import resolve

# An affirmed relation of table r (columns image_id, bbox, relation, label_name) that is the only sentence on its
# (image, object, attribute), a pair of the labels table l, and whose image keeps another directly affirmed
# attribute; {relations}, {labels} and {images} (the image ids to choose from) are filled in.
_CHOICE = """
    SELECT r.image_id, r.bbox, r.label_name FROM ingest.{relations} r
    JOIN cxr_labels.{labels} l ON l.image_id = replace(r.image_id, '.dcm', '') AND l.object = r.bbox
                               AND l.attribute = r.label_name
    WHERE l.image_id IN ({images}) AND r.relation = 1
      AND (SELECT count(*) FROM ingest.{relations} o WHERE o.image_id = r.image_id AND o.bbox = r.bbox
                                                      AND o.label_name = r.label_name) = 1
      AND EXISTS (SELECT 1 FROM cxr_labels.{labels} x JOIN ingest.{relations} o
                  ON replace(o.image_id, '.dcm', '') = x.image_id AND o.bbox = x.object
                     AND o.label_name = x.attribute AND o.relation = 1
                  WHERE x.image_id = l.image_id AND x.attribute <> l.attribute)
    ORDER BY 1, 2, 3 LIMIT 1"""


def read_text(path: Path) -> str:
    data = path.read_bytes()
    return (gzip.decompress(data) if path.suffix == ".gz" else data).decode()


def _encode(path: Path, text: str) -> bytes:
    return gzip.compress(text.encode(), mtime=0) if path.suffix == ".gz" else text.encode()


@dataclass(frozen=True)
class Edit:
    name: str
    path: Path
    before: str  # the line (or text) replaced
    after: str
    original: bytes

    def apply(self) -> None:
        self.path.write_bytes(_encode(self.path, read_text(self.path).replace(self.before, self.after, 1)))

    def undo(self) -> None:
        self.path.write_bytes(self.original)


def _negated(root: Path, warehouse: Path, table: str, labels: str, images: str, columns: dict[str, int],
             negate) -> Edit:
    """``negate(cols, obj)`` rewrites the chosen line's fields in place."""
    with duckdb.connect(str(warehouse), read_only=True) as con:
        image, obj, attr = con.execute(_CHOICE.format(relations=table, labels=labels, images=images)).fetchone()
    path = resolve(root, table)
    (line,) = [x for x in read_text(path).splitlines()
               if [x.split("\t")[i] for i in columns.values()] == [image, obj, attr]]
    cols = line.split("\t")
    negate(cols, obj)
    return Edit(f"{labels}_label", path, line + "\n", "\t".join(cols) + "\n", path.read_bytes())


def gold_label(root: Path, warehouse: Path) -> Edit:
    """A gold relation of a test image: its relation and annot_id go from 1 to 0, so the file keeps its size."""
    def negate(cols: list[str], obj: str) -> None:
        cols[6], cols[9] = "0", cols[9].replace(f"|{obj}|1|", f"|{obj}|0|")

    return _negated(root, warehouse, "gold_relations", "gold", "SELECT image_id FROM splits.gold",
                    {"image_id": 2, "bbox": 5, "label_name": 7}, negate)


def silver_label(root: Path, warehouse: Path) -> Edit:
    """A silver relation of a train image: relation 1 -> 0, context yes -> no."""
    return _negated(root, warehouse, "silver_relations", "silver",
                    "SELECT image_id FROM splits.silver WHERE split = 'train'",
                    {"image_id": 1, "bbox": 4, "label_name": 6}, _silver_negate)


def _silver_negate(cols: list[str], obj: str) -> None:
    cols[5], cols[8] = "0", "no"


def lab_name(root: Path) -> Edit:
    """The first lab of MIMIC-IV's d_labitems respelled (every database holds the whole dictionary)."""
    path = resolve(root, "d_labitems")
    label = read_text(path).splitlines()[1].split(",")[1]
    return Edit("ehr_table", path, f",{label},", f",{label} (respelled),", path.read_bytes())
