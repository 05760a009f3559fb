"""Vocabularies of the synthetic MIMIC-IV icu module: the d_items dictionary and ICU event settings.

Labels and itemids are MIMIC-IV's (the database build selects nine vital signs by itemid and the question
templates by label, e.g. ``temperature celsius``, ``o2 saturation pulseoxymetry``). d_items also lists
procedureevents / datetimeevents / ingredientevents items, as the real dictionary does, so the build's
``linksto`` filter has something to drop.
"""

from __future__ import annotations

# ---- chartevents ------------------------------------------------------------------------------------
# itemid, label, abbreviation, category, unit, param_type, low normal, high normal
CHART_ITEMS = [
    (220045, "Heart Rate", "HR", "Routine Vital Signs", "bpm", "Numeric", 60, 100),
    (220179, "Non Invasive Blood Pressure systolic", "NBPs", "Routine Vital Signs", "mmHg", "Numeric", 90, 140),
    (220180, "Non Invasive Blood Pressure diastolic", "NBPd", "Routine Vital Signs", "mmHg", "Numeric", 60, 90),
    (220181, "Non Invasive Blood Pressure mean", "NBPm", "Routine Vital Signs", "mmHg", "Numeric", 60, 110),
    (220050, "Arterial Blood Pressure systolic", "ABPs", "Routine Vital Signs", "mmHg", "Numeric", 90, 140),
    (220051, "Arterial Blood Pressure diastolic", "ABPd", "Routine Vital Signs", "mmHg", "Numeric", 60, 90),
    (220052, "Arterial Blood Pressure mean", "ABPm", "Routine Vital Signs", "mmHg", "Numeric", 60, 110),
    (220210, "Respiratory Rate", "RR", "Respiratory", "insp/min", "Numeric", 12, 18),
    (220277, "O2 saturation pulseoxymetry", "SpO2", "Respiratory", "%", "Numeric", 95, 100),
    (223761, "Temperature Fahrenheit", "Temperature F", "Routine Vital Signs", "°F", "Numeric", 96, 100.4),
    (223762, "Temperature Celsius", "Temperature C", "Routine Vital Signs", "°C", "Numeric", 35.5, 38.1),
    (226512, "Admission Weight (Kg)", "Admission Weight (Kg)", "General", "kg", "Numeric", None, None),
    (226730, "Height (cm)", "Height (cm)", "General", "cm", "Numeric", None, None),
    (225664, "Glucose finger stick (range 70-100)", "Glucose FS (range 70 -100)", "Routine Vital Signs",
     "mg/dL", "Numeric", 70, 100),
    (220048, "Heart Rhythm", "Heart Rhythm", "Routine Vital Signs", None, "Text", None, None),
    (220739, "GCS - Eye Opening", "GCS - Eye Opening", "Neurological", None, "Text", None, None),
    (223835, "Inspired O2 Fraction", "FiO2", "Respiratory", "%", "Numeric", None, None),
    (220339, "PEEP set", "PEEP set", "Respiratory", "cmH2O", "Numeric", None, None),
    (224639, "Daily Weight", "Daily Weight", "General", "kg", "Numeric", None, None),
    (226707, "Height", "Height", "General", "Inch", "Numeric", None, None),
    (220621, "Glucose (serum)", "Glucose (serum)", "Labs", "mg/dL", "Numeric with tag", 70, 100),
]
# how vital values are drawn: itemid -> (mean, sd, decimals, lo clip, hi clip); a per-stay offset of
# STAY_SD_SHARE * sd keeps a patient's values coherent over the stay
VITAL_VALUES = {220045: (86, 17, 0, 30, 180), 220179: (121, 21, 0, 60, 220), 220180: (64, 13, 0, 25, 130),
                220050: (118, 22, 0, 55, 230), 220051: (60, 12, 0, 25, 130), 220210: (19, 5, 0, 6, 45),
                220277: (96.5, 2.6, 0, 70, 100), 223762: (36.9, 0.6, 1, 33.5, 41.0),
                226512: (81, 22, 1, 35, 200), 226730: (169, 10, 0, 140, 200), 225664: (140, 45, 0, 40, 450),
                223835: (45, 15, 0, 21, 100), 220339: (6, 2.5, 0, 0, 20), 224639: (81, 22, 1, 35, 200)}
