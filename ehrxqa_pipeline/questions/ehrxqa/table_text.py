"""The 174 table-related EHRXQA templates in the paper's wording (appendix, "Full list of 174 Table-related
question templates"), keyed by their EHRSQL template index, and the EHRSQL templates left out.

Indices (reference-builders.md 6.1): 0-5 no patient (TABLE-NONE), 6-121 one patient (TABLE-SINGLE), 122-182
a group of patients (TABLE-GROUP): 183 EHRSQL indices. The paper's Table B3 lists the 18 templates on which
MIMIC-III and MIMIC-IV differ: nine MIMIC-IV-only microbiology-test templates (49, 51, 78, 101, 103, 153,
176, 178, 180) and nine MIMIC-III-only ones (``EXCLUDED``). 183 - 9 = 174, and the paper's list, read in
order against the indices left after the exclusions, puts every MIMIC-IV-only template at its Table B3
number -- so the mapping index -> text below is the paper's. Per scope: 6 none, 108 single (116 - 8),
60 group (61 - 1).

``TEXTS`` are the published template list's question_template (the record's q_tag, byte for byte; checked
against ``resources/published/template_idx_to_template_info.json`` by the tests): the paper's wording below,
lower-cased, with the typographic apostrophe of 77 / 78 ("patient {patient_id}'s") as an ASCII quote, and two
texts as published rather than as in the paper: 20 "stayed in careunit" (paper: "was transferred to careunit")
and 165 "[time_filter_within]" (paper: "at the same time", one of its values). ``_TEXT`` is "<index> <text>",
an indented line continues the text.
"""

from __future__ import annotations


# EHRSQL templates absent from the paper's MIMIC-IV list (Table B3, MIMIC-III only): index -> (wording, reason).
EXCLUDED: dict[int, tuple[str, str]] = {
    21: ("How many [unit_count] have passed since the [time_filter_exact1] time patient {patient_id} was "
         "transferred to ward {ward_id} on the current hospital visit?",
         "ward ids: MIMIC-IV transfers have care units only (MIMIC-III wardid is gone)"),
    22: ("How many [unit_count] have passed since the [time_filter_exact1] time patient {patient_id} received a "
         "procedure on the current hospital visit?",
         "MIMIC-III only in paper Table B3: MIMIC-IV procedures_icd has a chartdate (day resolution) only, so "
         "hours since a procedure of the ongoing visit are not defined"),
    23: ("How many [unit_count] have passed since the [time_filter_exact1] time patient {patient_id} received a "
         "{procedure_name} procedure on the current hospital visit?",
         "MIMIC-III only in paper Table B3: procedure times are dates in MIMIC-IV (as 22)"),
    29: ("What was the [time_filter_exact1] ward of patient {patient_id} [time_filter_global1]?",
         "ward ids: MIMIC-IV has no ward ids"),
    46: ("What was the name of the allergy that patient {patient_id} had [time_filter_global1]?",
         "allergy: MIMIC-IV has no allergy table"),
    47: ("What was the name of the substance that patient {patient_id} was allergic to [time_filter_global1]?",
         "allergy: MIMIC-IV has no allergy table"),
    85: ("Has_verb patient {patient_id} received a {procedure_name} procedure in other than the current hospital "
         "[time_filter_global1]?",
         "MIMIC-III only in paper Table B3 (no reason given there); neither schema records other hospitals"),
    98: ("Has_verb patient {patient_id} had any allergy [time_filter_global1]?",
         "allergy: MIMIC-IV has no allergy table"),
    137: ("Count the number of patients who stayed in ward {ward_id} [time_filter_global1].",
          "ward ids: MIMIC-IV has no ward ids"),
}
# Of those, the ones asking for data the schema cannot hold (the others are answerable here but left out by
# the paper): the unanswerable-question option reuses them.
SCHEMA_LACKS = (21, 29, 46, 47, 98, 137)

