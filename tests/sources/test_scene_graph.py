"""scene_graph.zip -> scene_tabular: round trip on the synthetic source, faults, cache, determinism.

The synthetic generator writes both the tabular files and the zip made from the same frames, so converting
the zip must give back the tabular rows exactly (as multisets: the zip lists images in dicom-id order, the
generator's files in cohort order), planted defects included.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import polars as pl
import pytest

from ehrxqa_pipeline.sources import scene_graph
from ehrxqa_pipeline.sources.errors import SourceError
from ehrxqa_pipeline.sources.scene_graph import ZIP_RELEASE_PATH, scene_tabular_cached, tabular_from_zip
from ehrxqa_pipeline.sources.schema import TABLES


def _read(path: Path) -> pl.DataFrame:
    """Every column as text, as the pipeline's readers see the file."""
    return pl.read_csv(path, separator="\t", infer_schema=False)


def _same_rows(a: pl.DataFrame, b: pl.DataFrame) -> bool:
    """Equal as multisets of rows: same columns in the same order, sorted on every column."""
    return a.columns == b.columns and a.sort(pl.all()).equals(b.sort(pl.all()))


@pytest.fixture(scope="module")
def demo(small_source) -> tuple[Path, dict]:
    """The session's small synthetic source (tests.conftest.SMALL: 40 CXR patients, about 150 frontal images): every
    planted Chest ImaGenome defect is there at least once. Only read here; the tests edit copies."""
    return small_source


@pytest.fixture(scope="module")
def converted(demo, tmp_path_factory) -> dict[str, pl.DataFrame]:
    root, _ = demo
    paths = tabular_from_zip(root / ZIP_RELEASE_PATH, tmp_path_factory.mktemp("tab"))
    return {name: _read(path) for name, path in paths.items()}


