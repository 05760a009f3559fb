"""The PhysioNet source layouts, stated once.

Every file the pipeline reads is described here: its dataset and its path inside the dataset's release
folder (``layout`` finds that folder under SOURCE_ROOT), its separator, every
column of the real release in file order, each column's type, and which columns the pipeline requires.
Readers, the source validator, the synthetic generator and the ingestion contracts all read this table,
so the real layout and the synthetic one cannot drift apart.

Types: ``int`` (Int64), ``float`` (Float64), ``str`` (String), ``datetime`` (``YYYY-MM-DD HH:MM:SS``),
``date`` (``YYYY-MM-DD``). Columns not marked required may be absent from a file; the pipeline never
reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .datasets import DATASETS
from .datasets import IMAGENOME as _IMAGENOME
from .datasets import MIMIC_CXR as _MIMIC_CXR
from .datasets import MIMICIV as _MIMICIV

DATETIME_FORMAT = "%Y-%m-%d %H:%M:%S"
DATE_FORMAT = "%Y-%m-%d"

MIMICIV, MIMIC_CXR, IMAGENOME = _MIMICIV.key, _MIMIC_CXR.key, _IMAGENOME.key


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    required: bool = False


@dataclass(frozen=True)
class SourceFile:
    """One file of a PhysioNet release."""

    name: str  # table name used throughout the pipeline (DuckDB table ingest.<name>)
    dataset: str  # the PhysioNet dataset (layout.DATASETS key) whose release folder holds the file
    path: str  # path inside the release folder, without the compression suffix
    columns: tuple[Column, ...]
    key: tuple[str, ...] = ()  # columns that identify a row in the real release
    sep: str = ","
    gzip_ok: bool = True  # readers also accept PATH + ".gz"
    group: str = "mimiciv"  # source group: mimiciv_hosp, mimiciv_icu, mimic_cxr, imagenome
    description: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def release_path(self) -> str:
        """The path under SOURCE_ROOT in the PhysioNet layout of the paper's release (what the generator
        writes, and what messages show when the file is missing)."""
        return release_path(self.dataset, self.path)

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.required)

    @property
    def types(self) -> dict[str, str]:
        return {c.name: c.type for c in self.columns}

    @property
    def header(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


def release_path(dataset: str, rel: str) -> str:
    """``rel`` inside ``dataset``'s release folder of the paper (e.g. ``mimiciv/2.2/hosp/patients.csv``)."""
    return f"{dataset}/{DATASETS[dataset].paper}/{rel}"


def _cols(spec: str) -> tuple[Column, ...]:
    """Parse ``"name:type, name:type*"``; a trailing ``*`` marks a required column."""
    out = []
    for part in spec.split(","):
        name, typ = part.strip().split(":")
        required = typ.endswith("*")
        out.append(Column(name, typ.rstrip("*"), required))
    return tuple(out)


def _hosp(name: str, cols: str, key: tuple[str, ...] = (), description: str = "") -> SourceFile:
    return SourceFile(name, MIMICIV, f"hosp/{name}.csv", _cols(cols), key, group="mimiciv_hosp",
                      description=description)


def _icu(name: str, cols: str, key: tuple[str, ...] = (), description: str = "") -> SourceFile:
    return SourceFile(name, MIMICIV, f"icu/{name}.csv", _cols(cols), key, group="mimiciv_icu",
                      description=description)


