"""Chest ImaGenome's silver scene graphs (``silver_dataset/scene_graph.zip``) -> the two ``scene_tabular`` files.

PhysioNet ships one JSON per frontal image (``{dicom_id}_SceneGraph.json``, 243,310 of them, 10.26 GB
unzipped); the builders read the tables that Chest ImaGenome's own post-processing script makes from them
(``OUTPUT_TYPE ["attributes", "objects"]``, ``INCLUDE_SECTIONS "all"``). This module makes those two tables
directly from the zip, in the layout of ``schema.TABLES['silver_bbox']`` / ``['silver_relations']``:

- ``bbox_objects_tabular.txt``: one row per image x entry of the JSON's ``objects`` (a detector box), the
  entry's keys as columns (``synsets``, a list, written as Python writes a list: ``['C0225706']``);
- ``attribute_relations_tabular.txt``: one row per image x ``attributes`` entry (a report object) x phrase
  (report sentence) x ``"category|yes|label"`` string of that phrase: ``study_id`` (top level),
  ``image_id`` (``{dicom_id}.dcm``), ``row_id`` (the phrase's ``phrase_IDs`` entry, ``{study_id}|{sentence}``),
  ``sent_loc`` (the sentence index, the last ``|`` field of ``row_id``), ``bbox`` (the entry's
  ``bbox_name``), ``relation`` (1 for ``yes``, 0 for ``no``), ``label_name``, ``categoryID`` and ``context``
  (the ``yes``/``no`` token itself). Every section is kept (``sections`` is not read).

docs/scene_graph.md gives the evidence for this mapping and what a credentialed user must compare once
against the official script's output.

Order: members sorted by dicom id (the file name before ``_SceneGraph.json``; folders inside the zip are
ignored); within an image, the JSON's own order of objects, attribute entries, phrases and strings.
Memory: the zip is read member by member (never extracted); rows are written in chunks of ``CHUNK_ROWS``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
import zipfile
import zlib
from operator import itemgetter
from pathlib import Path, PurePosixPath

import polars as pl

from ehrxqa_pipeline.hashing import stat_key

from .errors import SourceError
from .schema import IMAGENOME, TABLES, release_path

ZIP_PATH = "silver_dataset/scene_graph.zip"  # inside the Chest ImaGenome release folder
ZIP_RELEASE_PATH = release_path(IMAGENOME, ZIP_PATH)  # under SOURCE_ROOT in the PhysioNet layout
MEMBER_SUFFIX = "_SceneGraph.json"
TABULAR = ("silver_bbox", "silver_relations")  # tables made from the zip, keys of the returned dicts
CHUNK_ROWS = 200_000
YES_NO = {"yes": 1, "no": 0}

_DTYPES = {"int": pl.Int64, "float": pl.Float64, "str": pl.String}
_FIX_DOWNLOAD = ("re-download silver_dataset/scene_graph.zip from PhysioNet and compare it with the release's "
                 "SHA256SUMS.txt ('unzip -t scene_graph.zip' tests the archive)")
_FIX_LAYOUT = (_FIX_DOWNLOAD + "; if the download is intact, the member differs from the Chest ImaGenome 1.0.0 "
               "layout that docs/scene_graph.md describes: report it with the member name")
_ZIP_ERRORS = (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError)

# objects: every column but synsets is read straight from the entry's key of the same name.
_BOX_COLS = tuple(c for c in TABLES["silver_bbox"].header if c != "synsets")
_BOX_REQUIRED = TABLES["silver_bbox"].required
_BOX_ALL = itemgetter(*_BOX_COLS)


def output_names() -> dict[str, str]:
    """File name of each table made from the zip (the names the post-processing script writes)."""
    return {name: PurePosixPath(TABLES[name].path).name for name in TABULAR}


def display_name(zip_path: Path) -> str:
    """The zip as messages name it: relative to the source root when it sits at its PhysioNet path."""
    text = Path(zip_path).as_posix()
    return ZIP_RELEASE_PATH if text.endswith("/" + ZIP_RELEASE_PATH) or text == ZIP_RELEASE_PATH else text


def _synsets(value: object) -> str | None:
    return None if value is None else str(value)  # a list reads back as "['C0225706']"


class _Table:
    """Rows of one output table, appended to a temporary file ``CHUNK_ROWS`` at a time."""

    def __init__(self, name: str, path: Path, zip_name: str):
        self.spec, self.path, self.zip_name = TABLES[name], path, zip_name
        self.schema = {c.name: _DTYPES[c.type] for c in self.spec.columns}
        self.tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        self.fh = open(self.tmp, "wb")
        self.header = True
        self.rows: list[tuple] = []
        self.members: list[tuple[int, str]] = []  # (first row, member) of the rows held, to name a bad one
        self.count = 0

    def start(self, member: str) -> None:
        self.members.append((len(self.rows), member))

    def frame(self) -> pl.DataFrame:
        if self.spec.name == "silver_bbox":
            body = [r[:-1] for r in self.rows]
            df = pl.DataFrame(body, schema={c: self.schema[c] for c in _BOX_COLS}, orient="row")
            df = df.with_columns(synsets=pl.Series([r[-1] for r in self.rows], dtype=pl.String))
            return df.select(self.spec.header)
        return pl.DataFrame(self.rows, schema=self.schema, orient="row")

    def flush(self) -> None:
        if not self.rows and not self.header:
            return
        try:
            df = self.frame()
        except (pl.exceptions.PolarsError, TypeError, ValueError, OverflowError):
            raise self._bad_value() from None
        df.write_csv(self.fh, separator=self.spec.sep, include_header=self.header, float_precision=None,
                     null_value="")
        self.count += df.height
        self.header = False
        self.rows, self.members = [], []

    def _bad_value(self) -> SourceError:
        """The first held row whose value does not fit its column's type, named by member and key."""
        cols = _BOX_COLS if self.spec.name == "silver_bbox" else self.spec.header
        for i, row in enumerate(self.rows):
            for col, value in zip(cols, row):
                kind = self.schema[col]
                if value is not None and kind != pl.String and (
                        isinstance(value, bool) or not isinstance(value, (int, float))
                        or (kind == pl.Int64 and not float(value).is_integer())):
                    member = [m for start, m in self.members if start <= i][-1]
                    return SourceError(self.zip_name, f"member {member!r}: key {col!r} is not a number",
                                       column=col, value=value, fix=_FIX_LAYOUT)
        return SourceError(self.zip_name, "values that do not fit the tabular layout", fix=_FIX_LAYOUT)

    def finish(self) -> None:
        self.flush()
        self.fh.close()
        os.replace(self.tmp, self.path)

    def discard(self) -> None:
        self.fh.close()
        self.tmp.unlink(missing_ok=True)


