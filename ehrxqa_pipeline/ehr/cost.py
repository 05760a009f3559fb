"""The synthetic COST table (MIMIC-IV has no charges; the EHRSQL templates ask for costs).

Rule (reference 5.10): each event type -- diagnoses_icd, labevents, procedures_icd, prescriptions -- gets a
mean price drawn from Poisson(10) (at least 1), and each code / lab itemid / drug of that type a price drawn
from Normal(mean, 1), rounded to cents and at least 0.01 (the published draw can go negative). The price
list is drawn over the source's sorted codes (the ICD dictionaries, d_labitems, the distinct lower-cased
drug names) with ``rng.generator(seed, "ehr_db.cost.<event_type>")``, so one code has the same price in the
silver and the gold database and the list does not depend on which patients were drawn. COST has one row
per event of those four tables: (subject_id, hadm_id, event_type, event_id = the event's row_id,
chargetime = its charttime / starttime, cost).
"""

from __future__ import annotations

import duckdb
import numpy as np
import polars as pl

from ehrxqa_pipeline.filters import Rule, reason_sql
from ehrxqa_pipeline.rng import generator

# event type, the priced key (on the event alias e), the event's time column, the source of the price keys
EVENT_TYPES = (
    ("diagnoses_icd", "e.icd_code", "charttime",
     "SELECT DISTINCT lower(trim(icd_code)) FROM ingest.d_icd_diagnoses WHERE icd_code IS NOT NULL"),
    ("labevents", "CAST(e.itemid AS VARCHAR)", "charttime",
     "SELECT DISTINCT CAST(itemid AS VARCHAR) FROM ingest.d_labitems WHERE itemid IS NOT NULL"),
    ("procedures_icd", "e.icd_code", "charttime",
     "SELECT DISTINCT lower(trim(icd_code)) FROM ingest.d_icd_procedures WHERE icd_code IS NOT NULL"),
    ("prescriptions", "e.drug", "starttime",
     "SELECT DISTINCT lower(trim(drug)) FROM ingest.prescriptions WHERE drug IS NOT NULL"),
)
MEAN_PRICE = 10.0


def build_prices(con: duckdb.DuckDBPyConnection, seed: int, build: str) -> int:
    """Create ``<build>._prices`` (event_type, key, cost); return its row count."""
    frames = []
    for event_type, _, _, keys_sql in EVENT_TYPES:  # four event types, not a loop over rows
        keys = con.execute(f"SELECT * FROM ({keys_sql}) ORDER BY 1").fetchnumpy()
        keys = np.asarray(next(iter(keys.values())), dtype=object)
        rng = generator(seed, f"ehr_db.cost.{event_type}")
        mean = max(1, int(rng.poisson(MEAN_PRICE)))
        cost = np.maximum(np.round(rng.normal(mean, 1.0, len(keys)), 2), 0.01)
        frames.append(pl.DataFrame({"event_type": [event_type] * len(keys), "key": keys.tolist(), "cost": cost},
                                   schema={"event_type": pl.String, "key": pl.String, "cost": pl.Float64}))
    con.register("_price_frame", pl.concat(frames))
    try:
        con.execute(f"CREATE OR REPLACE TABLE {build}._prices AS SELECT * FROM _price_frame "
                    f"ORDER BY event_type, key")
    finally:
        con.unregister("_price_frame")
    return con.execute(f"SELECT count(*) FROM {build}._prices").fetchone()[0]


NO_PRICE = Rule("no_price", "p.cost IS NULL", "an event whose code has no price has no cost to charge")


def cost_sql(schema: str, build: str) -> str:
    """Staged COST rows from the final event tables of ``schema`` (an event without a price: ``no_price``)."""
    return " UNION ALL ".join(
        f"""SELECT e.subject_id, e.hadm_id, '{event_type}' AS event_type, e.row_id AS event_id,
                   e.{time_col} AS chargetime, p.cost,
                   {reason_sql([NO_PRICE])} AS reason
            FROM {schema}.{event_type} e
            LEFT JOIN {build}._prices p ON p.event_type = '{event_type}' AND p.key = {key}"""
        for event_type, key, time_col, _ in EVENT_TYPES)
