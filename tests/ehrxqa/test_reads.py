"""Which tables a template's draws read (questions/ehrxqa/reads.py), what the sampling memo keys each template by:
a frame collects the tables of every statement run in it and of every kept value used in it, and a template drawn
in a filler shared with other templates reads at least what it reads drawn alone on a fresh filler."""

from __future__ import annotations

import sqlite3

import pytest

from ehrxqa_pipeline.questions.ehrxqa import CATALOG, ImageFiller
from ehrxqa_pipeline.questions.ehrxqa.memo import table_scope
from ehrxqa_pipeline.questions.ehrxqa.reads import TableReads
from ehrxqa_pipeline.questions.ehrxqa.sampling import SamplingCaps, sample_templates

CAPS = SamplingCaps(train_valid=3, test=3, patience=20)


def test_a_frame_holds_the_tables_its_statements_name_and_those_of_the_kept_values_it_uses():
    conn = sqlite3.connect(":memory:")
    conn.executescript("CREATE TABLE labevents (x); CREATE TABLE d_labitems (x); CREATE TABLE lab (x);"
                       "INSERT INTO labevents VALUES (1)")
    reads = TableReads(conn)
    assert reads.tables == {"labevents", "d_labitems", "lab"}
    assert reads.named("SELECT * FROM labevents JOIN D_LABITEMS USING (x) WHERE 'lab' = 'x'") == reads.tables
    made = []

    def count() -> int:
        made.append(1)
        return reads.conn.execute("SELECT count(*) FROM labevents").fetchone()[0]

    assert reads.cached("n", count) == 1  # made outside any frame: its tables are still kept with it
    with reads.frame() as outer:
        reads.conn.execute("SELECT 1")
        assert outer == set()
        with reads.frame() as inner:
            assert reads.cached("n", count) == 1 and made == [1]  # used again, not made again
        assert inner == {"labevents"}
        reads.conn.execute("SELECT x FROM d_labitems")
    assert outer == {"labevents", "d_labitems"}  # an inner frame's reads count for the outer one
    reads.conn.execute("SELECT x FROM lab")  # no frame open: nothing collects
    assert outer == {"labevents", "d_labitems"}


def _reads(conn, templates) -> tuple[dict, dict]:
    reads: dict = {}
    items, _ = sample_templates(ImageFiller(conn), "gold", 0, CAPS, templates, reads)
    return items, reads


IMAGES = tuple(t for t in CATALOG if not table_scope(t.scope))


@pytest.mark.parametrize(("database", "templates", "least"),
                         [("db_path", IMAGES, 240), ("table_db_path", CATALOG, 170)])
def test_a_template_in_a_shared_filler_reads_at_least_what_it_reads_alone(database, templates, least, request):
    """Every template, drawn after the others in one filler (their pools, resolved studies and last answer kept),
    against each drawn alone on a fresh filler: the same items, and the shared frame holds every table the fresh
    one read. The image and image+table templates on the hand-built database with images; every template on the
    table-template database (where the image templates find no study)."""
    conn = sqlite3.connect(request.getfixturevalue(database))
    shared_items, shared = _reads(conn, templates)
    drawn = 0
    for t in templates:
        items, alone = _reads(conn, [t])
        assert items[t.index] == shared_items[t.index], t.index
        assert set(alone[t.index]) <= set(shared[t.index]), (t.index, alone[t.index], shared[t.index])
        drawn += bool(items[t.index])
    assert drawn >= least
    conn.close()