def _members(zf: zipfile.ZipFile, zip_name: str) -> list[tuple[str, zipfile.ZipInfo]]:
    """(dicom_id, member) of every ``*_SceneGraph.json`` file in the zip, sorted by dicom id."""
    found: dict[str, zipfile.ZipInfo] = {}
    for info in zf.infolist():
        base = PurePosixPath(info.filename).name
        if info.is_dir() or not base.endswith(MEMBER_SUFFIX) or base.startswith("._"):
            continue
        dicom = base[: -len(MEMBER_SUFFIX)]
        if dicom in found:
            raise SourceError(zip_name, f"members {found[dicom].filename!r} and {info.filename!r} are both the "
                              f"scene graph of image {dicom}", fix=_FIX_DOWNLOAD)
        found[dicom] = info
    if not found:
        raise SourceError(zip_name, f"no *{MEMBER_SUFFIX} member in the zip", fix=_FIX_DOWNLOAD)
    return sorted(found.items())


def _load(zf: zipfile.ZipFile, info: zipfile.ZipInfo, zip_name: str) -> dict:
    try:
        data = zf.read(info)
    except _ZIP_ERRORS as exc:
        raise SourceError(zip_name, f"member {info.filename!r} cannot be decompressed ({exc})",
                          fix=_FIX_DOWNLOAD) from None
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SourceError(zip_name, f"member {info.filename!r} is not valid JSON ({exc})", fix=_FIX_LAYOUT) from None
    if not isinstance(doc, dict):
        raise SourceError(zip_name, f"member {info.filename!r} is not a JSON object", fix=_FIX_LAYOUT)
    return doc


