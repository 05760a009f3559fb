"""Same warehouse + config + seed -> same database contents (and SQLite bytes); another seed -> another shift."""

from ehrxqa_pipeline.ehr.build import build_answer_sheet, build_database
from ehrxqa_pipeline.ehr.ddl import TABLES
from ehrxqa_pipeline.ehr.export import export_answer_sheet, export_database

from .conftest import CONFIG


def contents(con, result) -> dict[str, str]:
    out = {t.name: con.execute(f"SELECT md5(coalesce(string_agg(CAST(t AS VARCHAR), chr(10) ORDER BY row_id), '')) "
                               f"FROM {result.schema}.{t.name} t").fetchone()[0] for t in TABLES}
    out["tb_cxr_plus"] = con.execute(f"SELECT md5(string_agg(CAST(t AS VARCHAR), chr(10) ORDER BY row_id)) "
                                     f"FROM {result.answers_schema}.tb_cxr_plus t").fetchone()[0]
    return out


def test_same_seed_same_contents_other_seed_other_shift(ehr_inputs, built, exported, exported_sheets, warehouse_copy,
                                                        tmp_path):
    con0, results0 = built
    onto = ehr_inputs[2]
    con = warehouse_copy()
    for which in ("gold", "silver"):  # the other build order changes nothing either
        again = build_database(con, which, CONFIG, seed=0)
        build_answer_sheet(con, which, CONFIG)
        assert contents(con, again) == contents(con0, results0[which]), which
        e = export_database(con, again.schema, tmp_path / which)
        assert e.sqlite_sha256 == exported[which].sqlite_sha256
        sheet = export_answer_sheet(con, again.answers_schema, tmp_path / "answers" / which)
        assert sheet.sqlite_sha256 == exported_sheets[which].sqlite_sha256

    other = build_database(con, "gold", CONFIG, seed=1)
    build_answer_sheet(con, "gold", CONFIG)
    offsets = dict(con.execute(f"SELECT subject_id, offset_days FROM {other.build_schema}._offsets").fetchall())
    offsets0 = dict(con0.execute(f"SELECT subject_id, offset_days FROM {results0['gold'].build_schema}._offsets")
                    .fetchall())
    common = offsets.keys() & offsets0.keys()
    assert common and any(offsets[s] != offsets0[s] for s in common)
    assert contents(con, other)["tb_cxr"] != contents(con0, results0["gold"])["tb_cxr"]
