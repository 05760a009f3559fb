"""Staged SELECTs of the 17 MIMIC-IV-derived tables (columns of reference 5.3 + a drop ``reason``).

Scope: rows of the sampled patients (join on ``<build>._offsets``); every time is shifted by the
patient's whole-day offset. Reasons (``filters.Rule``, each with its why), first match wins: content
rules (reference 5.10), then ``no_admission`` (hadm_id null) / ``admission_not_kept`` /
``icu_stay_not_kept`` (the parent row is not in the database), then the key time: ``after_current_time``
/ ``before_start`` (shifted outside [start, current time]) or ``missing_time``. A secondary time
(dischtime of the open admission, ICU or transfer outtime, prescription stoptime) later than the current
time becomes null: the stay or order is ongoing "now" (reference 5.7).

Rules (reference 5.10 with defects 19 and 22 addressed):
* patients: the drawn patients; the candidates (patients with an image in the set) that could not be drawn
  are rows of ``patients_rejected`` with their reason: ``not_in_mimiciv`` (withheld from MIMIC-IV: no
  ``patients`` row; MIMIC-IV 2.2 withholds about 5 % of the MIMIC-CXR patients) or ``no_eligible_admission``.
* admissions: the cohort rules (``<build>._admissions``), then the time frame; an admission still open at
  the current time is dropped (``open_at_current_time``) unless it is the chosen admission of a current
  patient, whose dischtime becomes null -- so "current patient" means exactly the drawn ones (defect 15).
* d_icd_*: one row per code; a code present in ICD-9 and ICD-10 keeps the ICD-10 title and the ICD-9 rows
  are dropped (``icd_version_collision``, the published build ignores the version); codes sharing a title
  are all kept (the published de-duplication on long_title drops codes).
* diagnoses_icd / procedures_icd: joined to the dictionary on (code, version); charttime = the admission's
  admittime / the chartdate clamped into [admittime, dischtime] (a procedure dated after the current time
  in an open admission is dropped).
* labevents / chartevents: the item's most frequent unit only (over the whole source table; ties:
  alphabetical), the paper's "most common unit" rule (``minority_unit``); chartevents keeps the nine
  template items (``not_selected_item``).
* prescriptions: numeric doses including decimals (commas removed; ranges such as "5-10" dropped as
  ``non_numeric_dose``; the published rule also drops "0.5"); the drug's most frequent dose unit.
* inputevents / outputevents: volumes in ml only (``not_volume_unit``): the tables carry no unit column, so
  amounts must share one unit to be summed (kept as published, documented rather than "fixed").
* microbiologyevents: charttime falls back to chartdate.
"""

from __future__ import annotations

from dataclasses import dataclass

from ehrxqa_pipeline.ehr.config import DbConfig
from ehrxqa_pipeline.ehr.timeshift import shift
from ehrxqa_pipeline.filters import Rule, reason_sql


@dataclass(frozen=True)
class Ctx:
    schema: str  # the database being written (parents are read from here)
    build: str
    config: DbConfig

    @property
    def start(self) -> str:
        return self.config.sql_bounds()[0]

    @property
    def now(self) -> str:
        return self.config.sql_bounds()[1]

    def key_time(self, expr: str) -> tuple[Rule, ...]:
        """The rules dropping a row by its (shifted) key time."""
        return (Rule("missing_time", f"{expr} IS NULL", "a row without its key time cannot be placed in time"),
                Rule("after_current_time", f"{expr} > {self.now}", "nothing has happened after the current time"),
                Rule("before_start", f"{expr} < {self.start}", "the database starts at the time frame's start"))

    def open_time(self, expr: str) -> str:
        """A secondary time: null when after the current time (ongoing) or before the start."""
        return f"CASE WHEN {expr} BETWEEN {self.start} AND {self.now} THEN {expr} END"

    def scope(self, table: str, alias: str = "e") -> str:
        return f"ingest.{table} {alias} JOIN {self.build}._offsets o ON o.subject_id = {alias}.subject_id"

    def parents(self, alias: str = "e", icu: bool = False) -> str:
        out = f" LEFT JOIN {self.schema}.admissions k ON k.hadm_id = {alias}.hadm_id"
        if icu:
            out += f" LEFT JOIN {self.schema}.icustays st ON st.stay_id = {alias}.stay_id"
        return out


def missing(*columns: str) -> Rule:
    """Dropped when one of ``columns`` is null."""
    return Rule("missing_value", " OR ".join(f"{c} IS NULL" for c in columns),
                "a value the table needs is missing; it is dropped, not guessed")


