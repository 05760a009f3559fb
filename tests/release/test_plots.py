"""release/plots: valid PNGs, identical bytes for identical numbers, embedded in markdown for the UI."""

import base64
import io

from PIL import Image

from ehrxqa_pipeline.release import plots, tables
from tests.release.helpers import FUNNELS, REJECTED, make_release

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _pngs(tmp_path) -> dict[str, bytes]:
    return plots.render_all(tables.gather(make_release(tmp_path), FUNNELS, REJECTED))


def _text_chunks(png: bytes) -> list[bytes]:
    """Names of the PNG's text chunks (tEXt, zTXt, iTXt) and of its time chunk (tIME)."""
    out, pos = [], 8
    while pos < len(png):
        length, kind = int.from_bytes(png[pos:pos + 4], "big"), png[pos + 4:pos + 8]
        if kind in (b"tEXt", b"zTXt", b"iTXt", b"tIME"):
            out.append(kind + b":" + png[pos + 8:pos + 8 + length].split(b"\0")[0])
        pos += 12 + length
    return out


def test_plots_are_valid_pngs_without_software_or_date(tmp_path):
    pngs = _pngs(tmp_path)
    assert sorted(pngs) == ["answers_ehrxqa.png", "answers_mimic_cxr_vqa.png", "funnel.png",
                            "templates_ehrxqa.png", "templates_mimic_cxr_vqa.png"]
    for name, png in pngs.items():
        assert png.startswith(PNG_SIGNATURE), name
        with Image.open(io.BytesIO(png)) as im:
            im.verify()
            assert im.format == "PNG" and im.size[0] > 300 and im.size[1] > 200
        assert _text_chunks(png) == [], name


def test_same_numbers_give_the_same_bytes(tmp_path):
    first, second = _pngs(tmp_path / "a"), _pngs(tmp_path / "b")
    assert first == second
    changed = {**FUNNELS, "gold": [["all_images", 1234], ["not_gold_patient", 40]]}
    again = plots.render_all(tables.gather(tmp_path / "a" / "release", changed, REJECTED))
    assert again["funnel.png"] != first["funnel.png"] and again["answers_ehrxqa.png"] == first["answers_ehrxqa.png"]


def test_write_plots_and_markdown_image(tmp_path):
    pngs = _pngs(tmp_path)
    (tmp_path / "release" / "plots").mkdir()
    (tmp_path / "release" / "plots" / "old_plot.png").write_bytes(b"x")  # no longer drawn: removed
    paths = plots.write_plots(tmp_path / "release", pngs)
    assert sorted(p.name for p in (tmp_path / "release" / "plots").iterdir()) == sorted(pngs)
    assert all(paths[n].read_bytes() == png for n, png in pngs.items())
    md = plots.markdown_image(pngs["funnel.png"], "funnel.png")
    assert md.startswith("![funnel.png](data:image/png;base64,")
    assert base64.b64decode(md.split(",", 1)[1].rstrip(")")) == pngs["funnel.png"]