MIMICIV_FILES: tuple[SourceFile, ...] = (
    _hosp("patients", "subject_id:int*, gender:str*, anchor_age:int*, anchor_year:int*, "
          "anchor_year_group:str, dod:date*", ("subject_id",), "one row per patient"),
    _hosp("admissions", "subject_id:int*, hadm_id:int*, admittime:datetime*, dischtime:datetime*, "
          "deathtime:datetime, admission_type:str*, admit_provider_id:str, admission_location:str*, "
          "discharge_location:str*, insurance:str*, language:str*, marital_status:str*, race:str, "
          "edregtime:datetime, edouttime:datetime, hospital_expire_flag:int", ("hadm_id",),
          "one row per hospital admission"),
    _hosp("transfers", "subject_id:int*, hadm_id:int*, transfer_id:int*, eventtype:str*, careunit:str*, "
          "intime:datetime*, outtime:datetime*", ("transfer_id",),
          "one row per ward transfer event (admit, transfer, discharge, ED)"),
    _hosp("diagnoses_icd", "subject_id:int*, hadm_id:int*, seq_num:int, icd_code:str*, icd_version:int",
          ("hadm_id", "seq_num"), "one row per billed diagnosis of an admission"),
    _hosp("procedures_icd", "subject_id:int*, hadm_id:int*, seq_num:int, chartdate:date*, icd_code:str*, "
          "icd_version:int", ("hadm_id", "seq_num"), "one row per billed procedure of an admission"),
    _hosp("d_icd_diagnoses", "icd_code:str*, icd_version:int, long_title:str*", ("icd_code", "icd_version"),
          "ICD-9/ICD-10 diagnosis dictionary"),
    _hosp("d_icd_procedures", "icd_code:str*, icd_version:int, long_title:str*", ("icd_code", "icd_version"),
          "ICD-9/ICD-10 procedure dictionary"),
    _hosp("labevents", "labevent_id:int, subject_id:int*, hadm_id:int*, specimen_id:int, itemid:int*, "
          "order_provider_id:str, charttime:datetime*, storetime:datetime, value:str, valuenum:float*, "
          "valueuom:str*, ref_range_lower:float, ref_range_upper:float, flag:str, priority:str, comments:str",
          ("labevent_id",), "one row per laboratory measurement"),
    _hosp("d_labitems", "itemid:int*, label:str*, fluid:str, category:str", ("itemid",),
          "laboratory item dictionary"),
    _hosp("prescriptions", "subject_id:int*, hadm_id:int*, pharmacy_id:int, poe_id:str, poe_seq:int, "
          "order_provider_id:str, starttime:datetime*, stoptime:datetime*, drug_type:str, drug:str*, "
          "formulary_drug_cd:str, gsn:str, ndc:str, prod_strength:str, form_rx:str, dose_val_rx:str*, "
          "dose_unit_rx:str*, form_val_disp:str, form_unit_disp:str, doses_per_24_hrs:float, route:str*",
          ("pharmacy_id", "drug"), "one row per prescribed drug order"),
    _hosp("microbiologyevents", "microevent_id:int, subject_id:int*, hadm_id:int*, micro_specimen_id:int, "
          "order_provider_id:str, chartdate:datetime*, charttime:datetime*, spec_itemid:int, "
          "spec_type_desc:str*, test_seq:int, storedate:datetime, storetime:datetime, test_itemid:int, "
          "test_name:str*, org_itemid:int, org_name:str*, isolate_num:int, quantity:str, ab_itemid:int, "
          "ab_name:str, dilution_text:str, dilution_comparison:str, dilution_value:float, "
          "interpretation:str, comments:str", ("microevent_id",),
          "one row per microbiology test result (organism x antibiotic)"),
    _icu("icustays", "subject_id:int*, hadm_id:int*, stay_id:int*, first_careunit:str*, last_careunit:str*, "
         "intime:datetime*, outtime:datetime*, los:float", ("stay_id",), "one row per ICU stay"),
    _icu("chartevents", "subject_id:int*, hadm_id:int*, stay_id:int*, caregiver_id:int, charttime:datetime*, "
         "storetime:datetime, itemid:int*, value:str, valuenum:float*, valueuom:str*, warning:int",
         ("stay_id", "charttime", "itemid"), "one row per charted ICU observation"),
    _icu("inputevents", "subject_id:int*, hadm_id:int*, stay_id:int*, caregiver_id:int, starttime:datetime*, "
         "endtime:datetime, storetime:datetime, itemid:int*, amount:float*, amountuom:str*, rate:float, "
         "rateuom:str, orderid:int, linkorderid:int, ordercategoryname:str, "
         "secondaryordercategoryname:str, ordercomponenttypedescription:str, ordercategorydescription:str, "
         "patientweight:float, totalamount:float, totalamountuom:str, isopenbag:int, "
         "continueinnextdept:int, statusdescription:str, originalamount:float, originalrate:float",
         ("orderid", "itemid"), "one row per ICU input (drug or fluid) event"),
    _icu("outputevents", "subject_id:int*, hadm_id:int*, stay_id:int*, caregiver_id:int, charttime:datetime*, "
         "storetime:datetime, itemid:int*, value:float*, valueuom:str*", ("stay_id", "charttime", "itemid"),
         "one row per ICU output (urine, drain) measurement"),
    _icu("d_items", "itemid:int*, label:str*, abbreviation:str*, linksto:str*, category:str, unitname:str, "
         "param_type:str, lownormalvalue:float, highnormalvalue:float", ("itemid",),
         "ICU item dictionary"),
)