_TEXT = """
0 What is the intake method of {drug_name}?
1 What is the cost of a procedure named {procedure_name}?
2 What is the cost of a {lab_name} lab test?
3 What is the cost of a drug named {drug_name}?
4 What is the cost of diagnosing {diagnosis_name}?
5 What does {abbreviation} stand for?
6 What is the gender of patient {patient_id}?
7 What is the date of birth of patient {patient_id}?
8 What was the [time_filter_exact1] length of hospital stay of patient {patient_id}?
9 What is the change in the weight of patient {patient_id} from the [time_filter_exact2] value measured
    [time_filter_global2] compared to the [time_filter_exact1] value measured [time_filter_global1]?
10 What is the change in the value of {lab_name} of patient {patient_id} from the [time_filter_exact2] value
    measured [time_filter_global2] compared to the [time_filter_exact1] value measured [time_filter_global1]?
11 What is the change in the {vital_name} of patient {patient_id} from the [time_filter_exact2] value measured
    [time_filter_global2] compared to the [time_filter_exact1] value measured [time_filter_global1]?
12 Is the value of {lab_name} of patient {patient_id} [time_filter_exact2] measured [time_filter_global2]
    [comparison] than the [time_filter_exact1] value measured [time_filter_global1]?
13 Is the {vital_name} of patient {patient_id} [time_filter_exact2] measured [time_filter_global2] [comparison]
    than the [time_filter_exact1] value measured [time_filter_global1]?
14 What is_verb the age of patient {patient_id} [time_filter_global1]?
15 What is_verb the name of insurance of patient {patient_id} [time_filter_global1]?
16 What is_verb the marital status of patient {patient_id} [time_filter_global1]?
17 What percentile is the value of {lab_value} in a {lab_name} lab test among patients of the same age as
    patient {patient_id} [time_filter_global1]?
18 How many [unit_count] have passed since patient {patient_id} was admitted to the hospital currently?
19 How many [unit_count] have passed since patient {patient_id} was admitted to the ICU currently?
20 How many [unit_count] have passed since the [time_filter_exact1] time patient {patient_id} stayed in
    careunit {careunit} on the current hospital visit?
24 How many [unit_count] have passed since the [time_filter_exact1] time patient {patient_id} was diagnosed with
    {diagnosis_name} on the current hospital visit?
25 How many [unit_count] have passed since the [time_filter_exact1] time patient {patient_id} was prescribed
    {drug_name} on the current hospital visit?
26 How many [unit_count] have passed since the [time_filter_exact1] time patient {patient_id} received a
    {lab_name} lab test on the current hospital visit?
27 How many [unit_count] have passed since the [time_filter_exact1] time patient {patient_id} had a
    {intake_name} intake on the current ICU visit?
28 What was the [time_filter_exact1] hospital admission type of patient {patient_id} [time_filter_global1]?
30 What was the [time_filter_exact1] careunit of patient {patient_id} [time_filter_global1]?
31 What was the [time_filter_exact1] measured height of patient {patient_id} [time_filter_global1]?
32 What was the [time_filter_exact1] measured weight of patient {patient_id} [time_filter_global1]?
33 What was the name of the diagnosis that patient {patient_id} [time_filter_exact1] received
    [time_filter_global1]?
34 What was the name of the procedure that patient {patient_id} [time_filter_exact1] received
    [time_filter_global1]?
35 What was the name of the drug that patient {patient_id} was [time_filter_exact1] prescribed via {drug_route}
    route [time_filter_global1]?
36 What was the name of the drug that patient {patient_id} was [time_filter_exact1] prescribed
    [time_filter_global1]?
37 What was the name of the drug that patient {patient_id} was prescribed [time_filter_within] after having been
    diagnosed with {diagnosis_name} [time_filter_global1]?
38 What was the name of the drug that patient {patient_id} was prescribed [time_filter_within] after having
    received a {procedure_name} procedure [time_filter_global1]?
39 What was the dose of {drug_name} that patient {patient_id} was [time_filter_exact1] prescribed
    [time_filter_global1]?
40 What was the total amount of dose of {drug_name} that patient {patient_id} were prescribed
    [time_filter_global1]?
41 What was the name of the drug that patient {patient_id} were prescribed [n_times] [time_filter_global1]?
42 What is the new prescription of patient {patient_id} [time_filter_global2] compared to the prescription
    [time_filter_global1]?
43 What was the [time_filter_exact1] measured value of a {lab_name} lab test of patient {patient_id}
    [time_filter_global1]?
44 What was the name of the lab test that patient {patient_id} [time_filter_exact1] received
    [time_filter_global1]?
45 What was the [agg_function] {lab_name} value of patient {patient_id} [time_filter_global1]?
48 What was the organism name found in the [time_filter_exact1] {culture_name} microbiology test of patient
    {patient_id} [time_filter_global1]?
49 What was the organism name found in the [time_filter_exact1] {test_name} test of patient {patient_id}
    [time_filter_global1]?
50 What was the name of the specimen that patient {patient_id} was [time_filter_exact1] tested
    [time_filter_global1]?
51 What was the name of the microbiology test that patient {patient_id} [time_filter_exact1] received
    [time_filter_global1]?
52 What was the name of the intake that patient {patient_id} [time_filter_exact1] had [time_filter_global1]?
53 What was the total volume of {intake_name} intake that patient {patient_id} received [time_filter_global1]?
54 What was the total volume of intake that patient {patient_id} received [time_filter_global1]?
55 What was the name of the output that patient {patient_id} [time_filter_exact1] had [time_filter_global1]?
56 What was the total volume of {output_name} output that patient {patient_id} had [time_filter_global1]?
57 What was the total volume of output that patient {patient_id} had [time_filter_global1]?
58 What is the difference between the total volume of intake and output of patient {patient_id}
    [time_filter_global1]?
59 What was the [time_filter_exact1] measured {vital_name} of patient {patient_id} [time_filter_global1]?
60 What was the [agg_function] {vital_name} of patient {patient_id} [time_filter_global1]?
61 What is_verb the total hospital cost of patient {patient_id} [time_filter_global1]?
62 When was the [time_filter_exact1] hospital admission time of patient {patient_id} [time_filter_global1]?
63 When was the [time_filter_exact1] hospital admission time that patient {patient_id} was admitted via
    {admission_route} [time_filter_global1]?
64 When was the [time_filter_exact1] hospital discharge time of patient {patient_id} [time_filter_global1]?
65 What was the [time_filter_exact1] length of ICU stay of patient {patient_id}?
66 When was the [time_filter_exact1] time that patient {patient_id} was diagnosed with {diagnosis_name}
    [time_filter_global1]?
67 When was the [time_filter_exact1] procedure time of patient {patient_id} [time_filter_global1]?
68 When was the [time_filter_exact1] time that patient {patient_id} received a {procedure_name} procedure
    [time_filter_global1]?
69 When was the [time_filter_exact1] prescription time of patient {patient_id} [time_filter_global1]?
70 When was the [time_filter_exact1] time that patient {patient_id} was prescribed {drug_name}
    [time_filter_global1]?
71 When was the [time_filter_exact1] time that patient {patient_id} was prescribed {drug_name1} and {drug_name2}
    [time_filter_within] [time_filter_global1]?
72 When was the [time_filter_exact1] time that patient {patient_id} was prescribed a medication via {drug_route}
    route [time_filter_global1]?
73 When was the [time_filter_exact1] lab test of patient {patient_id} [time_filter_global1]?
74 When was the [time_filter_exact1] time that patient {patient_id} received a {lab_name} lab test
    [time_filter_global1]?
75 When was the [time_filter_exact1] time that patient {patient_id} had the [sort] value of {lab_name}
    [time_filter_global1]?
76 When was the [time_filter_exact1] microbiology test of patient {patient_id} [time_filter_global1]?
77 When was patient {patient_id}'s [time_filter_exact1] {culture_name} microbiology test [time_filter_global1]?
78 When was patient {patient_id}'s [time_filter_exact1] {test_name} test [time_filter_global1]?
79 When was the [time_filter_exact1] time that patient {patient_id} had a {intake_name} intake
    [time_filter_global1]?
80 When was the [time_filter_exact1] intake time of patient {patient_id} [time_filter_global1]?
81 When was the [time_filter_exact1] time that patient {patient_id} had a {output_name} output
    [time_filter_global1]?
82 When was the [time_filter_exact1] time that patient {patient_id} had a {vital_name} measured
    [time_filter_global1]?
83 When was the [time_filter_exact1] time that the {vital_name} of patient {patient_id} was [comparison] than
    {vital_value} [time_filter_global1]?
84 When was the [time_filter_exact1] time that patient {patient_id} had the [sort] {vital_name}
    [time_filter_global1]?
86 Has_verb patient {patient_id} been admitted to the hospital [time_filter_global1]?
87 Has_verb patient {patient_id} been to an emergency room [time_filter_global1]?
88 Has_verb patient {patient_id} received any procedure [time_filter_global1]?
89 Has_verb patient {patient_id} received a {procedure_name} procedure [time_filter_global1]?
90 What was the name of the procedure that patient {patient_id} received [n_times] [time_filter_global1]?
91 Has_verb patient {patient_id} received any diagnosis [time_filter_global1]?
92 Has_verb patient {patient_id} been diagnosed with {diagnosis_name} [time_filter_global1]?
93 Has_verb patient {patient_id} been prescribed {drug_name1}, {drug_name2}, or {drug_name3}
    [time_filter_global1]?
94 Has_verb patient {patient_id} been prescribed any medication [time_filter_global1]?
95 Has_verb patient {patient_id} been prescribed {drug_name} [time_filter_global1]?
96 Has_verb patient {patient_id} received any lab test [time_filter_global1]?
97 Has_verb patient {patient_id} received a {lab_name} lab test [time_filter_global1]?
99 Has_verb patient {patient_id} had any microbiology test result [time_filter_global1]?
100 Has_verb patient {patient_id} had any {culture_name} microbiology test result [time_filter_global1]?
101 Has_verb patient {patient_id} had any {test_name} test result [time_filter_global1]?
102 Has_verb there been any organism found in the [time_filter_exact1] {culture_name} microbiology test of
    patient {patient_id} [time_filter_global1]?
103 Has_verb there been any organism found in the [time_filter_exact1] {test_name} test of patient {patient_id}
    [time_filter_global1]?
104 Has_verb patient {patient_id} had any {intake_name} intake [time_filter_global1]?
105 Has_verb patient {patient_id} had any {output_name} output [time_filter_global1]?
106 Has_verb the {vital_name} of patient {patient_id} been ever [comparison] than {vital_value}
    [time_filter_global1]?
107 Has_verb the {vital_name} of patient {patient_id} been normal [time_filter_global1]?
108 List the hospital admission time of patient {patient_id} [time_filter_global1].
109 List the [unit_average] [agg_function] {lab_name} lab value of patient {patient_id} [time_filter_global1].
110 List the [unit_average] [agg_function] weight of patient {patient_id} [time_filter_global1].
111 List the [unit_average] [agg_function] volume of {intake_name} intake that patient {patient_id} received
    [time_filter_global1].
112 List the [unit_average] [agg_function] volume of {output_name} output that patient {patient_id} had
    [time_filter_global1].
113 List the [unit_average] [agg_function] {vital_name} of patient {patient_id} [time_filter_global1].
114 Count the number of hospital visits of patient {patient_id} [time_filter_global1].
115 Count the number of ICU visits of patient {patient_id} [time_filter_global1].
116 Count the number of times that patient {patient_id} received a {procedure_name} procedure
    [time_filter_global1].
117 Count the number of drugs patient {patient_id} were prescribed [time_filter_global1].
118 Count the number of times that patient {patient_id} were prescribed {drug_name} [time_filter_global1].
119 Count the number of times that patient {patient_id} received a {lab_name} lab test [time_filter_global1].
120 Count the number of times that patient {patient_id} had a {intake_name} intake [time_filter_global1].
121 Count the number of times that patient {patient_id} had a {output_name} output [time_filter_global1].
122 Count the number of current patients.
123 Count the number of current patients aged [age_group].
124 What is the [n_survival_period] survival rate of patients diagnosed with {diagnosis_name}?
125 What is the [n_survival_period] survival rate of patients who were prescribed {drug_name} after having been
    diagnosed with {diagnosis_name}?
126 What are the top [n_rank] diagnoses that have the highest [n_survival_period] mortality rate?
127 What is_verb the [agg_function] total hospital cost that involves a procedure named {procedure_name}
    [time_filter_global1]?
128 What is_verb the [agg_function] total hospital cost that involves a {lab_name} lab test
    [time_filter_global1]?
129 What is_verb the [agg_function] total hospital cost that involves a drug named {drug_name}
    [time_filter_global1]?
130 What is_verb the [agg_function] total hospital cost that involves a diagnosis named {diagnosis_name}
    [time_filter_global1]?
131 List the IDs of patients diagnosed with {diagnosis_name} [time_filter_global1].
132 What is the [agg_function] [unit_average] number of patient records diagnosed with {diagnosis_name}
    [time_filter_global1]?
133 Count the number of patients who were dead after having been diagnosed with {diagnosis_name}
    [time_filter_within] [time_filter_global1].
134 Count the number of patients who did not come back to the hospital [time_filter_within] after diagnosed with
    {diagnosis_name} [time_filter_global1].
135 Count the number of patients who were admitted to the hospital [time_filter_global1].
136 Count the number of patients who were discharged from the hospital [time_filter_global1].
138 Count the number of patients who stayed in careunit {careunit} [time_filter_global1].
139 Count the number of patients who were diagnosed with {diagnosis_name} [time_filter_within] after having
    received a {procedure_name} procedure [time_filter_global1].
140 Count the number of patients who were diagnosed with {diagnosis_name2} [time_filter_within] after having
    been diagnosed with {diagnosis_name1} [time_filter_global1].
141 Count the number of patients who were diagnosed with {diagnosis_name} [time_filter_global1].
142 Count the number of patients who received a {procedure_name} procedure [time_filter_global1].
143 Count the number of patients who received a {procedure_name} procedure [n_times] [time_filter_global1].
144 Count the number of patients who received a {procedure_name2} procedure [time_filter_within] after having
    received a {procedure_name1} procedure [time_filter_global1].
145 Count the number of patients who received a {procedure_name} procedure [time_filter_within] after having
    been diagnosed with {diagnosis_name} [time_filter_global1].
146 Count the number of {procedure_name} procedure cases [time_filter_global1].
147 Count the number of patients who were prescribed {drug_name} [time_filter_global1].
148 Count the number of {drug_name} prescription cases [time_filter_global1].
149 Count the number of patients who were prescribed {drug_name} [time_filter_within] after having received a
    {procedure_name} procedure [time_filter_global1].
150 Count the number of patients who were prescribed {drug_name} [time_filter_within] after having been
    diagnosed with {diagnosis_name} [time_filter_global1].
151 Count the number of patients who received a {lab_name} lab test [time_filter_global1].
152 Count the number of patients who received a {culture_name} microbiology test [time_filter_global1].
153 Count the number of patients who received a {test_name} test [time_filter_global1].
154 Count the number of patients who had a {intake_name} intake [time_filter_global1].
155 What are_verb the top [n_rank] frequent diagnoses [time_filter_global1]?
156 What are_verb the top [n_rank] frequent diagnoses of patients aged [age_group] [time_filter_global1]?
157 What are_verb the top [n_rank] frequent diagnoses that patients were diagnosed [time_filter_within] after
    having received a {procedure_name} procedure [time_filter_global1]?
158 What are_verb the top [n_rank] frequent diagnoses that patients were diagnosed [time_filter_within] after
    having been diagnosed with {diagnosis_name} [time_filter_global1]?
159 What are_verb the top [n_rank] frequent procedures [time_filter_global1]?
160 What are_verb the top [n_rank] frequent procedures of patients aged [age_group] [time_filter_global1]?
161 What are_verb the top [n_rank] frequent procedures that patients received [time_filter_within] after having
    received a {procedure_name} procedure [time_filter_global1]?
162 What are_verb the top [n_rank] frequent procedures that patients received [time_filter_within] after having
    been diagnosed with {diagnosis_name} [time_filter_global1]?
163 What are_verb the top [n_rank] frequently prescribed drugs [time_filter_global1]?
164 What are_verb the top [n_rank] frequently prescribed drugs of patients aged [age_group]
    [time_filter_global1]?
165 What are_verb the top [n_rank] frequent prescribed drugs for patients who were also prescribed {drug_name}
    [time_filter_within] [time_filter_global1]?
166 What are_verb the top [n_rank] frequent drugs that patients were prescribed [time_filter_within] after
    having been prescribed with {drug_name} [time_filter_global1]?
167 What are_verb the top [n_rank] frequently prescribed drugs that patients were prescribed
    [time_filter_within] after having received a {procedure_name} procedure [time_filter_global1]?
168 What are_verb the top [n_rank] frequently prescribed drugs that patients were prescribed
    [time_filter_within] after having been diagnosed with {diagnosis_name} [time_filter_global1]?
169 What are_verb the top [n_rank] frequently prescribed drugs that patients aged [age_group] were prescribed
    [time_filter_within] after having been diagnosed with {diagnosis_name} [time_filter_global1]?
170 What are_verb the top [n_rank] frequently prescribed drugs that {gender} patients aged [age_group] were
    prescribed [time_filter_within] after having been diagnosed with {diagnosis_name} [time_filter_global1]?
171 What are_verb the top [n_rank] frequent lab tests [time_filter_global1]?
172 What are_verb the top [n_rank] frequent lab tests of patients aged [age_group] [time_filter_global1]?
173 What are_verb the top [n_rank] frequent lab tests that patients had [time_filter_within] after having been
    diagnosed with {diagnosis_name} [time_filter_global1]?
174 What are_verb the top [n_rank] frequent lab tests that patients had [time_filter_within] after having
    received a {procedure_name} procedure [time_filter_global1]?
175 What are_verb the top [n_rank] frequent specimens tested [time_filter_global1]?
176 What are_verb the top [n_rank] frequent microbiology tests [time_filter_global1]?
177 What are_verb the top [n_rank] frequent specimens that patients were tested [time_filter_within] after
    having been diagnosed with {diagnosis_name} [time_filter_global1]?
178 What are_verb the top [n_rank] frequent microbiology tests that patients had [time_filter_within] after
    having been diagnosed with {diagnosis_name} [time_filter_global1]?
179 What are_verb the top [n_rank] frequent specimens that patients were tested [time_filter_within] after
    having received a {procedure_name} procedure [time_filter_global1]?
180 What are_verb the top [n_rank] frequent microbiology tests that patients had [time_filter_within] after
    having received a {procedure_name} procedure [time_filter_global1]?
181 What are_verb the top [n_rank] frequent intake events [time_filter_global1]?
182 What are_verb the top [n_rank] frequent output events [time_filter_global1]?
"""


def _parse(block: str) -> dict[int, str]:
    out: dict[int, str] = {}
    last = None
    for line in block.strip("\n").splitlines():
        if line.startswith(" "):
            out[last] += " " + line.strip()
        else:
            idx, text = line.split(" ", 1)
            last = int(idx)
            out[last] = text
    return out


TEXTS: dict[int, str] = {i: text.lower() for i, text in _parse(_TEXT).items()}
if len(TEXTS) != 174 or set(TEXTS) | set(EXCLUDED) != set(range(183)) or set(TEXTS) & set(EXCLUDED):
    raise RuntimeError("table template texts must cover 0-182 with the exclusions left out")


def scope_of(index: int) -> str:
    """TABLE-NONE (0-5), TABLE-SINGLE (6-121) or TABLE-GROUP (122-182)."""
    return "TABLE-NONE" if index < 6 else "TABLE-SINGLE" if index < 122 else "TABLE-GROUP"
