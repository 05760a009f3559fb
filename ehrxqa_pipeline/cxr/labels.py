"""Label refinement: sentence-level Chest ImaGenome relations -> image x (object, attribute) labels, in DuckDB.

Grain of the output ``out_table``: one row per image x AFFIRMED pool pair (image_id, object, attribute);
every other (image, pool pair) is negative. Negatives are implied, never stored: the dense view
(``dense_labels_sql``: one row per image x pool pair with relation 0/1) is a cross join computed at query
time. ``{out_table}_images`` holds the image universe (image_id, study_id): every image that has at least
one row in the input, even when all its rows are dropped (all its labels are then 0). ``{out_table}_pairs``
holds the pool (object, attribute, category) = ``Ontology.pairs``.

Steps (reference-builders.md 3.3 with defects 4-6 fixed), all on the rows of ``relations_sql``, i.e. one
cohort's raw relations (silver and gold alike; gold is refined from raw gold rows, never from a refined
table -- defect 5):

1. Row filters (``ROW_RULES``), first matching reason wins (``RefineResult.dropped_rows``): ``nlp``
   (categoryID nlp), ``unknown_bbox`` (bbox ``unknown``), ``not_in_ontology`` (bbox not a report object or
   label not a target-category attribute), ``impossible_pair`` ((bbox, label) outside the possible pairs
   INCLUDING the removed labels -- an NLP mislocation implies nothing, not even at its ancestors; the
   published order propagates first, so a mislocated child could make a possible parent positive). Dropped
   rows can be written to ``rejected_table`` with their reason.
2. Report-level aggregation per (image, object, attribute): the relation of the last sentence (largest
   ``sent_loc``) wins; inside that sentence an affirmation beats a negation (the published tie depends on
   row order -- defect 4); a row without ``sent_loc`` ranks before every located sentence. ``relation = 1``
   is affirmed, any other value negated.
3. Propagation of AFFIRMED pairs only: an affirmed (o, a) affirms (o', a') for every ancestor-or-self o' of
   o and a' of a (transitive closure maps of the ontology). Negations are never propagated, so "no
   pneumonia" cannot negate an affirmed "lung opacity" (defect 4). The final label of a pool pair is 1 iff
   the pair or a descendant pair is affirmed by its last sentence, else 0.
4. Removed labels: pairs with a removed object or attribute are dropped AFTER propagation (an affirmed
   ``pigtail catheter`` still affirms ``chest tube``) and are not in the pool, so they never come back as
   negatives (defect 6). Propagation from a pool-closed pair stays inside the possible pairs, so no pair
   outside the pool can be produced.

Counts for asset metadata: ``RefineResult.dropped_rows`` (rows per drop reason) and ``RefineResult.counts``
(see ``_COUNTS_SQL`` and ``refine_labels``). Checks live in ``labels_checks``.
"""

from __future__ import annotations

import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field

import duckdb
import polars as pl

from ehrxqa_pipeline.cxr.ontology import Ontology
from ehrxqa_pipeline.filters import Rule, reason_sql, reasons_of, tally

# Row filters over a relation row (is_nlp, bbox, label_name) joined to the ontology's report objects (o),
# target-category attributes (a) and possible pairs (f); the first that holds is the row's drop reason.
ROW_RULES = (
    Rule("nlp", "is_nlp", "nlp rows are report-level normal/abnormal summaries, not an object's finding"),
    Rule("unknown_bbox", "bbox = 'unknown'", "a finding without an anatomical location has no object to ask of"),
    Rule("not_in_ontology", "o.object IS NULL OR a.attribute IS NULL",
         "the bbox is no report object or the label no target-category attribute"),
    Rule("impossible_pair", "f.object IS NULL", "an NLP mislocation (a pair the ontology rules out) implies "
                                                "nothing, not even at its ancestors"),
)
DROP_REASONS: tuple[str, ...] = reasons_of(ROW_RULES)
IS_NLP = "coalesce(categoryID = 'nlp', FALSE)"
LABEL_COLUMNS = ("image_id", "object", "attribute")  # out_table, sorted by these