def _image_rows(doc: dict, dicom: str, member: str, zip_name: str, boxes: _Table, relations: _Table) -> None:
    """Append the rows of one scene graph to both tables."""
    def bad(what: str, value: object = None) -> SourceError:
        return SourceError(zip_name, f"member {member!r}: {what}", value=value, fix=_FIX_LAYOUT)

    try:
        image_id, study, objects, attributes = (doc["image_id"], doc["study_id"], doc["objects"],
                                                doc["attributes"])
    except KeyError as exc:
        raise bad(f"top-level key {exc.args[0]!r} is missing") from None
    if str(image_id).removesuffix(".dcm") != dicom:
        raise bad(f"image_id is not the dicom id of the file name ({dicom})", image_id)
    try:
        study = int(study)
    except (TypeError, ValueError):
        raise bad("study_id is not an integer", study) from None
    if not isinstance(objects, list) or not isinstance(attributes, list):
        raise bad("'objects' and 'attributes' must be lists")

    boxes.start(member)
    for k, obj in enumerate(objects):
        try:
            row = _BOX_ALL(obj)
        except KeyError:
            missing = [c for c in _BOX_REQUIRED if c not in obj]
            if missing:
                raise bad(f"objects[{k}] has no key {missing[0]!r}") from None
            row = tuple(obj.get(c) for c in _BOX_COLS)  # optional columns absent: empty
        except TypeError:
            raise bad(f"objects[{k}] is not a JSON object") from None
        boxes.rows.append((*row, _synsets(obj.get("synsets"))))

    relations.start(member)
    image = dicom + ".dcm"
    for k, entry in enumerate(attributes):
        try:
            bbox, per_phrase, phrase_ids = entry["bbox_name"], entry["attributes"], entry["phrase_IDs"]
        except KeyError as exc:
            raise bad(f"attributes[{k}] has no key {exc.args[0]!r}") from None
        except TypeError:
            raise bad(f"attributes[{k}] is not a JSON object") from None
        if not isinstance(per_phrase, list) or not isinstance(phrase_ids, list) or len(per_phrase) != len(phrase_ids):
            raise bad(f"attributes[{k}] ({bbox}): 'attributes' and 'phrase_IDs' are not lists of one length")
        for labels, row_id in zip(per_phrase, phrase_ids):
            try:
                sent = float(str(row_id).rsplit("|", 1)[-1])
            except ValueError:
                raise bad(f"attributes[{k}] ({bbox}): a phrase_IDs entry does not end in a sentence number",
                          row_id) from None
            for text in labels:
                parts = text.split("|", 2) if isinstance(text, str) else ()
                if len(parts) != 3 or parts[1] not in YES_NO:
                    raise bad(f"attributes[{k}] ({bbox}): an attribute is not 'category|yes|label' or "
                              f"'category|no|label'", text)
                cat, ctx, label = parts
                relations.rows.append((study, image, str(row_id), sent, bbox, YES_NO[ctx], label, cat, ctx))