# e: the source row; k, st: its admission and ICU stay in the database being written; d: its dictionary row
NO_ADMISSION = Rule("no_admission", "e.hadm_id IS NULL", "an event outside an admission belongs to no hospital stay")
ADMISSION_NOT_KEPT = Rule("admission_not_kept", "k.hadm_id IS NULL", "its admission is not in the database")
ICU_STAY_NOT_KEPT = Rule("icu_stay_not_kept", "st.stay_id IS NULL", "its ICU stay is not in the database")
ITEM_NOT_IN_DICTIONARY = Rule("item_not_in_dictionary", "d.itemid IS NULL",
                              "an item the dictionary table lacks has no name to ask about")
MINORITY_UNIT = Rule("minority_unit", "lower(trim(e.valueuom)) <> u.u",
                     "the paper's most-common-unit rule: one item's values must be comparable")


def majority_unit_sql(table: str, key: str, unit: str, where: str = "TRUE") -> str:
    """Per key, its most frequent lower-cased unit over the whole source table (ties: alphabetical)."""
    return f"""
        SELECT k, u FROM (
            SELECT {key} AS k, lower(trim({unit})) AS u,
                   row_number() OVER (PARTITION BY {key} ORDER BY count(*) DESC, lower(trim({unit}))) AS r
            FROM ingest.{table} WHERE {unit} IS NOT NULL AND {where} GROUP BY 1, 2)
        WHERE r = 1"""


def patients(c: Ctx) -> str:
    # the sampled patients, and the candidates set aside before the draw with their reason (``_candidates``):
    # ``patients_rejected`` names every patient with an image in the set who is not in the database
    return f"""SELECT o.subject_id, p.gender, o.dob, o.dod, NULL AS reason
               FROM {c.build}._offsets o JOIN ingest.patients p USING (subject_id)
               UNION ALL
               SELECT cd.subject_id, p.gender, NULL, NULL, cd.reason
               FROM {c.build}._candidates cd LEFT JOIN ingest.patients p USING (subject_id)
               WHERE cd.reason IS NOT NULL"""


def admissions(c: Ctx) -> str:
    adm, dis = shift("s.admittime"), shift("s.dischtime")
    open_now = Rule("open_at_current_time", f"{dis} > {c.now} AND NOT chosen",
                    "only a current patient's chosen admission may be open at the current time")
    return f"""
    SELECT s.subject_id, s.hadm_id, {adm} AS admittime,
           CASE WHEN chosen THEN NULL ELSE {dis} END AS dischtime,
           s.admission_type, s.admission_location, s.discharge_location, s.insurance, s.language,
           s.marital_status, x.age,
           coalesce(x.reason, {reason_sql([*c.key_time(adm), open_now])}) AS reason
    FROM (SELECT x.*, coalesce(o.is_current AND x.hadm_id = cd.latest_hadm, FALSE) AS chosen
          FROM {c.build}._admissions x JOIN {c.build}._candidates cd USING (subject_id)
          JOIN {c.build}._offsets o USING (subject_id)) x
    JOIN ingest.admissions s USING (hadm_id) JOIN {c.build}._offsets o ON o.subject_id = s.subject_id"""


def icustays(c: Ctx) -> str:
    t = shift("e.intime")
    return f"""
    SELECT e.subject_id, e.hadm_id, e.stay_id, e.first_careunit, e.last_careunit, {t} AS intime,
           {c.open_time(shift('e.outtime'))} AS outtime,
           {reason_sql([NO_ADMISSION, ADMISSION_NOT_KEPT, *c.key_time(t)])} AS reason
    FROM {c.scope('icustays')}{c.parents()}"""


def transfers(c: Ctx) -> str:
    t = shift("e.intime")
    return f"""
    SELECT e.subject_id, e.hadm_id, e.transfer_id, e.eventtype, e.careunit, {t} AS intime,
           {c.open_time(shift('e.outtime'))} AS outtime,
           {reason_sql([NO_ADMISSION, ADMISSION_NOT_KEPT, *c.key_time(t)])} AS reason
    FROM {c.scope('transfers')}{c.parents()}"""


VERSION_COLLISION = Rule("icd_version_collision", "r > 1", "one row per code: the newest ICD version's title")


def icd_dictionary(table: str) -> str:
    """Source dictionary rows with code (lower-cased), version, title and reason; one kept row per code: the
    newest version's, and of two spellings of one code in one version ("A01", "a01 ") the first by code and
    title, so that the kept title does not depend on the order DuckDB's threads deliver the rows."""
    return f"""
    SELECT icd_code, icd_version, long_title,
           {reason_sql([missing("icd_code", "long_title"), VERSION_COLLISION])} AS reason
    FROM (SELECT lower(trim(icd_code)) AS icd_code, icd_version, long_title,
                 row_number() OVER (PARTITION BY lower(trim(icd_code)), icd_code IS NULL OR long_title IS NULL
                                    ORDER BY icd_version DESC, icd_code, long_title) AS r
          FROM ingest.{table})"""


