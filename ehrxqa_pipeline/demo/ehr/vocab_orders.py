"""Vocabularies of the synthetic MIMIC-IV orders: prescriptions and microbiology.

Drug names keep MIMIC-IV's own spelling (tall-man lettering ``OxyCODONE``, the double space of
``Sodium Chloride 0.9%  Flush``, the ``Bag`` base solution); doses are strings as in the real table,
including decimals ("0.5") and ranges ("5-10") that the published database build silently drops.
"""

from __future__ import annotations

# drug, drug_type, weight, doses, dose unit, routes, product strength, dispensed form unit
DRUGS = [
    ("Sodium Chloride 0.9%  Flush", "MAIN", 10, ["3", "10"], "mL", ["IV"], "Syringe", "SYR"),
    ("Acetaminophen", "MAIN", 7, ["325", "650", "1000"], "mg", ["PO", "PO/NG"], "325mg Tablet", "TAB"),
    ("Heparin", "MAIN", 6, ["5000"], "UNIT", ["SC"], "5000 Units / mL- 1mL Vial", "mL"),
    ("Insulin", "MAIN", 5, ["0", "2", "4", "6", "2-10"], "UNIT", ["SC"], "100 Units / mL - 10 mL Vial", "mL"),
    ("Docusate Sodium", "MAIN", 4, ["100"], "mg", ["PO"], "100mg Capsule", "CAP"),
    ("Senna", "MAIN", 4, ["8.6", "17.2"], "mg", ["PO"], "8.6 mg Tablet", "TAB"),
    ("Potassium Chloride", "MAIN", 4, ["20", "40"], "mEq", ["PO", "IV"], "20mEq Packet", "PKT"),
    ("Metoprolol Tartrate", "MAIN", 3.5, ["12.5", "25", "50"], "mg", ["PO", "PO/NG"], "25mg Tablet", "TAB"),
    ("Pantoprazole", "MAIN", 3.5, ["40"], "mg", ["PO", "IV"], "40mg Tablet", "TAB"),
    ("Ondansetron", "MAIN", 3, ["4"], "mg", ["IV", "PO"], "2mg/mL-2mL", "mL"),
    ("OxyCODONE (Immediate Release)", "MAIN", 3, ["5", "5-10", "10"], "mg", ["PO", "PO/NG"], "5mg Tablet",
     "TAB"),
    ("Magnesium Sulfate", "MAIN", 3, ["2", "4"], "g", ["IV"], "2 g / 50 mL Premix Bag", "mL"),
    ("Furosemide", "MAIN", 3, ["20", "40", "80"], "mg", ["IV", "PO"], "10mg/mL-4mL Vial", "mL"),
    ("Aspirin", "MAIN", 3, ["81", "325"], "mg", ["PO"], "81mg Tab Chew", "TAB"),
    ("Atorvastatin", "MAIN", 3, ["10", "40", "80"], "mg", ["PO"], "40mg Tablet", "TAB"),
    ("Bag", "BASE", 2.5, ["1"], "BAG", ["IV"], "50mL Bag", "BAG"),
    ("Bisacodyl", "MAIN", 2.5, ["10"], "mg", ["PR", "PO"], "10mg Suppository", "SUPP"),
    ("Polyethylene Glycol", "MAIN", 2.5, ["17"], "g", ["PO"], "17g Powder Packet", "PKT"),
    ("Vancomycin", "MAIN", 2.5, ["750", "1000", "1250"], "mg", ["IV"], "1g Vial", "VIAL"),
    ("Albuterol 0.083% Neb Soln", "MAIN", 2, ["1"], "NEB", ["IH"], "2.5mg/3mL Neb Soln", "NEB"),
    ("Sodium Chloride 0.9%", "BASE", 2, ["500", "1000"], "mL", ["IV"], "1000mL Bag", "mL"),
    ("Lisinopril", "MAIN", 2, ["5", "10", "20"], "mg", ["PO"], "10mg Tablet", "TAB"),
    ("Amlodipine", "MAIN", 2, ["5", "10"], "mg", ["PO"], "5mg Tablet", "TAB"),
    ("Ipratropium Bromide Neb", "MAIN", 1.5, ["1"], "NEB", ["IH"], "0.02% 2.5mL Neb Soln", "NEB"),
    ("Lorazepam", "MAIN", 1.5, ["0.5", "1", "0.5-1"], "mg", ["PO", "IV"], "0.5mg Tablet", "TAB"),
    ("Piperacillin-Tazobactam", "MAIN", 1.5, ["4.5"], "g", ["IV"], "4.5 g Vial", "VIAL"),
    ("CefTRIAXone", "MAIN", 1.5, ["1", "2"], "g", ["IV"], "1g Vial", "VIAL"),
    ("Warfarin", "MAIN", 1.5, ["1", "2.5", "5"], "mg", ["PO"], "5mg Tablet", "TAB"),
    ("Morphine Sulfate", "MAIN", 1.5, ["2", "4", "2-4"], "mg", ["IV"], "2mg Syringe", "SYR"),
    ("HYDROmorphone (Dilaudid)", "MAIN", 1.5, ["0.5", "1", "0.5-1"], "mg", ["IV", "PO"], "1mg/mL Syringe",
     "mL"),
    ("Levothyroxine Sodium", "MAIN", 1.5, ["25", "50", "75", "100"], "mcg", ["PO"], "50mcg Tablet", "TAB"),
    ("Enoxaparin Sodium", "MAIN", 1.5, ["40", "30", "60-80"], "mg", ["SC"], "40mg/0.4mL Syringe", "mL"),
    ("Gabapentin", "MAIN", 1.5, ["100", "300", "600"], "mg", ["PO"], "300mg Capsule", "CAP"),
    ("Famotidine", "MAIN", 1.5, ["20"], "mg", ["PO/NG", "IV"], "20mg Tablet", "TAB"),
    ("Multivitamins", "MAIN", 1.2, ["1"], "TAB", ["PO"], "1 Tablet", "TAB"),
    ("Tamsulosin", "MAIN", 1, ["0.4"], "mg", ["PO"], "0.4mg Capsule", "CAP"),
    ("Lidocaine 5% Patch", "MAIN", 1, ["1"], "PTCH", ["TP"], "700 mg/patch", "PTCH"),
    ("Norepinephrine", "MAIN", 1, ["0.06", "0.03-0.25"], "mcg/kg/min", ["IV DRIP"], "4 mg/250 mL", "mL"),
    ("Propofol", "MAIN", 1, ["20", "10-50"], "mcg/kg/min", ["IV DRIP"], "1000mg/100mL Vial", "mL"),
    ("Prednisone", "MAIN", 1, ["5", "10", "40", "60"], "mg", ["PO"], "10mg Tablet", "TAB"),
    ("Clopidogrel", "MAIN", 1, ["75"], "mg", ["PO"], "75mg Tablet", "TAB"),
    ("Simvastatin", "MAIN", 1, ["20", "40"], "mg", ["PO"], "20mg Tablet", "TAB"),
    ("Calcium Gluconate", "MAIN", 1, ["1", "2"], "g", ["IV"], "1g/50mL Premix Bag", "mL"),
    ("Fluticasone Propionate 110mcg", "MAIN", 0.8, ["2"], "PUFF", ["IH"], "110mcg/Actuation Inhaler", "INH"),
    ("Dextrose 50%", "MAIN", 0.8, ["12.5", "25"], "g", ["IV"], "25 g / 50 mL Syringe", "SYR"),
    ("Metformin (Glucophage)", "MAIN", 0.8, ["500", "1000"], "mg", ["PO"], "500mg Tablet", "TAB"),
    ("Guaifenesin", "MAIN", 0.8, ["5-10", "10"], "mL", ["PO"], "100mg/5mL Syrup", "mL"),
    ("Nicotine Patch", "MAIN", 0.6, ["14", "21"], "mg", ["TP"], "14 mg/24 hr Patch", "PTCH"),
    ("Tiotropium Bromide", "MAIN", 0.6, ["1"], "CAP", ["IH"], "18mcg Capsule", "CAP"),
    ("Sarna Lotion", "MAIN", 0.6, ["1"], "Appl", ["TP"], "222mL Bottle", "BTL"),
    ("Nitroglycerin SL", "MAIN", 0.5, ["0.3", "0.4"], "mg", ["SL"], "0.4mg SL Tablet", "TAB"),
    ("Glucagon", "MAIN", 0.5, ["1"], "mg", ["IM"], "1mg Kit", "KIT"),
    ("Influenza Vaccine Quadrivalent", "MAIN", 0.3, ["0.5"], "mL", ["IM"], "0.5 mL Syringe", "SYR"),
]
RX_PER_DAY = 2.5  # orders per day of stay at event_density 1, plus RX_BASE admission orders
RX_BASE = 3
RX_NULL_STOPTIME_SHARE = 0.01
RX_DOSES_PER_24H = {1.0: 45, 2.0: 15, 3.0: 10, 4.0: 8, 6.0: 3, None: 19}