STAY_SD_SHARE = 0.6
HEART_RHYTHMS = {"SR (Sinus Rhythm)": 55, "ST (Sinus Tachycardia)": 15, "AF (Atrial Fibrillation)": 18,
                 "SB (Sinus Bradycardia)": 7, "1st AV (First degree AV Block)": 3, "Paced": 2}
GCS_EYE = {"Spontaneously": (4, 70), "To Speech": (3, 15), "To Pain": (2, 7), "No Response": (1, 8)}
VITAL_HOURS = (1.0, 4.0)  # charting interval of a stay, drawn uniformly, divided by event_density
ARTERIAL_LINE_SHARE = 0.45  # stays charting arterial pressures (others non-invasive)
CELSIUS_SHARE = 0.45  # stays charting temperature in Celsius (others Fahrenheit)
VENTILATED_SHARE = 0.35  # stays charting FiO2 / PEEP
HEIGHT_SHARE = 0.6
CHART_NULL_SHARE = 0.004  # numeric vitals charted without a value
# minority units the build should not mix in: itemid -> (unit, factor from the main unit, share)
CHART_MINORITY_UNITS = {226512: ("lbs", 2.20462, 0.03), 226730: ("in", 0.393701, 0.03),
                        225664: ("mmol/L", 1 / 18.016, 0.02)}

# ---- inputevents ------------------------------------------------------------------------------------
# itemid, label, abbreviation, category, amount unit, ordercategoryname, weight, amount lo, hi, rate unit
INPUT_ITEMS = [
    (225158, "NaCl 0.9%", "NaCl 0.9%", "Fluids/Intake", "ml", "02-Fluids (Crystalloids)", 25, 50, 1000,
     "mL/hour"),
    (220949, "Dextrose 5%", "Dextrose 5%", "Fluids/Intake", "ml", "02-Fluids (Crystalloids)", 12, 20, 500,
     "mL/hour"),
    (225943, "Solution", "Solution", "Fluids/Intake", "ml", "01-Drips", 8, 5, 250, "mL/hour"),
    (226452, "PO Intake", "PO Intake", "Fluids/Intake", "ml", "14-Oral/Gastric Intake", 7, 30, 480, None),
    (225828, "LR", "LR", "Fluids/Intake", "ml", "03-IV Fluid Bolus", 6, 250, 1000, None),
    (225799, "Gastric Meds", "Gastric Meds", "Fluids/Intake", "ml", "14-Oral/Gastric Intake", 5, 10, 120, None),
    (225944, "Sterile Water", "Sterile Water", "Fluids/Intake", "ml", "02-Fluids (Crystalloids)", 3, 10, 250,
     None),
    (225168, "Packed Red Blood Cells", "Packed RBC", "Blood Products/Colloids", "ml", "07-Blood Products", 1.5,
     250, 375, None),
    (220862, "Albumin 25%", "Albumin 25%", "Blood Products/Colloids", "ml", "07-Blood Products", 1.5, 50, 100,
     None),
    (220864, "Albumin 5%", "Albumin 5%", "Blood Products/Colloids", "ml", "07-Blood Products", 1.5, 250, 500,
     None),
    (220970, "Fresh Frozen Plasma", "FFP", "Blood Products/Colloids", "ml", "07-Blood Products", 0.6, 200, 300,
     None),
    (221906, "Norepinephrine", "Norepinephrine", "Medications", "mg", "01-Drips", 3, 0.1, 8, "mcg/kg/min"),
    (222168, "Propofol", "Propofol", "Medications", "mg", "01-Drips", 3, 20, 1200, "mcg/kg/min"),
    (225152, "Heparin Sodium", "Heparin Sodium", "Medications", "units", "01-Drips", 3, 500, 25000,
     "units/hour"),
    (223258, "Insulin - Regular", "Insulin - Regular", "Medications", "units", "01-Drips", 2.5, 1, 60,
     "units/hour"),
    (221744, "Fentanyl", "Fentanyl", "Medications", "mcg", "01-Drips", 2, 25, 1500, "mcg/hour"),
    (221794, "Furosemide (Lasix)", "Furosemide (Lasix)", "Medications", "mg", "05-Med Bolus", 1.5, 10, 80, None),
    (225166, "Potassium Chloride", "KCl", "Medications", "mEq", "05-Med Bolus", 1.5, 10, 40, None),
    (222011, "Magnesium Sulfate", "Magnesium Sulfate", "Medications", "grams", "05-Med Bolus", 1.5, 1, 4, None),
    (225975, "Heparin Sodium (Prophylaxis)", "Heparin Sodium (Prophylaxis)", "Medications", "units",
     "11-Prophylaxis (IV)", 1.2, 5000, 5000, None),
    (221749, "Phenylephrine", "Phenylephrine", "Medications", "mg", "01-Drips", 1, 0.5, 20, "mcg/kg/min"),
    (221668, "Midazolam (Versed)", "Midazolam (Versed)", "Medications", "mg", "01-Drips", 1, 1, 60, "mg/hour"),
    (222315, "Vasopressin", "Vasopressin", "Medications", "units", "01-Drips", 0.8, 1, 60, "units/hour"),
    (225798, "Vancomycin", "Vancomycin", "Antibiotics", "dose", "08-Antibiotics (IV)", 1, 1, 1, None),
    (225893, "Piperacillin/Tazobactam (Zosyn)", "Piperacillin/Tazobactam (Zosyn)", "Antibiotics", "dose",
     "08-Antibiotics (IV)", 0.8, 1, 1, None),
]
INPUT_PER_HOUR = 1 / 3  # input orders per ICU hour at event_density 1
INPUT_STATUSES = {"FinishedRunning": 70, "Stopped": 15, "ChangeDose/Rate": 10, "Paused": 3, "Rewritten": 2}
INPUT_DESCRIPTIONS = {"01-Drips": ("Continuous Med", "Main order parameter"),
                      "02-Fluids (Crystalloids)": ("Continuous IV", "Main order parameter"),
                      "03-IV Fluid Bolus": ("Bolus", "Main order parameter"),
                      "05-Med Bolus": ("Drug Push", "Main order parameter"),
                      "07-Blood Products": ("Bolus", "Main order parameter"),
                      "08-Antibiotics (IV)": ("Drug Push", "Main order parameter"),
                      "11-Prophylaxis (IV)": ("Drug Push", "Main order parameter"),
                      "14-Oral/Gastric Intake": ("Non Iv Meds", "Main order parameter")}

