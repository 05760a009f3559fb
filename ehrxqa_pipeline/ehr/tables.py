"""Staged SELECTs of the 17 MIMIC-IV-derived tables (columns of reference 5.3 + a drop ``reason``).

Scope: rows of the sampled patients (join on ``<build>._offsets``); every time is shifted by the
patient's whole-day offset. Reasons, first match wins: content rules (reference 5.10), then
``no_admission`` (hadm_id null) / ``admission_not_kept`` / ``icu_stay_not_kept`` (the parent row is not in
the database), then the key time: ``after_current_time`` / ``before_start`` (shifted outside
[start, current time]) or ``missing_time``. A secondary time (dischtime of the open admission, ICU or
transfer outtime, prescription stoptime) later than the current time becomes null: the stay or order is
ongoing "now" (reference 5.7).

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

    def key_time(self, expr: str) -> str:
        """CASE branches dropping a row by its (shifted) key time."""
        return (f"WHEN {expr} IS NULL THEN 'missing_time' WHEN {expr} > {self.now} THEN 'after_current_time' "
                f"WHEN {expr} < {self.start} THEN 'before_start'")

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
    return f"""
    SELECT s.subject_id, s.hadm_id, {adm} AS admittime,
           CASE WHEN chosen THEN NULL ELSE {dis} END AS dischtime,
           s.admission_type, s.admission_location, s.discharge_location, s.insurance, s.language,
           s.marital_status, x.age,
           CASE WHEN x.reason IS NOT NULL THEN x.reason {c.key_time(adm)}
                WHEN {dis} > {c.now} AND NOT chosen THEN 'open_at_current_time' END AS reason
    FROM (SELECT x.*, coalesce(o.is_current AND x.hadm_id = cd.latest_hadm, FALSE) AS chosen
          FROM {c.build}._admissions x JOIN {c.build}._candidates cd USING (subject_id)
          JOIN {c.build}._offsets o USING (subject_id)) x
    JOIN ingest.admissions s USING (hadm_id) JOIN {c.build}._offsets o ON o.subject_id = s.subject_id"""


def icustays(c: Ctx) -> str:
    t = shift("e.intime")
    return f"""
    SELECT e.subject_id, e.hadm_id, e.stay_id, e.first_careunit, e.last_careunit, {t} AS intime,
           {c.open_time(shift('e.outtime'))} AS outtime,
           CASE WHEN e.hadm_id IS NULL THEN 'no_admission' WHEN k.hadm_id IS NULL THEN 'admission_not_kept'
                {c.key_time(t)} END AS reason
    FROM {c.scope('icustays')}{c.parents()}"""


def transfers(c: Ctx) -> str:
    t = shift("e.intime")
    return f"""
    SELECT e.subject_id, e.hadm_id, e.transfer_id, e.eventtype, e.careunit, {t} AS intime,
           {c.open_time(shift('e.outtime'))} AS outtime,
           CASE WHEN e.hadm_id IS NULL THEN 'no_admission' WHEN k.hadm_id IS NULL THEN 'admission_not_kept'
                {c.key_time(t)} END AS reason
    FROM {c.scope('transfers')}{c.parents()}"""


def icd_dictionary(table: str) -> str:
    """Source dictionary rows with code (lower-cased), version, title and reason; one kept row per code."""
    return f"""
    SELECT icd_code, icd_version, long_title,
           CASE WHEN icd_code IS NULL OR long_title IS NULL THEN 'missing_value'
                WHEN r > 1 THEN 'icd_version_collision' END AS reason
    FROM (SELECT lower(trim(icd_code)) AS icd_code, icd_version, long_title,
                 row_number() OVER (PARTITION BY lower(trim(icd_code)), icd_code IS NULL OR long_title IS NULL
                                    ORDER BY icd_version DESC) AS r
          FROM ingest.{table})"""


def d_icd(c: Ctx, table: str) -> str:
    """The kept dictionary from ``<build>._<table>`` (written from ``icd_dictionary`` by the build)."""
    return f"SELECT icd_code, long_title, reason FROM {c.build}._{table}"


def d_labitems(c: Ctx) -> str:
    return ("SELECT itemid, label, CASE WHEN itemid IS NULL OR label IS NULL THEN 'missing_value' END AS reason "
            "FROM ingest.d_labitems")


def d_items(c: Ctx) -> str:
    allowed = ", ".join(f"'{x}'" for x in c.config.d_items_linksto)
    return f"""SELECT itemid, label, abbreviation, linksto,
               CASE WHEN itemid IS NULL OR label IS NULL THEN 'missing_value'
                    WHEN coalesce(lower(trim(linksto)) NOT IN ({allowed}), TRUE) THEN 'not_linked_to_selected_tables'
               END AS reason FROM ingest.d_items"""


def _icd_events(c: Ctx, table: str, dictionary: str, charttime: str, extra_reason: str = "") -> str:
    return f"""
    SELECT e.subject_id, e.hadm_id, lower(trim(e.icd_code)) AS icd_code, {charttime} AS charttime,
           CASE WHEN e.icd_code IS NULL THEN 'missing_value'
                WHEN dv.icd_code IS NULL THEN 'code_not_in_dictionary'
                WHEN dv.reason = 'icd_version_collision' THEN 'icd_version_collision'
                WHEN dv.reason IS NOT NULL THEN 'dictionary_row_dropped'
                WHEN e.hadm_id IS NULL THEN 'no_admission' WHEN k.hadm_id IS NULL THEN 'admission_not_kept'
                {extra_reason} {c.key_time(charttime)} END AS reason
    FROM {c.scope(table)}{c.parents()}
    LEFT JOIN {c.build}._{dictionary} dv ON dv.icd_code = lower(trim(e.icd_code)) AND dv.icd_version = e.icd_version"""


def diagnoses_icd(c: Ctx) -> str:
    return _icd_events(c, "diagnoses_icd", "d_icd_diagnoses", "k.admittime")


def procedures_icd(c: Ctx) -> str:
    day = shift("e.chartdate")
    when = f"greatest(k.admittime, least({day}, coalesce(k.dischtime, {c.now})))"
    return _icd_events(c, "procedures_icd", "d_icd_procedures", when,
                       f"WHEN k.dischtime IS NULL AND {day} > {c.now} THEN 'after_current_time'")


def labevents(c: Ctx) -> str:
    t = shift("e.charttime")
    return f"""
    SELECT e.subject_id, e.hadm_id, e.itemid, {t} AS charttime, e.valuenum, e.valueuom,
           CASE WHEN e.hadm_id IS NULL THEN 'no_admission'
                WHEN e.valuenum IS NULL OR e.valueuom IS NULL THEN 'missing_value'
                WHEN d.itemid IS NULL THEN 'item_not_in_dictionary'
                WHEN lower(trim(e.valueuom)) <> u.u THEN 'minority_unit'
                WHEN k.hadm_id IS NULL THEN 'admission_not_kept' {c.key_time(t)} END AS reason
    FROM {c.scope('labevents')}{c.parents()}
    LEFT JOIN {c.schema}.d_labitems d ON d.itemid = e.itemid
    LEFT JOIN ({majority_unit_sql('labevents', 'itemid', 'valueuom')}) u ON u.k = e.itemid"""


NUMERIC_DOSE = r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)$"


def prescriptions(c: Ctx) -> str:
    t = shift("e.starttime")
    dose = "replace(trim(e.dose_val_rx), ',', '')"
    return f"""
    SELECT e.subject_id, e.hadm_id, {t} AS starttime, {c.open_time(shift('e.stoptime'))} AS stoptime, e.drug,
           {dose} AS dose_val_rx, e.dose_unit_rx, e.route,
           CASE WHEN e.hadm_id IS NULL THEN 'no_admission'
                WHEN e.stoptime IS NULL OR e.drug IS NULL OR e.dose_val_rx IS NULL OR e.dose_unit_rx IS NULL
                     OR e.route IS NULL THEN 'missing_value'
                WHEN NOT regexp_matches({dose}, '{NUMERIC_DOSE}') THEN 'non_numeric_dose'
                WHEN lower(trim(e.dose_unit_rx)) <> u.u THEN 'minority_dose_unit'
                WHEN k.hadm_id IS NULL THEN 'admission_not_kept' {c.key_time(t)} END AS reason
    FROM {c.scope('prescriptions')}{c.parents()}
    LEFT JOIN ({majority_unit_sql('prescriptions', 'lower(trim(drug))', 'dose_unit_rx')}) u
           ON u.k = lower(trim(e.drug))"""


def chartevents(c: Ctx) -> str:
    t = shift("e.charttime")
    items = ", ".join(str(i) for i in c.config.chart_itemids)
    return f"""
    SELECT e.subject_id, e.hadm_id, e.stay_id, {t} AS charttime, e.itemid, e.valuenum, e.valueuom,
           CASE WHEN e.itemid NOT IN ({items}) THEN 'not_selected_item'
                WHEN e.hadm_id IS NULL OR e.stay_id IS NULL OR e.valuenum IS NULL OR e.valueuom IS NULL
                     THEN 'missing_value'
                WHEN d.itemid IS NULL THEN 'item_not_in_dictionary'
                WHEN lower(trim(e.valueuom)) <> u.u THEN 'minority_unit'
                WHEN k.hadm_id IS NULL THEN 'admission_not_kept' WHEN st.stay_id IS NULL THEN 'icu_stay_not_kept'
                {c.key_time(t)} END AS reason
    FROM {c.scope('chartevents')}{c.parents(icu=True)}
    LEFT JOIN {c.schema}.d_items d ON d.itemid = e.itemid
    LEFT JOIN ({majority_unit_sql('chartevents', 'itemid', 'valueuom', f'itemid IN ({items})')}) u
           ON u.k = e.itemid"""


def _volume_events(c: Ctx, table: str, time_col: str, value: str, unit: str) -> str:
    t = shift(f"e.{time_col}")
    return f"""
    SELECT e.subject_id, e.hadm_id, e.stay_id, {t} AS {time_col}, e.itemid, e.{value},
           CASE WHEN e.hadm_id IS NULL OR e.stay_id IS NULL OR e.{value} IS NULL OR e.{unit} IS NULL
                     THEN 'missing_value'
                WHEN lower(trim(e.{unit})) <> '{c.config.volume_unit}' THEN 'not_volume_unit'
                WHEN d.itemid IS NULL THEN 'item_not_in_dictionary'
                WHEN k.hadm_id IS NULL THEN 'admission_not_kept' WHEN st.stay_id IS NULL THEN 'icu_stay_not_kept'
                {c.key_time(t)} END AS reason
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
           CASE WHEN e.hadm_id IS NULL THEN 'no_admission' WHEN k.hadm_id IS NULL THEN 'admission_not_kept'
                {c.key_time(t)} END AS reason
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
