"""Vocabularies of the synthetic MIMIC-IV hosp module: admissions, transfers, laboratory items.

Values are spelled exactly as in MIMIC-IV 2.2 (upper-case admission vocabularies, ``EW EMER.``, ``?`` for an
unknown language, careunit names with their abbreviations) so that every filter, lower-casing and
de-duplication step of the database build meets the strings it meets on the real data. Weights are rough
shares of the real release.
"""

from __future__ import annotations

# ---- admissions -------------------------------------------------------------------------------------
# admission types of admissions that come through the emergency department, and of the others
ADMISSION_TYPES_ED = {"EW EMER.": 50, "EU OBSERVATION": 28, "OBSERVATION ADMIT": 14, "URGENT": 8}
ADMISSION_TYPES_DIRECT = {"SURGICAL SAME DAY ADMISSION": 30, "ELECTIVE": 16, "DIRECT EMER.": 14,
                          "DIRECT OBSERVATION": 14, "URGENT": 20, "AMBULATORY OBSERVATION": 6}
ADMISSION_LOCATIONS_ED = {"EMERGENCY ROOM": 88, "WALK-IN/SELF REFERRAL": 6, "TRANSFER FROM HOSPITAL": 4,
                          "INFORMATION NOT AVAILABLE": 2}
ADMISSION_LOCATIONS_DIRECT = {"PHYSICIAN REFERRAL": 45, "TRANSFER FROM HOSPITAL": 22, "CLINIC REFERRAL": 10,
                              "PROCEDURE SITE": 8, "TRANSFER FROM SKILLED NURSING FACILITY": 5, "PACU": 5,
                              "AMBULATORY SURGERY TRANSFER": 3, "INTERNAL TRANSFER TO OR FROM PSYCH": 2}
# None = null discharge_location, frequent in MIMIC-IV for short stays; DIED is set only for deaths
DISCHARGE_LOCATIONS = {"HOME": 36, "HOME HEALTH CARE": 22, "SKILLED NURSING FACILITY": 13, "REHAB": 4,
                       "CHRONIC/LONG TERM ACUTE CARE": 2, "HOSPICE": 1.2, "AGAINST ADVICE": 1,
                       "ACUTE HOSPITAL": 1, "PSYCH FACILITY": 0.6, "OTHER FACILITY": 0.5,
                       "ASSISTED LIVING": 0.5, "HEALTHCARE FACILITY": 0.2, None: 16}
INSURANCE_65_PLUS = {"Medicare": 76, "Other": 20, "Medicaid": 4}
INSURANCE_UNDER_65 = {"Other": 55, "Medicaid": 30, "Medicare": 15}
LANGUAGES = {"ENGLISH": 90, "?": 10}
MARITAL_STATUSES = {"MARRIED": 42, "SINGLE": 32, "WIDOWED": 12, "DIVORCED": 8, None: 6}
RACES = {"WHITE": 60, "BLACK/AFRICAN AMERICAN": 13, "UNKNOWN": 5, "OTHER": 4, "WHITE - OTHER EUROPEAN": 2,
         "HISPANIC/LATINO - PUERTO RICAN": 2, "HISPANIC OR LATINO": 2, "ASIAN": 1.5, "ASIAN - CHINESE": 1.5,
         "WHITE - RUSSIAN": 1, "BLACK/CAPE VERDEAN": 1, "BLACK/CARIBBEAN ISLAND": 1,
         "HISPANIC/LATINO - DOMINICAN": 1, "UNABLE TO OBTAIN": 1, "PATIENT DECLINED TO ANSWER": 1,
         "WHITE - BRAZILIAN": 0.5, "ASIAN - SOUTH EAST ASIAN": 0.5, "PORTUGUESE": 0.5,
         "AMERICAN INDIAN/ALASKA NATIVE": 0.3, "NATIVE HAWAIIAN OR OTHER PACIFIC ISLANDER": 0.2,
         "MULTIPLE RACE/ETHNICITY": 0.3, "SOUTH AMERICAN": 0.2}

# ---- transfers --------------------------------------------------------------------------------------
ED_UNIT = "Emergency Department"
WARD_UNITS = {"Medicine": 28, "Med/Surg": 14, "Cardiology": 9, "Medicine/Cardiology": 6, "Neurology": 5,
              "Hematology/Oncology": 5, "Observation": 7, "PACU": 5, "Surgery/Trauma": 4, "Cardiac Surgery": 4,
              "Vascular": 3, "Transplant": 3, "Med/Surg/GYN": 2, "Thoracic Surgery": 2,
              "Emergency Department Observation": 3}