# ---- microbiology -----------------------------------------------------------------------------------
# spec_itemid, spec_type_desc, weight, tests [(test_itemid, test_name)], positive share, organisms {name: w}
SPECIMENS = [
    (70012, "BLOOD CULTURE", 30, [(90201, "Blood Culture, Routine")], 0.12,
     {"STAPHYLOCOCCUS, COAGULASE NEGATIVE": 4, "STAPH AUREUS COAG +": 3, "ESCHERICHIA COLI": 3,
      "KLEBSIELLA PNEUMONIAE": 2, "ENTEROCOCCUS FAECALIS": 1.5}),
    (70079, "URINE", 25, [(90039, "URINE CULTURE")], 0.35,
     {"ESCHERICHIA COLI": 5, "KLEBSIELLA PNEUMONIAE": 2, "ENTEROCOCCUS SP.": 2, "PROTEUS MIRABILIS": 1,
      "PSEUDOMONAS AERUGINOSA": 1, "YEAST": 1.5}),
    (70091, "MRSA SCREEN", 15, [(90088, "MRSA SCREEN")], 0.12,
     {"POSITIVE FOR METHICILLIN RESISTANT STAPH AUREUS": 1}),
    (70062, "SPUTUM", 10, [(90148, "GRAM STAIN"), (90056, "RESPIRATORY CULTURE")], 0.45,
     {"STAPH AUREUS COAG +": 2, "PSEUDOMONAS AERUGINOSA": 2, "KLEBSIELLA PNEUMONIAE": 1, "YEAST": 2,
      "ENTEROBACTER CLOACAE COMPLEX": 1}),
    (70067, "STOOL", 8, [(90267, "C. difficile PCR"), (90058, "FECAL CULTURE")], 0.12,
     {"CLOSTRIDIUM DIFFICILE": 1}),
    (70076, "SWAB", 6, [(90107, "R/O VANCOMYCIN RESISTANT ENTEROCOCCUS")], 0.15, {"ENTEROCOCCUS FAECIUM": 1}),
    (70013, "BRONCHOALVEOLAR LAVAGE", 3,
     [(90148, "GRAM STAIN"), (90056, "RESPIRATORY CULTURE"), (90213, "FUNGAL CULTURE")], 0.4,
     {"PSEUDOMONAS AERUGINOSA": 2, "STAPH AUREUS COAG +": 2, "YEAST": 1, "ASPERGILLUS FUMIGATUS": 0.5}),
]
# organism -> (org_itemid, susceptibility panel: "gn" gram-negative, "gp" gram-positive, None untested)
ORGANISMS = {
    "STAPHYLOCOCCUS, COAGULASE NEGATIVE": (80155, "gp"), "STAPH AUREUS COAG +": (80023, "gp"),
    "ESCHERICHIA COLI": (80002, "gn"), "KLEBSIELLA PNEUMONIAE": (80004, "gn"),
    "ENTEROCOCCUS FAECALIS": (80053, "gp"), "ENTEROCOCCUS SP.": (80068, "gp"),
    "ENTEROCOCCUS FAECIUM": (80067, "gp"), "PROTEUS MIRABILIS": (80040, "gn"),
    "PSEUDOMONAS AERUGINOSA": (80026, "gn"), "ENTEROBACTER CLOACAE COMPLEX": (80293, "gn"),
    "YEAST": (80075, None), "ASPERGILLUS FUMIGATUS": (80193, None), "CLOSTRIDIUM DIFFICILE": (80139, None),
    "POSITIVE FOR METHICILLIN RESISTANT STAPH AUREUS": (80318, None),
}
ANTIBIOTICS = {
    "gn": [(90004, "AMPICILLIN"), (90005, "AMPICILLIN/SULBACTAM"), (90006, "CEFAZOLIN"),
           (90018, "CEFTRIAXONE"), (90012, "CEFEPIME"), (90014, "CIPROFLOXACIN"), (90013, "GENTAMICIN"),
           (90017, "MEROPENEM"), (90010, "PIPERACILLIN/TAZO"), (90016, "TOBRAMYCIN"),
           (90015, "TRIMETHOPRIM/SULFA"), (90011, "NITROFURANTOIN")],
    "gp": [(90019, "OXACILLIN"), (90025, "VANCOMYCIN"), (90021, "CLINDAMYCIN"), (90020, "ERYTHROMYCIN"),
           (90013, "GENTAMICIN"), (90027, "LEVOFLOXACIN"), (90026, "TETRACYCLINE"),
           (90015, "TRIMETHOPRIM/SULFA"), (90022, "RIFAMPIN"), (90004, "AMPICILLIN"),
           (90003, "PENICILLIN G"), (90028, "DAPTOMYCIN")],
}
AB_KEEP = 0.65  # share of a panel's antibiotics reported for one isolate
MIC_VALUES = [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
INTERPRETATIONS = {"S": 70, "R": 22, "I": 5, None: 3}
NEGATIVE_COMMENTS = {"BLOOD CULTURE": "NO GROWTH.", "URINE": "NO GROWTH.",
                     "MRSA SCREEN": "No MRSA isolated.", "SPUTUM": "NO GROWTH.",
                     "STOOL": "Negative for toxigenic C. difficile.",
                     "SWAB": "No VRE isolated.", "BRONCHOALVEOLAR LAVAGE": "NO GROWTH."}
GROWTH_QUANTITIES = {None: 50, "MODERATE GROWTH": 20, "SPARSE GROWTH": 15, "HEAVY GROWTH": 15}
MICRO_BASE = 0.4  # specimens per admission, plus MICRO_PER_DAY per day of stay (event_density 1)
MICRO_PER_DAY = 0.2
MICRO_NULL_CHARTTIME_SHARE = 0.03  # MIMIC keeps only the date for some specimens
