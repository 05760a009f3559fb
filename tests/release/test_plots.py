"""release/plots: valid PNGs, identical bytes for identical numbers, embedded in markdown for the UI."""

import base64
import io

import pytest
from PIL import Image

from ehrxqa_pipeline.release import plots, tables
from tests.release.helpers import FUNNELS, REJECTED, make_release

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _pngs(tmp_path) -> dict[str, bytes]:
    return plots.render_all(tables.gather(make_release(tmp_path), FUNNELS, REJECTED))


@pytest.fixture(scope="module")
def pngs(tmp_path_factory) -> dict[str, bytes]:
    """One rendering for the tests that only read it (drawing the five figures is most of this file's time)."""
    return _pngs(tmp_path_factory.mktemp("plots"))


def _text_chunks(png: bytes) -> list[bytes]:
    """Names of the PNG's text chunks (tEXt, zTXt, iTXt) and of its time chunk (tIME)."""
    out, pos = [], 8
    while pos < len(png):
        length, kind = int.from_bytes(png[pos:pos + 4], "big"), png[pos + 4:pos + 8]
        if kind in (b"tEXt", b"zTXt", b"iTXt", b"tIME"):
            out.append(kind + b":" + png[pos + 8:pos + 8 + length].split(b"\0")[0])
        pos += 12 + length
    return out


def test_plots_are_valid_pngs_without_software_or_date(pngs):
    assert sorted(pngs) == ["answers_ehrxqa.png", "answers_mimic_cxr_vqa.png", "funnel.png",
                            "templates_ehrxqa.png", "templates_mimic_cxr_vqa.png"]
    for name, png in pngs.items():
        assert png.startswith(PNG_SIGNATURE), name
        with Image.open(io.BytesIO(png)) as im:
            im.verify()
            assert im.format == "PNG" and im.size[0] > 300 and im.size[1] > 200
        assert _text_chunks(png) == [], name


def test_same_numbers_give_the_same_bytes(pngs, tmp_path):
    first, second = pngs, _pngs(tmp_path)  # the second drawn again, from a release in another folder
    assert first == second
    changed = {**FUNNELS, "gold": [["all_images", 1234], ["not_gold_patient", 40]]}
    again = plots.render_all(tables.gather(tmp_path / "release", changed, REJECTED))
    assert again["funnel.png"] != first["funnel.png"] and again["answers_ehrxqa.png"] == first["answers_ehrxqa.png"]


def test_write_plots_and_markdown_image(pngs, tmp_path):
    (tmp_path / "release" / "plots").mkdir(parents=True)
    (tmp_path / "release" / "plots" / "old_plot.png").write_bytes(b"x")  # no longer drawn: removed
    paths = plots.write_plots(tmp_path / "release", pngs)
    assert sorted(p.name for p in (tmp_path / "release" / "plots").iterdir()) == sorted(pngs)
    assert all(paths[n].read_bytes() == png for n, png in pngs.items())
    md = plots.markdown_image(pngs["funnel.png"], "funnel.png")
    assert md.startswith("![funnel.png](data:image/png;base64,")
    assert base64.b64decode(md.split(",", 1)[1].rstrip(")")) == pngs["funnel.png"]


def test_a_figure_whose_numbers_are_unchanged_is_read_back_not_drawn(pngs, tmp_path, monkeypatch):
    """With the release's plots folder and a memo, only the figures whose numbers changed are drawn again (or
    whose PNG file is no longer the one drawn); the bytes equal a fresh rendering's."""
    gathered = tables.gather(make_release(tmp_path), FUNNELS, REJECTED)
    folder, memo = tmp_path / "release" / plots.OUT_DIR, tmp_path / "cache" / "plots.json"
    plots.write_plots(tmp_path / "release", plots.render_all(gathered, kept=folder, memo=memo))
    drawn = []
    for draw in {d for d, *_ in plots.figures(gathered).values()}:
        monkeypatch.setattr(plots, draw.__name__, lambda *a, f=draw: drawn.append(f.__name__) or f(*a))
    assert plots.render_all(gathered, kept=folder, memo=memo) == pngs  # a fresh rendering of the same numbers
    assert drawn == []  # every figure read back
    changed = tables.gather(tmp_path / "release", {**FUNNELS, "gold": [["all_images", 1234]]}, REJECTED)
    (folder / "answers_ehrxqa.png").write_bytes(b"altered")
    again = plots.render_all(changed, kept=folder, memo=memo)
    assert drawn == ["grouped_bars_png", "funnel_png"] and again == plots.render_all(changed)