ICU_UNITS = {"Medical Intensive Care Unit (MICU)": 30, "Cardiac Vascular Intensive Care Unit (CVICU)": 17,
             "Medical/Surgical Intensive Care Unit (MICU/SICU)": 15, "Surgical Intensive Care Unit (SICU)": 12,
             "Coronary Care Unit (CCU)": 12, "Trauma SICU (TSICU)": 9,
             "Neuro Surgical Intensive Care Unit (Neuro SICU)": 5}

# ---- laboratory -------------------------------------------------------------------------------------
# itemid, label, fluid, category, unit, mean, sd, decimals, ref low, ref high.  unit None: MIMIC stores no
# unit for the item (INR, specific gravity); mean None: a text-valued item (valuenum always null).
LAB_ITEMS = [
    (50912, "Creatinine", "Blood", "Chemistry", "mg/dL", 1.3, 0.9, 1, 0.5, 1.2),
    (50931, "Glucose", "Blood", "Chemistry", "mg/dL", 128, 45, 0, 70, 100),
    (50983, "Sodium", "Blood", "Chemistry", "mEq/L", 138, 4.5, 0, 133, 145),
    (50971, "Potassium", "Blood", "Chemistry", "mEq/L", 4.2, 0.6, 1, 3.3, 5.1),
    (50882, "Bicarbonate", "Blood", "Chemistry", "mEq/L", 25, 4, 0, 22, 32),
    (50902, "Chloride", "Blood", "Chemistry", "mEq/L", 102, 5, 0, 96, 108),
    (51006, "Urea Nitrogen", "Blood", "Chemistry", "mg/dL", 24, 15, 0, 6, 20),
    (50868, "Anion Gap", "Blood", "Chemistry", "mEq/L", 14, 3.5, 0, 8, 20),
    (50893, "Calcium, Total", "Blood", "Chemistry", "mg/dL", 8.8, 0.7, 1, 8.4, 10.3),
    (50960, "Magnesium", "Blood", "Chemistry", "mg/dL", 2.0, 0.3, 1, 1.6, 2.6),
    (50970, "Phosphate", "Blood", "Chemistry", "mg/dL", 3.5, 1.0, 1, 2.7, 4.5),
    (51221, "Hematocrit", "Blood", "Hematology", "%", 33, 6, 1, 36, 48),
    (51222, "Hemoglobin", "Blood", "Hematology", "g/dL", 10.8, 2.1, 1, 12, 16),
    (51301, "White Blood Cells", "Blood", "Hematology", "K/uL", 9.5, 4.5, 1, 4.0, 11.0),
    (51265, "Platelet Count", "Blood", "Hematology", "K/uL", 230, 95, 0, 150, 440),
    (51248, "MCH", "Blood", "Hematology", "pg", 30, 2.5, 1, 27, 32),
    (51249, "MCHC", "Blood", "Hematology", "%", 33, 1.5, 1, 31, 35),
    (51250, "MCV", "Blood", "Hematology", "fL", 91, 7, 0, 82, 98),
    (51279, "Red Blood Cells", "Blood", "Hematology", "m/uL", 3.6, 0.7, 2, 4.2, 5.4),
    (51277, "RDW", "Blood", "Hematology", "%", 15, 2, 1, 10.5, 15.5),
    (51256, "Neutrophils", "Blood", "Hematology", "%", 72, 12, 1, 50, 70),
    (51244, "Lymphocytes", "Blood", "Hematology", "%", 16, 9, 1, 18, 42),
    (51254, "Monocytes", "Blood", "Hematology", "%", 7, 3, 1, 2, 11),
    (51200, "Eosinophils", "Blood", "Hematology", "%", 1.5, 1.5, 1, 0, 4),
    (51146, "Basophils", "Blood", "Hematology", "%", 0.3, 0.3, 1, 0, 1),
    (51237, "INR(PT)", "Blood", "Hematology", None, 1.4, 0.5, 1, 0.9, 1.1),
    (51274, "PT", "Blood", "Hematology", "sec", 15, 5, 1, 9.4, 12.5),
    (51275, "PTT", "Blood", "Hematology", "sec", 35, 12, 1, 25, 36.5),
    (50861, "Alanine Aminotransferase (ALT)", "Blood", "Chemistry", "IU/L", 40, 45, 0, 0, 40),
    (50878, "Asparate Aminotransferase (AST)", "Blood", "Chemistry", "IU/L", 48, 50, 0, 0, 40),
    (50863, "Alkaline Phosphatase", "Blood", "Chemistry", "IU/L", 105, 60, 0, 35, 105),
    (50885, "Bilirubin, Total", "Blood", "Chemistry", "mg/dL", 1.1, 1.2, 1, 0, 1.5),
    (50862, "Albumin", "Blood", "Chemistry", "g/dL", 3.4, 0.6, 1, 3.5, 5.2),
    (50954, "Lactate Dehydrogenase (LD)", "Blood", "Chemistry", "IU/L", 260, 120, 0, 94, 250),
    (50910, "Creatine Kinase (CK)", "Blood", "Chemistry", "IU/L", 210, 300, 0, 47, 322),
    (51003, "Troponin T", "Blood", "Chemistry", "ng/mL", 0.08, 0.2, 2, 0, 0.01),
    (50963, "NTproBNP", "Blood", "Chemistry", "pg/mL", 3500, 5000, 0, 0, 353),
    (50889, "C-Reactive Protein", "Blood", "Chemistry", "mg/L", 60, 70, 1, 0, 5),
    (51009, "Vancomycin", "Blood", "Chemistry", "ug/mL", 17, 7, 1, 10, 20),
    (50820, "pH", "Blood", "Blood Gas", "units", 7.38, 0.07, 2, 7.35, 7.45),
    (50821, "pO2", "Blood", "Blood Gas", "mm Hg", 110, 60, 0, 85, 105),
    (50818, "pCO2", "Blood", "Blood Gas", "mm Hg", 42, 9, 0, 35, 45),
    (50802, "Base Excess", "Blood", "Blood Gas", "mEq/L", 0, 4.5, 0, -2, 3),
    (50804, "Calculated Total CO2", "Blood", "Blood Gas", "mEq/L", 25, 4.5, 0, 21, 30),
    (50813, "Lactate", "Blood", "Blood Gas", "mmol/L", 2.0, 1.5, 1, 0.5, 2.0),
    (50808, "Free Calcium", "Blood", "Blood Gas", "mmol/L", 1.12, 0.1, 2, 1.12, 1.32),
    (51491, "pH", "Urine", "Hematology", "units", 6.0, 0.8, 1, 5, 8),
    (51498, "Specific Gravity", "Urine", "Hematology", None, 1.015, 0.007, 3, 1.001, 1.035),
    (51486, "Leukocytes", "Urine", "Hematology", None, None, None, 0, None, None),
    (51463, "Bacteria", "Urine", "Hematology", None, None, None, 0, None, None),
]
LAB_TEXT_VALUES = {51486: ["NEG", "TR", "SM", "MOD", "LG"], 51463: ["NONE", "FEW", "MOD", "MANY"]}
# results that could not be reported: valuenum null, the text kept in value (the database build drops them)
LAB_FAILED_VALUES = ["___", "HEMOLYZED", "UNABLE TO REPORT", "ERROR"]
LAB_FAILED_SHARE = 0.01