@dataclass(frozen=True)
class RefineResult:
    """Names of the written tables and the counts of every step."""

    out_table: str  # image_id, object, attribute -- affirmed rows only
    images_table: str  # image_id, study_id -- the image universe
    pairs_table: str  # object, attribute, category -- the pool
    dropped_rows: dict[str, int]  # reason -> input rows dropped, in DROP_REASONS order
    counts: dict[str, int] = field(default_factory=dict)

    def metadata(self) -> dict[str, int]:
        """Flat counts for Dagster asset metadata."""
        return {**self.counts, **{f"dropped_{k}_rows": v for k, v in self.dropped_rows.items()}}


def relations_sql(table: str, images_sql: str | None = None) -> str:
    """A SELECT in the shape ``refine_labels`` wants over an ingested relations table (silver or gold).

    ``image_id`` loses its ``.dcm``; ``sent_loc`` is re-derived from the last ``|`` field of ``row_id`` as
    the published label script does (the gold file's own column may be empty), falling back to the file's
    ``sent_loc``. ``images_sql`` (a SELECT of one column of dicom ids) restricts the rows to a cohort.
    """
    cohort = f"WHERE image_id IN ({images_sql})" if images_sql else ""
    return f"""
        SELECT * FROM (
            SELECT regexp_replace(image_id, '\\.dcm$', '') AS image_id, study_id,
                   coalesce(TRY_CAST(string_split(row_id, '|')[-1] AS DOUBLE), sent_loc::DOUBLE) AS sent_loc,
                   bbox, relation, label_name, categoryID
            FROM {table}) {cohort}"""


def dense_labels_sql(out_table: str) -> str:
    """One row per image of ``{out_table}_images`` x pool pair: image_id, study_id, object, attribute,
    category, relation (1 affirmed, 0 otherwise). Computed at query time; row order unspecified."""
    return f"""
        SELECT i.image_id, i.study_id, p.object, p.attribute, p.category,
               (l.image_id IS NOT NULL)::UTINYINT AS relation
        FROM {out_table}_images i CROSS JOIN {out_table}_pairs p
        LEFT JOIN {out_table} l ON l.image_id = i.image_id AND l.object = p.object AND l.attribute = p.attribute"""


def ontology_frames(ontology: Ontology) -> dict[str, pl.DataFrame]:
    """The small lookup tables the SQL joins against (names are suffixes of the temporary tables)."""
    rem_o, rem_a = set(ontology.removed_objects), set(ontology.removed_attributes)
    return {
        "obj": pl.DataFrame({"object": ontology.all_objects,
                             "removed": [o in rem_o for o in ontology.all_objects]}),
        "att": pl.DataFrame({"attribute": ontology.all_attributes,
                             "removed": [a in rem_a for a in ontology.all_attributes]}),
        "full": pl.DataFrame(sorted(ontology.all_pair_set), schema=["object", "attribute"], orient="row"),
        "ou": ontology.object_closure(),
        "au": ontology.attribute_closure(),
        "pool": ontology.pairs,
    }


@contextmanager
def temp_tables(con: duckdb.DuckDBPyConnection, frames: dict[str, pl.DataFrame]):
    """Create one TEMP table per frame under a unique prefix; yields suffix -> table name; drops them after."""
    prefix = f"_cxr_{uuid.uuid4().hex[:10]}"
    names = {k: f"{prefix}_{k}" for k in frames}
    created: list[str] = []
    try:
        for key, df in frames.items():
            view = f"{names[key]}_src"
            con.register(view, df)
            try:
                con.execute(f"CREATE TEMP TABLE {names[key]} AS SELECT * FROM {view}")
            finally:
                con.unregister(view)
            created.append(names[key])
        yield names, prefix
    finally:
        for name in created:
            con.execute(f"DROP TABLE IF EXISTS {name}")