def _rewrite(src: Path, dst: Path, edit) -> None:
    """Copy the zip, passing the first member's text through ``edit`` (same names, same order)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for i, info in enumerate(zin.infolist()):
            data = zin.read(info)
            zout.writestr(info, edit(data.decode()) if i == 0 else data)


def test_round_trip_gives_the_generator_rows(demo, converted):
    root, manifest = demo
    for name, got in converted.items():
        want = _read(root / TABLES[name].release_path)
        assert got.columns == list(TABLES[name].header)
        assert got.height == want.height == manifest["rows"][name]
        assert _same_rows(got, want), name


def test_planted_defects_survive_the_round_trip(demo, converted):
    planted = demo[1]["planted"]["imagenome"]
    boxes, rel = converted["silver_bbox"], converted["silver_relations"]
    per_image = boxes.group_by(dicom=pl.col("object_id").str.splitn("_", 2).struct.field("field_0")).len()
    assert per_image.filter(pl.col("len") < 36).height == planted["images_30_35_boxes"] > 0
    assert 36 * per_image.height - boxes.height == planted["boxes_removed"]
    rel_images = set(rel["image_id"].str.strip_suffix(".dcm"))
    assert len(rel_images - set(per_image["dicom"])) == planted["images_absent_from_bbox"] > 0
    assert set(planted["images_without_silver_relations"]) <= set(per_image["dicom"]) - rel_images
    counts = planted["silver_relations"]
    nlp = pl.col("categoryID") == "nlp"
    assert rel.filter(nlp).height == counts["nlp_rows"] > 0
    assert rel.filter(~nlp & (pl.col("bbox") == "unknown")).height == counts["unknown_bbox_rows"] > 0
    assert rel.filter(~nlp & (pl.col("relation") == "0")).height == counts["negated_rows"] > 0
    assert rel.filter((pl.col("context") == "yes") != (pl.col("relation") == "1")).is_empty()
    assert (rel["row_id"].str.split("|").list.last().cast(pl.Float64) == rel["sent_loc"].cast(pl.Float64)).all()


def test_a_changed_member_shows_in_the_rows(demo, converted, tmp_path):
    """The round-trip comparison can fail: one 'yes' turned into 'no' in the zip is one changed row."""
    root, _ = demo
    changed = tmp_path / "scene_graph.zip"
    _rewrite(root / ZIP_RELEASE_PATH, changed, lambda text: text.replace("|yes|", "|no|", 1))
    got = _read(tabular_from_zip(changed, tmp_path / "out")["silver_relations"])
    want = converted["silver_relations"]
    assert not _same_rows(got, want)
    assert got.join(want, on=got.columns, how="anti").height == 1


def _member_error(demo, tmp_path, edit) -> SourceError:
    bad = tmp_path / "scene_graph.zip"
    _rewrite(demo[0] / ZIP_RELEASE_PATH, bad, edit)
    with zipfile.ZipFile(bad) as zf:
        first = zf.infolist()[0].filename
    with pytest.raises(SourceError) as info:
        tabular_from_zip(bad, tmp_path / "out")
    assert first in str(info.value) and info.value.fix
    assert not list((tmp_path / "out").iterdir())  # no output, not even a temporary file
    return info.value


@pytest.mark.parametrize("edit, problem", [
    (lambda text: text[:-20], "is not valid JSON"),
    (lambda text: text.replace('"x1": ', '"x_1": ', 1), "objects[0] has no key 'x1'"),
    (lambda text: text.replace('"phrase_IDs": ', '"phrase_ids": ', 1), "has no key 'phrase_IDs'"),
    (lambda text: text.replace('"study_id": ', '"StudyID": ', 1), "top-level key 'study_id' is missing"),
    (lambda text: text.replace("|no|", "|maybe|", 1), "is not 'category|yes|label'"),
    (lambda text: text.replace('"x1": ', '"x1": "a", "_": ', 1), "key 'x1' is not a number"),
])
def test_malformed_member_names_the_member(demo, tmp_path, edit, problem):
    err = _member_error(demo, tmp_path, edit)
    assert err.file == ZIP_RELEASE_PATH or err.file.endswith("scene_graph.zip")
    assert problem in str(err)


def test_corrupt_zip(demo, tmp_path):
    data = (demo[0] / ZIP_RELEASE_PATH).read_bytes()
    truncated = tmp_path / "truncated.zip"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(SourceError, match="not a readable zip"):
        tabular_from_zip(truncated, tmp_path / "a")
    damaged = tmp_path / "damaged.zip"
    with zipfile.ZipFile(demo[0] / ZIP_RELEASE_PATH) as zf:
        info = zf.infolist()[3]
    body = bytearray(data)
    start = info.header_offset + 30 + len(info.filename)  # the member's compressed data
    body[start + 50: start + 60] = bytes(10)
    damaged.write_bytes(bytes(body))
    with pytest.raises(SourceError, match=f"member '{info.filename}'"):
        tabular_from_zip(damaged, tmp_path / "b")


def test_cache_reuses_the_conversion(demo, tmp_path, monkeypatch):
    zip_path = tmp_path / "scene_graph.zip"
    zip_path.write_bytes((demo[0] / ZIP_RELEASE_PATH).read_bytes())
    cache = tmp_path / "cache"
    first = scene_tabular_cached(zip_path, cache)
    content = {name: p.read_bytes() for name, p in first.items()}

    def no_zip(*args, **kwargs):
        raise AssertionError("the cached conversion opened the zip again")

    with monkeypatch.context() as mp:
        mp.setattr(scene_graph.zipfile, "ZipFile", no_zip)
        again = scene_tabular_cached(zip_path, cache)
    assert again == first and {name: p.read_bytes() for name, p in again.items()} == content
    os.utime(zip_path, ns=(1, 1))  # a new version of the zip: converted again, the old copy removed
    newer = scene_tabular_cached(zip_path, cache)
    assert newer != first and {name: p.read_bytes() for name, p in newer.items()} == content
    assert [p.name for p in cache.iterdir()] == [newer["silver_bbox"].parent.name]


def test_zip_bytes_are_deterministic(demo, tmp_path):
    from ehrxqa_pipeline.demo.generate import generate_source

    from tests.conftest import SMALL

    again = tmp_path / "again"
    generate_source(again, images=False, log=lambda _: None, **SMALL)
    assert (again / ZIP_RELEASE_PATH).read_bytes() == (demo[0] / ZIP_RELEASE_PATH).read_bytes()
    with zipfile.ZipFile(again / ZIP_RELEASE_PATH) as zf:
        infos = zf.infolist()
    names = [i.filename for i in infos]
    assert names == sorted(names) and all(n.startswith("scene_graph/") for n in names)
    assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}
    with zipfile.ZipFile(again / ZIP_RELEASE_PATH) as zf:
        doc = json.loads(zf.read(names[0]))
    assert set(doc) >= {"image_id", "patient_id", "study_id", "viewpoint", "StudyDateTime", "objects",
                        "attributes", "relationships"}



def test_cache_sees_an_in_place_edit_that_keeps_size_and_mtime(demo, tmp_path):
    """A zip rewritten in place with its size and mtime kept (as `cp -p` or `rsync -a` of another version can
    leave it) is a new version: converted again, not served from the cache."""
    import os
    import re

    def stored(edit, dst):  # members uncompressed, so an edit of the same length keeps the zip's size
        with (zipfile.ZipFile(demo[0] / ZIP_RELEASE_PATH) as zin,
              zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout):
            for i, info in enumerate(zin.infolist()):
                data = zin.read(info)
                info.compress_type = zipfile.ZIP_STORED
                zout.writestr(info, edit(data.decode()) if i == 0 else data)

    zip_path, other = tmp_path / "scene_graph.zip", tmp_path / "other.zip"
    stored(lambda text: text, zip_path)
    stored(lambda text: re.sub(r'("x1": )(\d)', lambda m: m.group(1) + str((int(m.group(2)) + 1) % 10), text,
                               count=1), other)
    assert zip_path.stat().st_size == other.stat().st_size
    first = scene_tabular_cached(zip_path, tmp_path / "cache")
    boxes = first["silver_bbox"].read_text()
    st = zip_path.stat()
    zip_path.write_bytes(other.read_bytes())
    os.utime(zip_path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (zip_path.stat().st_size, zip_path.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    again = scene_tabular_cached(zip_path, tmp_path / "cache")
    assert again["silver_bbox"].read_text() != boxes