# a panel is one specimen drawn at one time; weights are the shares of draws
LAB_PANELS = {
    "chem7": ([50912, 50931, 50983, 50971, 50882, 50902, 51006, 50868], 34),
    "ca_mg_phos": ([50893, 50960, 50970], 12),
    "cbc": ([51221, 51222, 51301, 51265, 51248, 51249, 51250, 51279, 51277], 28),
    "differential": ([51256, 51244, 51254, 51200, 51146], 5),
    "coags": ([51237, 51274, 51275], 9),
    "lft": ([50861, 50878, 50863, 50885, 50862], 6),
    "cardiac": ([51003, 50963, 50910], 3),
    "misc": ([50954, 50889, 51009], 2),
    "blood_gas": ([50820, 50821, 50818, 50802, 50804, 50813, 50808], 5),
    "urinalysis": ([51491, 51498, 51486, 51463], 3),
}
LAB_PANEL_ITEM_KEEP = 0.95  # an item of a panel is occasionally not resulted

# minority units that the database build must filter: itemid -> (unit, factor from the main unit, share)
LAB_MINORITY_UNITS = {50931: ("mmol/L", 1 / 18.016, 0.02), 50912: ("umol/L", 88.4, 0.015),
                      51222: ("g/L", 10.0, 0.015), 50893: ("mmol/L", 0.2495, 0.02)}

LAB_DRAWS_PER_DAY = 1.6  # inpatient panel draws per day of stay at event_density 1
LAB_OUTPATIENT_SHARE = 0.10  # share of panel draws outside any admission (hadm_id null)
LAB_PRIORITIES = {"ROUTINE": 55, "STAT": 30, None: 15}
