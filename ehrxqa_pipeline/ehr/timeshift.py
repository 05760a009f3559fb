"""Per-patient time shift into [start_year, current time], whole days, exact calendar arithmetic.

Every time of a patient moves by the same number of whole days (``t + to_days(offset)`` on TIMESTAMP
values: no time zone, no DST, no 365-day years -- defect 14), so every interval between two of the
patient's records, the time of day and the study chronology are preserved exactly. Study times are not
rotated (the published de-identification gives each study another study's time, defect 16).

* Non-current patients: a target year is drawn from ``start_year .. start_year + span`` with weights
  1 .. span + 1 (``rng.generator(seed, "ehr_db.<which>.target_year")``, patients in subject_id order); the
  offset moves the date of the patient's first TB_CXR study to the same month and day of that year
  (29 February becomes the 28th in a common year).
* Current patients: a day ``D`` is drawn uniformly among the days allowed by ``cohort`` (the instants
  ``D + 23:59:00`` inside the latest admission; ``"ehr_db.<which>.current_instant"``) and the offset maps
  that instant onto the current time, so the admission is open at the current time (dischtime removed).
* dob: year anchor_year - anchor_age, day of the year uniform over that year's days (no overflow into the
  next year, defect 14; ``"ehr_db.<which>.dob"``), midnight, shifted with the patient. dod is shifted and
  becomes null when later than the current time (the patient is alive "now") or earlier than the start.

``<build>._offsets``: subject_id, is_current, target_year, offset_days, now_original (current patients:
the source instant mapped onto the current time), dob_original, dob, dod.
"""

from __future__ import annotations

import duckdb
import numpy as np
import polars as pl

from ehrxqa_pipeline.ehr.config import DbConfig
from ehrxqa_pipeline.rng import generator


def shift(expr: str, offset: str = "o.offset_days") -> str:
    """SQL: a TIMESTAMP (or DATE) expression moved by the patient's offset in whole days."""
    return f"(CAST({expr} AS TIMESTAMP) + to_days(CAST({offset} AS INTEGER)))"


def compute_offsets(con: duckdb.DuckDBPyConnection, which: str, config: DbConfig, seed: int,
                    build: str) -> dict:
    """Create ``<build>._offsets`` for the sampled patients; return counts."""
    rows = con.execute(f"""
        SELECT s.subject_id, s.is_current, c.cur_days, c.birth_year,
               CAST(make_date(c.birth_year + 1, 1, 1) - make_date(c.birth_year, 1, 1) AS BIGINT) AS year_days
        FROM {build}._sampled s JOIN {build}._candidates c USING (subject_id)
        ORDER BY s.subject_id""").pl()
    current = rows.filter(pl.col("is_current"))
    other = rows.filter(~pl.col("is_current"))

    years, weights = config.year_weights()
    target = generator(seed, f"ehr_db.{which}.target_year").choice(years, size=other.height, p=weights)
    cur_days = current["cur_days"].to_numpy()
    if current.height and cur_days.min() < 1:
        raise ValueError("a current patient without an admissible current instant (cohort rule broken)")
    day_k = generator(seed, f"ehr_db.{which}.current_instant").integers(0, np.maximum(cur_days, 1)) \
        if current.height else np.zeros(0, dtype=np.int64)
    dob_day = generator(seed, f"ehr_db.{which}.dob").integers(0, rows["year_days"].to_numpy()) \
        if rows.height else np.zeros(0, dtype=np.int64)

    draws = pl.concat([
        current.select("subject_id").with_columns(pl.lit(None, pl.Int64).alias("target_year"),
                                                  pl.Series("day_k", day_k, dtype=pl.Int64)),
        other.select("subject_id").with_columns(pl.Series("target_year", target, dtype=pl.Int64),
                                                pl.lit(None, pl.Int64).alias("day_k")),
    ]).join(rows.select("subject_id", pl.Series("dob_day", dob_day, dtype=pl.Int64)), on="subject_id")

    start, now = config.sql_bounds()
    now_date = f"DATE '{config.current_time:%Y-%m-%d}'"
    tod = f"TIME '{config.current_time:%H:%M:%S}'"
    con.register("_offset_draws", draws)
    try:
        con.execute(f"""
        CREATE OR REPLACE TABLE {build}._offsets AS
        WITH d AS (
            SELECT s.subject_id, s.is_current, d.target_year, d.day_k, d.dob_day, c.first_study, c.dod,
                   c.birth_year, c.cur_day_first,
                   CAST(c.first_study AS DATE) AS fs_date
            FROM {build}._sampled s JOIN _offset_draws d USING (subject_id)
            JOIN {build}._candidates c USING (subject_id)),
        o AS (
            SELECT *,
                   CAST(CASE WHEN is_current THEN {now_date} - (cur_day_first + CAST(day_k AS INTEGER))
                        ELSE make_date(target_year, month(fs_date),
                                       least(day(fs_date), day(last_day(make_date(target_year, month(fs_date), 1)))))
                             - fs_date END AS BIGINT) AS offset_days,
                   CASE WHEN is_current THEN (cur_day_first + CAST(day_k AS INTEGER)) + {tod} END AS now_original,
                   make_date(birth_year, 1, 1) + CAST(dob_day AS INTEGER) AS dob_original
            FROM d)
        SELECT subject_id, is_current, target_year, offset_days, now_original, dob_original,
               {shift('dob_original', 'offset_days')} AS dob,
               CASE WHEN {shift('dod', 'offset_days')} BETWEEN {start} AND {now}
                    THEN {shift('dod', 'offset_days')} END AS dod,
               dod IS NOT NULL AND {shift('dod', 'offset_days')} > {now} AS dod_after_current_time,
               dod IS NOT NULL AND {shift('dod', 'offset_days')} < {start} AS dod_before_start
        FROM o ORDER BY subject_id""")
    finally:
        con.unregister("_offset_draws")
    counts = con.execute(f"""
        SELECT count(*) FILTER (is_current), count(*) FILTER (dod_after_current_time),
               count(*) FILTER (dod_before_start)
        FROM {build}._offsets""").fetchone()
    return {"current": int(counts[0]), "dod_nulled_after_current_time": int(counts[1]),
            "dod_nulled_before_start": int(counts[2])}