CXR_METADATA = SourceFile(
    "cxr_metadata", MIMIC_CXR, "mimic-cxr-2.0.0-metadata.csv",
    _cols("dicom_id:str*, subject_id:int*, study_id:int*, PerformedProcedureStepDescription:str, "
          "ViewPosition:str*, Rows:int*, Columns:int*, StudyDate:int*, StudyTime:float*, "
          "ProcedureCodeSequence_CodeMeaning:str, ViewCodeSequence_CodeMeaning:str, "
          "PatientOrientationCodeSequence_CodeMeaning:str"),
    ("dicom_id",), group="mimic_cxr", description="one row per chest X-ray image (DICOM)",
)

IMAGENOME_FILES: tuple[SourceFile, ...] = (
    SourceFile(
        "silver_bbox", IMAGENOME, "silver_dataset/scene_tabular/bbox_objects_tabular.txt",
        _cols("object_id:str*, x1:float*, y1:float*, x2:float*, y2:float*, width:float*, height:float*, "
              "bbox_name:str*, synsets:str, name:str, original_x1:float, original_y1:float, "
              "original_x2:float, original_y2:float, original_width:float, original_height:float"),
        ("object_id",), sep="\t", gzip_ok=False, group="imagenome",
        description="one row per image x detected anatomical box (224x224 space)"),
    SourceFile(
        "silver_relations", IMAGENOME, "silver_dataset/scene_tabular/attribute_relations_tabular.txt",
        _cols("study_id:int*, image_id:str*, row_id:str*, sent_loc:float*, bbox:str*, relation:int*, "
              "label_name:str*, categoryID:str*, context:str"),
        (), sep="\t", gzip_ok=False, group="imagenome",
        description="one row per report sentence x object x attribute mention (silver, NLP-derived)"),
    SourceFile(
        "gold_relations", IMAGENOME, "gold_dataset/gold_attributes_relations_500pts_500studies1st.txt",
        _cols("patient_id:int*, study_id:int*, image_id:str*, row_id:str*, sent_loc:float, bbox:str*, "
              "relation:int*, label_name:str*, categoryID:str*, annot_id:str"),
        (), sep="\t", gzip_ok=False, group="imagenome",
        description="one row per sentence x object x attribute of the radiologist-checked gold reports"),
    SourceFile(
        "gold_bbox", IMAGENOME, "gold_dataset/gold_bbox_coordinate_annotations_1000images.csv",
        _cols("image_id:str*, x1:float, y1:float, x2:float, y2:float, width:float, height:float, "
              "bbox_name:str*, annot_id:str, original_x1:float, original_x2:float, original_y1:float, "
              "original_y2:float, original_width:float, original_height:float, annotator:str, "
              "coord224:str*, coord_original:str"),
        ("image_id", "bbox_name"), gzip_ok=False, group="imagenome",
        description="one row per gold image x manually corrected box"),
)

# Semantics files are not tables; they are parsed by ehrxqa_pipeline.sources.semantics. Paths inside the
# Chest ImaGenome release folder.
SEMANTICS_OBJECTS = "semantics/objects_extracted_from_reports_v1.txt"
SEMANTICS_ATTRIBUTES = "semantics/attribute_relations_v1.txt"
SEMANTICS_UMLS = "semantics/label_to_UMLS_mapping.json"
SEMANTICS_FILES = (SEMANTICS_OBJECTS, SEMANTICS_ATTRIBUTES, SEMANTICS_UMLS)

CXR_FILES_DIR = "files"  # the JPEG tree, inside the MIMIC-CXR-JPG release folder

TABLES: dict[str, SourceFile] = {f.name: f for f in (*MIMICIV_FILES, CXR_METADATA, *IMAGENOME_FILES)}

def files_in(dataset: str) -> int:
    """How many source files (tables and semantics files) the pipeline reads from ``dataset``."""
    return sum(sf.dataset == dataset for sf in TABLES.values()) + (len(SEMANTICS_FILES) if dataset == IMAGENOME else 0)


# Name of the manifest the synthetic generator writes at the source root. The pipeline never reads it;
# tests compare pipeline outputs against the counts it records.
DEMO_MANIFEST = "ehrxqa-demo-manifest.json"


def image_relpath(subject_id: int, study_id: int, dicom_id: str) -> str:
    """Path of an image below ``files/``: ``p10/p10000032/s50414267/<dicom_id>.jpg``."""
    s = str(subject_id)
    return f"p{s[:2]}/p{s}/s{study_id}/{dicom_id}.jpg"


def image_relpath_sql(subject: str = "subject_id", study: str = "study_id", image: str = "dicom_id") -> str:
    """``image_relpath`` as a SQL expression over the given columns (DuckDB)."""
    return (f"'p' || substr({subject}::VARCHAR, 1, 2) || '/p' || {subject} || '/s' || {study} || '/' "
            f"|| {image} || '.jpg'")
