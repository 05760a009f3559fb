"""Settings of the EHRXQA integrated databases (silver: training/validation questions; gold: test).

Defaults follow the paper and the published invocation (reference-builders.md 5.1, 5.7, 5.8): 800 silver
/ 400 gold patients, about 10 % current patients, current time ``2105-12-31 23:59:00``, first studies
shifted into 2100-2105. The synthetic demo scales the patient counts down through this dataclass.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field

WHICH = ("silver", "gold")
DB_NAME = "mimic_iv_cxr"

# The nine chartevents items the question templates use (reference 5.10).
CHART_ITEMIDS = (223762, 220277, 220045, 220210, 220050, 220051, 220052, 226512, 226730)
D_ITEMS_LINKSTO = ("chartevents", "inputevents", "outputevents")


@dataclass(frozen=True)
class DbConfig:
    """Sizes, time frame and filter settings of both databases."""

    silver_patients: int = 800
    gold_patients: int = 400
    current_ratio: float = 0.1  # current patients = round(ratio * patients), half up
    current_time: dt.datetime = dt.datetime(2105, 12, 31, 23, 59, 0)
    start_year: int = 2100  # every time of the database lies in [start_year-01-01, current_time]
    time_span: int = 5  # first studies land in start_year .. start_year + time_span
    min_age: int = 11  # ages at admission kept: min_age .. max_age
    max_age: int = 89
    los_quantile: float = 0.99  # admissions longer than this quantile of the candidates' stays are dropped
    volume_unit: str = "ml"  # inputevents / outputevents keep volumes only (the tables carry no unit)
    chart_itemids: tuple[int, ...] = CHART_ITEMIDS
    d_items_linksto: tuple[str, ...] = field(default=D_ITEMS_LINKSTO)

    def __post_init__(self) -> None:
        if not 0.0 <= self.current_ratio <= 1.0:
            raise ValueError(f"current_ratio must lie in [0, 1], got {self.current_ratio}")
        if self.silver_patients < 0 or self.gold_patients < 0:
            raise ValueError("patient counts must be >= 0")
        if self.current_time < self.start:
            raise ValueError(f"current_time {self.current_time} is before {self.start}")
        if self.start_year + self.time_span > self.current_time.year:
            raise ValueError("start_year + time_span must not be later than the current time's year")
        if not 0 <= self.min_age <= self.max_age:
            raise ValueError("need 0 <= min_age <= max_age")

    @property
    def start(self) -> dt.datetime:
        return dt.datetime(self.start_year, 1, 1)

    def n_patients(self, which: str) -> int:
        if which not in WHICH:
            raise ValueError(f"which must be one of {WHICH}, got {which!r}")
        return self.silver_patients if which == "silver" else self.gold_patients

    def n_current(self, n_patients: int) -> int:
        """Exact number of current patients for ``n_patients`` (round half up, not banker's rounding)."""
        return int(math.floor(self.current_ratio * n_patients + 0.5 + 1e-9))

    def year_weights(self) -> tuple[list[int], list[float]]:
        """Target years of the first study and their probabilities, proportional to 1, 2, ..., span + 1
        (the published sampler's weights: later years are likelier)."""
        years = [self.start_year + k for k in range(self.time_span + 1)]
        total = sum(range(1, self.time_span + 2))
        return years, [(k + 1) / total for k in range(self.time_span + 1)]

    def sql_bounds(self) -> tuple[str, str]:
        """(start, current time) as DuckDB TIMESTAMP literals."""
        return (f"TIMESTAMP '{self.start:%Y-%m-%d %H:%M:%S}'",
                f"TIMESTAMP '{self.current_time:%Y-%m-%d %H:%M:%S}'")


def schemas(which: str) -> tuple[str, str, str]:
    """(database schema, answer-sheet schema, build schema) of one database in the warehouse."""
    if which not in WHICH:
        raise ValueError(f"which must be one of {WHICH}, got {which!r}")
    return f"ehr_{which}", f"ehr_{which}_answers", f"ehr_{which}_build"