def _classify_sql(t: dict[str, str], relations: str) -> str:
    """Rows grouped per (image, bbox, label, nlp flag) with their drop reason and last-sentence facts."""
    return f"""
        WITH r AS (
            SELECT image_id, study_id, bbox, label_name, {IS_NLP} AS is_nlp,
                   coalesce(relation = 1, FALSE) AS aff, coalesce(sent_loc::DOUBLE, '-inf'::DOUBLE) AS s
            FROM ({relations}))
        SELECT g.*, {reason_sql(ROW_RULES)} AS reason,
               coalesce(o.removed OR a.removed, FALSE) AS removed_label
        FROM (SELECT image_id, bbox, label_name, is_nlp, min(study_id) AS study_lo, max(study_id) AS study_hi,
                     count(*) AS n, count(*) FILTER (aff) AS n_aff, max(s) AS last_s,
                     max(s) FILTER (aff) AS last_aff, max(s) FILTER (NOT aff) AS last_neg
              FROM r GROUP BY image_id, bbox, label_name, is_nlp) g
        LEFT JOIN {t['obj']} o ON g.bbox = o.object
        LEFT JOIN {t['att']} a ON g.label_name = a.attribute
        LEFT JOIN {t['full']} f ON g.bbox = f.object AND g.label_name = f.attribute"""


# One pass over the grouped rows; "kept" = rows that pass the row filters. A key is (image, object, attribute).
_COUNTS_SQL = """
    SELECT sum(n) AS rows_in,
           coalesce(sum(n) FILTER (reason IS NULL), 0) AS rows_kept,
           coalesce(sum(n) FILTER (reason IS NULL AND removed_label), 0) AS removed_label_rows,
           coalesce(sum(n - n_aff) FILTER (reason IS NULL), 0) AS negated_rows_kept,
           count(*) FILTER (reason IS NULL) AS mentioned_keys,
           count(*) FILTER (reason IS NULL AND last_aff >= last_s) AS affirmed_keys,
           count(*) FILTER (reason IS NULL AND n_aff > 0 AND n_aff < n) AS conflicting_keys,
           count(*) FILTER (reason IS NULL AND n_aff > 0 AND n_aff < n AND last_aff < last_s)
               AS conflicting_keys_negated_last,
           count(*) FILTER (reason IS NULL AND last_aff = last_s AND last_neg = last_s) AS same_sentence_ties,
           count(*) FILTER (reason = 'impossible_pair' AND last_aff >= last_s) AS impossible_affirmed_keys
    FROM {cls}"""


# The gold patients' later studies (StudyOrder > 1 of cxr_cohort.gold): the gold file labels the first study
# only, so the gold EHRXQA database labels these from the RAW silver relations (cxr_labels/gold_later).
GOLD_LATER_STUDIES = "SELECT image_id FROM cxr_cohort.gold WHERE study_order > 1"