def d_icd(c: Ctx, table: str) -> str:
    """The kept dictionary from ``<build>._<table>`` (written from ``icd_dictionary`` by the build)."""
    return f"SELECT icd_code, long_title, reason FROM {c.build}._{table}"


def d_labitems(c: Ctx) -> str:
    return f"SELECT itemid, label, {reason_sql([missing('itemid', 'label')])} AS reason FROM ingest.d_labitems"


def d_items(c: Ctx) -> str:
    allowed = ", ".join(f"'{x}'" for x in c.config.d_items_linksto)
    linked = Rule("not_linked_to_selected_tables", f"coalesce(lower(trim(linksto)) NOT IN ({allowed}), TRUE)",
                  "the dictionary keeps the items of the event tables the database has")
    return f"""SELECT itemid, label, abbreviation, linksto,
               {reason_sql([missing('itemid', 'label'), linked])} AS reason FROM ingest.d_items"""


def _icd_events(c: Ctx, table: str, dictionary: str, charttime: str, extra: tuple[Rule, ...] = ()) -> str:
    """dv: the code's dictionary row, kept or dropped (``<build>._<dictionary>``)."""
    rules = [missing("e.icd_code"),
             Rule("code_not_in_dictionary", "dv.icd_code IS NULL", "a code without a title cannot be asked about"),
             Rule("icd_version_collision", "dv.reason = 'icd_version_collision'",
                  "the code's title is the other ICD version's: its rows would be mislabelled"),
             Rule("dictionary_row_dropped", "dv.reason IS NOT NULL", "its dictionary row is not in the database"),
             NO_ADMISSION, ADMISSION_NOT_KEPT, *extra, *c.key_time(charttime)]
    return f"""
    SELECT e.subject_id, e.hadm_id, lower(trim(e.icd_code)) AS icd_code, {charttime} AS charttime,
           {reason_sql(rules)} AS reason
    FROM {c.scope(table)}{c.parents()}
    LEFT JOIN {c.build}._{dictionary} dv ON dv.icd_code = lower(trim(e.icd_code)) AND dv.icd_version = e.icd_version"""


def diagnoses_icd(c: Ctx) -> str:
    return _icd_events(c, "diagnoses_icd", "d_icd_diagnoses", "k.admittime")


def procedures_icd(c: Ctx) -> str:
    day = shift("e.chartdate")
    when = f"greatest(k.admittime, least({day}, coalesce(k.dischtime, {c.now})))"
    ongoing = Rule("after_current_time", f"k.dischtime IS NULL AND {day} > {c.now}",
                   "a procedure of an open admission dated after the current time has not happened yet")
    return _icd_events(c, "procedures_icd", "d_icd_procedures", when, (ongoing,))


def labevents(c: Ctx) -> str:
    t = shift("e.charttime")
    return f"""
    SELECT e.subject_id, e.hadm_id, e.itemid, {t} AS charttime, e.valuenum, e.valueuom,
           {reason_sql([NO_ADMISSION, missing("e.valuenum", "e.valueuom"), ITEM_NOT_IN_DICTIONARY, MINORITY_UNIT,
                        ADMISSION_NOT_KEPT, *c.key_time(t)])} AS reason
    FROM {c.scope('labevents')}{c.parents()}
    LEFT JOIN {c.schema}.d_labitems d ON d.itemid = e.itemid
    LEFT JOIN ({majority_unit_sql('labevents', 'itemid', 'valueuom')}) u ON u.k = e.itemid"""


NUMERIC_DOSE = r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)$"


def prescriptions(c: Ctx) -> str:
    t = shift("e.starttime")
    dose = "replace(trim(e.dose_val_rx), ',', '')"
    rules = [NO_ADMISSION, missing("e.stoptime", "e.drug", "e.dose_val_rx", "e.dose_unit_rx", "e.route"),
             Rule("non_numeric_dose", f"NOT regexp_matches({dose}, '{NUMERIC_DOSE}')",
                  "a dose must be a number to be compared or summed (a range is not)"),
             Rule("minority_dose_unit", "lower(trim(e.dose_unit_rx)) <> u.u",
                  "one drug's doses must share a unit to be compared"),
             ADMISSION_NOT_KEPT, *c.key_time(t)]
    return f"""
    SELECT e.subject_id, e.hadm_id, {t} AS starttime, {c.open_time(shift('e.stoptime'))} AS stoptime, e.drug,
           {dose} AS dose_val_rx, e.dose_unit_rx, e.route,
           {reason_sql(rules)} AS reason
    FROM {c.scope('prescriptions')}{c.parents()}
    LEFT JOIN ({majority_unit_sql('prescriptions', 'lower(trim(drug))', 'dose_unit_rx')}) u
           ON u.k = lower(trim(e.drug))"""


