import polars as pl
import pytest

from ehrxqa_pipeline.sources.images import IMAGE_SCHEMA, image_relpath_expr, list_images
from ehrxqa_pipeline.sources.schema import CXR_FILES_DIR, MIMIC_CXR, image_relpath, release_path

from .conftest import IMAGES


def test_list_images(source):
    df = list_images(source.root)
    assert df.schema == pl.Schema(IMAGE_SCHEMA)
    expected = sorted(image_relpath(s, st, d) for d, s, st, *_ in IMAGES)
    assert df["relpath"].to_list() == expected
    row = df.filter(pl.col("subject_id") == 10000033).row(0, named=True)
    assert row["relpath"] == "p10/p10000033/s50000002/1f2e3d4c-66666666-77777777-88888888-99999999.jpg"
    assert row["study_id"] == 50000002 and row["dicom_id"] == IMAGES[2][0]
    assert (df["bytes"] > 0).all()


def test_prefix_and_strays(source):
    files = source.root / release_path(MIMIC_CXR, CXR_FILES_DIR)
    (files / "index.html").write_text("x")
    (files / "p11" / "p11000011" / "s50000003" / "notes.txt").write_text("x")
    (files / "p11" / "p11000011" / "README").write_text("x")
    assert list_images(source.root, "p11")["subject_id"].to_list() == [11000011]
    assert list_images(source.root).height == 4
    assert list_images(source.root, "p15").height == 0


def test_absent_tree(tmp_path):
    df = list_images(tmp_path)
    assert df.height == 0 and df.schema == pl.Schema(IMAGE_SCHEMA)


def test_bad_prefix():
    with pytest.raises(ValueError):
        list_images(".", "../etc")


def test_relpath_expr_matches_schema():
    df = pl.DataFrame({"subject_id": [10000032], "study_id": [50414267], "dicom_id": ["abc"]})
    assert df.select(image_relpath_expr()).item() == image_relpath(10000032, 50414267, "abc")