def tabular_from_zip(zip_path: Path, out_dir: Path, log=None) -> dict[str, Path]:
    """Write ``bbox_objects_tabular.txt`` and ``attribute_relations_tabular.txt`` for ``zip_path`` into
    ``out_dir`` (each under a temporary name, then renamed); return their paths keyed ``silver_bbox`` and
    ``silver_relations``. Rows: members in dicom-id order, each image's rows in its JSON's order.

    Raises SourceError naming the zip and the member for a corrupt zip, a member that is not JSON, or one
    that lacks a key the tables need. ``log`` (a callable taking a line) receives progress.
    """
    zip_path, out_dir = Path(zip_path), Path(out_dir)
    zip_name = display_name(zip_path)
    out_dir.mkdir(parents=True, exist_ok=True)
    names = output_names()
    tables: dict[str, _Table] = {}
    try:
        with zipfile.ZipFile(zip_path) as zf:
            members = _members(zf, zip_name)
            for name in TABULAR:
                tables[name] = _Table(name, out_dir / names[name], zip_name)
            boxes, relations = tables["silver_bbox"], tables["silver_relations"]
            step = max(1, len(members) // 10)
            for n, (dicom, info) in enumerate(members, 1):
                _image_rows(_load(zf, info, zip_name), dicom, info.filename, zip_name, boxes, relations)
                for table in (boxes, relations):
                    if len(table.rows) >= CHUNK_ROWS:
                        table.flush()
                if log is not None and (n % step == 0 or n == len(members)):
                    log(f"{zip_name}: {n}/{len(members)} scene graphs")
            for table in tables.values():
                table.finish()
    except _ZIP_ERRORS as exc:
        raise SourceError(zip_name, f"is not a readable zip archive ({exc})", fix=_FIX_DOWNLOAD) from None
    except OSError as exc:
        raise SourceError(zip_name, f"conversion failed ({exc.strerror or exc}: {exc.filename})",
                          fix=f"check that the zip is readable by this user and that {out_dir} is writable and "
                              "has free space") from None
    finally:
        for table in tables.values():
            table.discard()  # no-op after finish (the temporary file was renamed)
    if log is not None:
        log(f"{zip_name}: {tables['silver_bbox'].count} box rows, {tables['silver_relations'].count} relation rows")
    return {name: out_dir / names[name] for name in TABULAR}


def scene_tabular_cached(zip_path: Path, cache_dir: Path, log=None) -> dict[str, Path]:
    """``tabular_from_zip`` made once per version of the zip: the files live in ``cache_dir`` under a folder
    keyed by the zip's resolved path and its ``hashing.stat_key`` (size, mtime, ctime, inode); a later call for
    the same version returns them without opening the zip, and older versions' folders of the same zip are
    removed."""
    zip_path, cache_dir = Path(zip_path), Path(cache_dir)
    try:
        st = zip_path.stat()
    except OSError as exc:
        raise SourceError(display_name(zip_path), f"cannot be read ({exc.strerror or exc})",
                          fix="check that EHRXQA_SOURCE_ROOT points at the PhysioNet root and that "
                              "silver_dataset/scene_graph.zip was downloaded") from None
    path_key = hashlib.sha256(str(zip_path.resolve()).encode()).hexdigest()[:16]
    state_key = hashlib.sha256(":".join(map(str, stat_key(st))).encode()).hexdigest()[:12]
    target = cache_dir / f"{path_key}-{state_key}-scene_tabular"
    paths = {name: target / file for name, file in output_names().items()}
    if not all(p.is_file() for p in paths.values()):
        cache_dir.mkdir(parents=True, exist_ok=True)
        tmp = cache_dir / f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            tabular_from_zip(zip_path, tmp, log=log)
            shutil.rmtree(target, ignore_errors=True)  # an incomplete folder left by a crash
            try:
                os.replace(tmp, target)
            except OSError:  # another process finished first: keep its copy
                if not all(p.is_file() for p in paths.values()):
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    for stale in cache_dir.glob(f"{path_key}-*"):  # older versions of the same zip
        if stale != target:
            shutil.rmtree(stale, ignore_errors=True)
    return paths