# ---- outputevents -----------------------------------------------------------------------------------
# itemid, label, abbreviation, category, weight, value lo, hi (ml)
OUTPUT_ITEMS = [
    (226559, "Foley", "Foley", "Output", 55, 10, 600), (226560, "Void", "Void", "Output", 12, 100, 800),
    (226588, "Chest Tube #1", "Chest Tube #1", "Output", 6, 0, 300),
    (226589, "Chest Tube #2", "Chest Tube #2", "Output", 2, 0, 250),
    (226579, "Stool", "Stool", "Output", 4, 50, 600),
    (226566, "Urine Out Incontinent", "Urine Out Incontinent", "Output", 4, 100, 600),
    (226561, "Condom Cath", "Condom Cath", "Output", 2, 100, 700),
    (226599, "Jackson Pratt #1", "JP #1", "Output", 3, 5, 200),
    (226576, "Gastric Tube", "Gastric Tube", "Output", 3, 10, 500),
    (226627, "OR Urine", "OR Urine", "Output", 1, 100, 1000),
]
OUTPUT_PER_HOUR = 1 / 2.5

# ---- dictionary rows of the other ICU tables (not generated as events) ------------------------------
# itemid, label, abbreviation, linksto, category, unit, param_type
OTHER_ITEMS = [
    (225459, "Chest X-Ray", "Chest X-Ray", "procedureevents", "Imaging", None, "Process"),
    (221214, "CT scan", "CT scan", "procedureevents", "Imaging", None, "Process"),
    (225792, "Invasive Ventilation", "Invasive Ventilation", "procedureevents", "Ventilation", "min",
     "Process"),
    (225794, "Non-invasive Ventilation", "Non-invasive Ventilation", "procedureevents", "Ventilation", "min",
     "Process"),
    (225752, "Arterial Line", "Arterial Line", "procedureevents", "Access Lines - Invasive", None, "Process"),
    (224560, "PICC Line", "PICC Line", "procedureevents", "Access Lines - Invasive", None, "Process"),
    (225754, "18 Gauge Insertion Date", "18 Gauge Insertion Date", "datetimeevents", "Access Lines - Peripheral",
     None, "Date and time"),
    (224290, "Arterial Line Insertion Date", "Arterial Line Insertion Date", "datetimeevents",
     "Access Lines - Invasive", None, "Date and time"),
    (220490, "Free Water", "Free Water", "ingredientevents", "Ingredients", "ml", "Ingredient"),
    (226221, "Calories", "Calories", "ingredientevents", "Ingredients", "kcal", "Ingredient"),
]
