"""Study -> admission link through transfers, on planted cases (0, 1 and several matching transfers)."""

from datetime import datetime as dt

import duckdb
import polars as pl

from ehrxqa_pipeline.ehr.tb_cxr import link_sql

T0 = dt(2150, 1, 1)


def _link(studies: list[tuple], transfers: list[tuple]) -> dict[int, tuple]:
    con = duckdb.connect()
    con.register("s", pl.DataFrame(studies, schema=["subject_id", "study_id", "study_datetime"], orient="row"))
    con.register("t", pl.DataFrame(transfers, orient="row", schema={
        "subject_id": pl.Int64, "hadm_id": pl.Int64, "transfer_id": pl.Int64, "intime": pl.Datetime("us"),
        "outtime": pl.Datetime("us")}))
    rows = con.execute(link_sql("SELECT * FROM s", "SELECT * FROM t")).fetchall()
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


def test_zero_one_and_several_matches():
    studies = [
        (1, 100, dt(2150, 1, 2, 12)),  # inside one admission transfer
        (1, 101, dt(2150, 3, 1)),  # nowhere
        (2, 200, dt(2150, 1, 5, 10)),  # ED row (no admission) and ward row overlap -> the admission
        (3, 300, dt(2150, 2, 1, 8)),  # two admission-bearing rows overlap -> the latest intime
        (4, 400, dt(2150, 4, 1, 9)),  # only an ED row -> one match without an admission
        (5, 500, dt(2150, 5, 1, 12)),  # on the boundary between two transfers -> the later one
        (6, 600, dt(2150, 6, 1, 12)),  # two ED rows, none with an admission -> null
        (7, 700, dt(2150, 7, 1, 12)),  # a discharge row (no outtime) at that instant does not match
    ]
    transfers = [
        (1, 11, 1001, dt(2150, 1, 1), dt(2150, 1, 3)),
        (2, None, 2001, dt(2150, 1, 5, 6), dt(2150, 1, 5, 12)),
        (2, 21, 2002, dt(2150, 1, 5, 9), dt(2150, 1, 7)),
        (3, 31, 3001, dt(2150, 1, 30), dt(2150, 2, 3)),
        (3, 32, 3002, dt(2150, 2, 1), dt(2150, 2, 2)),
        (4, None, 4001, dt(2150, 4, 1, 8), dt(2150, 4, 1, 11)),
        (5, 51, 5001, dt(2150, 5, 1), dt(2150, 5, 1, 12)),
        (5, 51, 5002, dt(2150, 5, 1, 12), dt(2150, 5, 2)),
        (6, None, 6001, dt(2150, 6, 1, 10), dt(2150, 6, 1, 13)),
        (6, None, 6002, dt(2150, 6, 1, 11), dt(2150, 6, 1, 14)),
        (7, 71, 7001, dt(2150, 7, 1, 12), None),
        (9, 91, 9001, dt(2150, 1, 1), dt(2151, 1, 1)),  # another subject's transfer never matches
    ]
    out = _link(studies, transfers)
    assert out[100] == (1, 11, 1001)
    assert out[101] == (0, None, None)
    assert out[200] == (2, 21, 2002)
    assert out[300] == (2, 32, 3002)
    assert out[400] == (1, None, 4001)
    assert out[500] == (2, 51, 5002)
    assert out[600][:2] == (2, None)
    assert out[700] == (0, None, None)


def test_every_study_gets_exactly_one_row():
    studies = [(1, s, dt(2150, 1, 1, h)) for s, h in ((1, 1), (2, 2), (3, 3))]
    transfers = [(1, 10, t, dt(2150, 1, 1), dt(2150, 1, 2)) for t in (1, 2, 3, 4)]
    out = _link(studies, transfers)
    assert sorted(out) == [1, 2, 3]
    assert all(v == (4, 10, 4) for v in out.values())  # same intime: the largest transfer_id