def refine_labels(con: duckdb.DuckDBPyConnection, relations_sql: str, ontology: Ontology, out_table: str,
                  rejected_table: str | None = None) -> RefineResult:
    """Refine ``relations_sql`` into ``out_table`` (+ ``_images``, ``_pairs``); see the module docstring.

    ``relations_sql``: any SELECT yielding image_id (no ``.dcm``), study_id, sent_loc (DOUBLE, may be
    NULL), bbox, relation (1 affirmed), label_name, categoryID, already restricted to one cohort's images
    (``relations_sql()`` builds one from an ingested table). ``rejected_table``: when given, the dropped
    input rows with a ``reason`` column are written there. The three (four) tables are replaced in one
    transaction, so a failure leaves the previous ones intact.
    """
    with temp_tables(con, ontology_frames(ontology)) as (t, prefix):
        cls, prop = f"{prefix}_cls", f"{prefix}_prop"
        try:
            con.execute(f"CREATE TEMP TABLE {cls} AS {_classify_sql(t, relations_sql)}")
            row = con.execute(_COUNTS_SQL.format(cls=cls)).fetchone()
            names = [d[0] for d in con.description]
            counts = {k: int(v or 0) for k, v in zip(names, row)}
            met = con.execute(f"SELECT reason, sum(n) FROM {cls} WHERE reason IS NOT NULL GROUP BY reason")
            dropped = tally(dict(met.fetchall()), DROP_REASONS)
            # Propagation of affirmed keys to every (ancestor-or-self object, ancestor-or-self attribute).
            con.execute(f"""
                CREATE TEMP TABLE {prop} AS
                SELECT DISTINCT c.image_id, ou.ancestor AS object, au.ancestor AS attribute
                FROM {cls} c
                JOIN {t['ou']} ou ON c.bbox = ou.object
                JOIN {t['au']} au ON c.label_name = au.attribute
                WHERE c.reason IS NULL AND c.last_aff >= c.last_s""")
            counts["propagated_keys"] = con.execute(f"SELECT count(*) FROM {prop}").fetchone()[0]
            images = con.execute(f"""
                SELECT count(*), count(*) FILTER (study_lo <> study_hi) FROM (
                    SELECT image_id, min(study_lo) AS study_lo, max(study_hi) AS study_hi
                    FROM {cls} GROUP BY image_id)""").fetchone()
            counts["images"], counts["images_with_several_study_ids"] = int(images[0]), int(images[1])

            con.execute("BEGIN TRANSACTION")
            try:
                for schema in sorted({n.rsplit(".", 1)[0] for n in (out_table, rejected_table or "") if "." in n}):
                    con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
                con.execute(f"""
                    CREATE OR REPLACE TABLE {out_table} AS
                    SELECT p.image_id, p.object, p.attribute FROM {prop} p
                    SEMI JOIN {t['pool']} q ON p.object = q.object AND p.attribute = q.attribute
                    ORDER BY p.image_id, p.object, p.attribute""")
                con.execute(f"""
                    CREATE OR REPLACE TABLE {out_table}_images AS
                    SELECT image_id, min(study_lo) AS study_id FROM {cls}
                    GROUP BY image_id ORDER BY image_id""")
                con.execute(f"CREATE OR REPLACE TABLE {out_table}_pairs AS "
                            f"SELECT object, attribute, category FROM {t['pool']} ORDER BY object, attribute")
                if rejected_table:
                    _write_rejected(con, rejected_table, relations_sql, t)
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
            counts["affirmed_rows_out"] = con.execute(f"SELECT count(*) FROM {out_table}").fetchone()[0]
            counts["removed_label_keys"] = counts["propagated_keys"] - counts["affirmed_rows_out"]
            counts["images_with_findings"] = con.execute(
                f"SELECT count(DISTINCT image_id) FROM {out_table}").fetchone()[0]
            counts["pairs"] = ontology.n_pairs
            counts["dense_rows"] = counts["images"] * ontology.n_pairs
        finally:
            con.execute(f"DROP TABLE IF EXISTS {cls}")
            con.execute(f"DROP TABLE IF EXISTS {prop}")
    return RefineResult(out_table=out_table, images_table=f"{out_table}_images", pairs_table=f"{out_table}_pairs",
                        dropped_rows=dropped, counts=counts)


def _write_rejected(con: duckdb.DuckDBPyConnection, table: str, relations: str, t: dict[str, str]) -> None:
    """The input rows that the row filters drop, with their reason (the ``ROW_RULES`` of ``_classify_sql``)."""
    con.execute(f"""
        CREATE OR REPLACE TABLE {table} AS
        SELECT * EXCLUDE (is_nlp) FROM (
            SELECT r.*, {reason_sql(ROW_RULES)} AS reason
            FROM (SELECT *, {IS_NLP} AS is_nlp FROM ({relations})) r
            LEFT JOIN {t['obj']} o ON r.bbox = o.object
            LEFT JOIN {t['att']} a ON r.label_name = a.attribute
            LEFT JOIN {t['full']} f ON r.bbox = f.object AND r.label_name = f.attribute)
        WHERE reason IS NOT NULL""")
