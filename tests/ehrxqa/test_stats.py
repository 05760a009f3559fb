"""EHRXQA statistics: scope axes, Table C9 re-derived independently from the released records, per-template
rows with the reason a template yielded none, markdown."""

from __future__ import annotations

from collections import Counter

import polars as pl
import pytest

from ehrxqa_pipeline.questions.ehrxqa import BY_INDEX, CATALOG
from ehrxqa_pipeline.questions.ehrxqa import stats
from ehrxqa_pipeline.questions.ehrxqa.records import build_records, stored_frame
from ehrxqa_pipeline.questions.ehrxqa.sampling import DatabaseFiles, SamplingCaps, TemplateReport, sample_ehrxqa

# written out by hand (paper Table C9 rows), not derived by the code under test
C9_ROW = {"IMAGE-SINGLE-1": ("image", "1-image"), "IMAGE-SINGLE-2": ("image", "2-image"),
          "IMAGE-SINGLE-N": ("image", "N-image"), "IMAGE-GROUP-N": ("image", "group"),
          "TABLE-NONE": ("table", "none"), "TABLE-SINGLE": ("table", "single"), "TABLE-GROUP": ("table", "group"),
          "MULTIMODAL-SINGLE": ("image+table", "single"), "MULTIMODAL-GROUP": ("image+table", "group")}
TEMPLATES = (1001, 1119, 2001, 2304, 3000, 3205, 4000, 4105)


@pytest.mark.parametrize("scope, axes", [
    ("IMAGE-SINGLE-1", ("image", "single", "1-image", "1-image")),
    ("IMAGE-SINGLE-N", ("image", "single", "N-image", "N-image")),
    ("IMAGE-GROUP-N", ("image", "group", "", "group")),
    ("MULTIMODAL-SINGLE", ("image+table", "single", "", "single")),
    ("TABLE-NONE", ("table", "none", "", "none")),
    ("TABLE-GROUP", ("table", "group", "", "group")),
])
def test_scope_axes(scope, axes):
    got = stats.scope_axes(scope)
    assert (got["modality"], got["patient_scope"], got["images"], got["c9"]) == axes


@pytest.mark.parametrize("scope", ["AUDIO-SINGLE", "IMAGE", "IMAGE-MANY-2"])
def test_unknown_scopes_are_refused(scope):
    with pytest.raises(ValueError, match=scope):
        stats.scope_axes(scope)


@pytest.fixture(scope="module")
def sample(db_path):
    files = DatabaseFiles(db_path, db_path)
    return sample_ehrxqa(files, files, seed=0, caps=SamplingCaps(train_valid=8, test=3),
                         templates=[BY_INDEX[i] for i in TEMPLATES])


def test_c9_rederived_from_the_records(sample):
    records = build_records(stored_frame(sample))
    by_text = {t.text: t.scope for t in CATALOG}
    want = Counter((*C9_ROW[by_text[r["q_tag"]]], split) for split, recs in records.items() for r in recs)
    rows = stats.c9_counts(stats.frame_from_records(records))
    got = {(r["modality"], r["patient"], s): r[s] for r in rows[:-1] for s in ("train", "valid", "test") if r[s]}
    assert got == dict(want)
    total = rows[-1]
    assert total["modality"] == "total"
    for s in ("train", "valid", "test"):
        assert total[s] == len(records[s]) == sum(r[s] for r in rows[:-1])
        assert sum(r[f"{s}_pct"] for r in rows[:-1]) == pytest.approx(100.0)
    # every catalog (modality, patient) row is listed, in paper order, even when empty here
    keys = [(r["modality"], r["patient"]) for r in rows[:-1]]
    assert set(keys) == {C9_ROW[t.scope] for t in CATALOG}
    order = [m for m in ("image", "table", "image+table") if any(k[0] == m for k in keys)]
    assert [k[0] for k in keys] == sorted((k[0] for k in keys), key=order.index)
    assert rows == stats.c9_counts(stored_frame(sample))  # same table from the stored rows


def test_per_template_rows_report_why_none(sample):
    frame = stored_frame(sample)
    empty = TemplateReport(2000, "IMAGE-SINGLE-2", "silver", 80, 0, 0, 0, "empty_pool", "no patient with >= 2 studies")
    reports = [r.row() for r in sample.reports] + [empty.row()]
    rows = {r["template_index"]: r for r in stats.per_template(frame, reports)}
    assert set(rows) == {t.index for t in CATALOG}
    assert rows[1001]["train"] + rows[1001]["valid"] == 8 and rows[1001]["test"] == 3
    assert rows[1001]["silver_reason"] == "" and rows[1001]["silver_stop"] == "cap"
    assert rows[2000]["silver_kept"] == 0 and rows[2000]["silver_reason"] == "no patient with >= 2 studies"
    assert rows[1119]["silver_kept"] == 6 and "no new question" in rows[1119]["silver_reason"]
    assert rows[5000]["silver_stop"] == rows[5000]["gold_stop"] == "not sampled"
    md = stats.render_markdown(stats.c9_counts(frame), list(rows.values()))
    assert "cf. paper Table C9" in md and "| image | 1-image |" in md
    assert "silver: no patient with >= 2 studies" in md


def test_empty_frame_gives_zero_rows():
    frame = pl.DataFrame(schema={"split": pl.String, "template_index": pl.Int64, "scope": pl.String})
    rows = stats.c9_counts(frame)
    assert all(r[s] == 0 and r[f"{s}_pct"] == 0.0 for r in rows for s in ("train", "valid", "test"))