def chartevents(c: Ctx) -> str:
    t = shift("e.charttime")
    items = ", ".join(str(i) for i in c.config.chart_itemids)
    rules = [Rule("not_selected_item", f"e.itemid NOT IN ({items})", "the database keeps the template items only"),
             missing("e.hadm_id", "e.stay_id", "e.valuenum", "e.valueuom"), ITEM_NOT_IN_DICTIONARY,
             MINORITY_UNIT, ADMISSION_NOT_KEPT, ICU_STAY_NOT_KEPT, *c.key_time(t)]
    return f"""
    SELECT e.subject_id, e.hadm_id, e.stay_id, {t} AS charttime, e.itemid, e.valuenum, e.valueuom,
           {reason_sql(rules)} AS reason
    FROM {c.scope('chartevents')}{c.parents(icu=True)}
    LEFT JOIN {c.schema}.d_items d ON d.itemid = e.itemid
    LEFT JOIN ({majority_unit_sql('chartevents', 'itemid', 'valueuom', f'itemid IN ({items})')}) u
           ON u.k = e.itemid"""


def _volume_events(c: Ctx, table: str, time_col: str, value: str, unit: str) -> str:
    t = shift(f"e.{time_col}")
    rules = [missing("e.hadm_id", "e.stay_id", f"e.{value}", f"e.{unit}"),
             Rule("not_volume_unit", f"lower(trim(e.{unit})) <> '{c.config.volume_unit}'",
                  "the table has no unit column, so its amounts must share one to be summed"),
             ITEM_NOT_IN_DICTIONARY, ADMISSION_NOT_KEPT, ICU_STAY_NOT_KEPT, *c.key_time(t)]
    return f"""
    SELECT e.subject_id, e.hadm_id, e.stay_id, {t} AS {time_col}, e.itemid, e.{value},
           {reason_sql(rules)} AS reason
    FROM {c.scope(table)}{c.parents(icu=True)}
    LEFT JOIN {c.schema}.d_items d ON d.itemid = e.itemid"""


def inputevents(c: Ctx) -> str:
    return _volume_events(c, "inputevents", "starttime", "amount", "amountuom")


def outputevents(c: Ctx) -> str:
    return _volume_events(c, "outputevents", "charttime", "value", "valueuom")


def microbiologyevents(c: Ctx) -> str:
    t = shift("coalesce(e.charttime, e.chartdate)")
    return f"""
    SELECT e.subject_id, e.hadm_id, {t} AS charttime, e.spec_type_desc, e.test_name, e.org_name,
           {reason_sql([NO_ADMISSION, ADMISSION_NOT_KEPT, *c.key_time(t)])} AS reason
    FROM {c.scope('microbiologyevents')}{c.parents()}"""


# Build order (parents first) and the row order that row_id follows.
ORDER = {
    "patients": ("subject_id",),
    "admissions": ("subject_id", "admittime", "hadm_id"),
    "d_icd_diagnoses": ("icd_code",),
    "d_icd_procedures": ("icd_code",),
    "d_labitems": ("itemid",),
    "d_items": ("itemid",),
    "icustays": ("subject_id", "intime", "stay_id"),
    "transfers": ("subject_id", "intime", "transfer_id"),
    "diagnoses_icd": ("subject_id", "hadm_id", "icd_code"),
    "procedures_icd": ("subject_id", "hadm_id", "charttime", "icd_code"),
    "labevents": ("subject_id", "charttime", "itemid"),
    "prescriptions": ("subject_id", "starttime", "drug"),
    "chartevents": ("subject_id", "charttime", "itemid"),
    "inputevents": ("subject_id", "starttime", "itemid"),
    "outputevents": ("subject_id", "charttime", "itemid"),
    "microbiologyevents": ("subject_id", "charttime"),
    "cost": ("subject_id", "chargetime", "event_type", "event_id"),
    "tb_cxr": ("subject_id", "studydatetime", "study_id"),
    "tb_cxr_plus": ("subject_id", "studydatetime", "study_id", "object", "attribute"),
}
BUILDERS = {
    "patients": patients, "admissions": admissions, "d_labitems": d_labitems, "d_items": d_items,
    "icustays": icustays, "transfers": transfers, "diagnoses_icd": diagnoses_icd,
    "procedures_icd": procedures_icd, "labevents": labevents, "prescriptions": prescriptions,
    "chartevents": chartevents, "inputevents": inputevents, "outputevents": outputevents,
    "microbiologyevents": microbiologyevents,
}
