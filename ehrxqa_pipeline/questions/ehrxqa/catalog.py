"""The 168 EHRXQA image-related templates (paper Table C11) as data, built compositionally.

A template = a study reference (paper Table C10) or a question form over many studies + one embedded
MIMIC-CXR-VQA template (``questions.vqa_templates``). Families and their indices (reference-builders.md 6.1):
- IMAGE-SINGLE-1 (84): 1000-1047 "Given the [exact1] study of patient {patient_id} [global1], <vqa>" and
  1100-1147 "Given the study {study_id}, <vqa>" -- VQA programs 1-40 at +(program-1), CTR at +46, MTR at +47;
- IMAGE-SINGLE-2 (48): 12 comparison forms x 4 reference pairs: 2000 time/time, 2100 time/previous,
  2200 id/id, 2300 id/previous;
- IMAGE-SINGLE-N (24): 6 "indicating" predicates x 3000 how many [unit_count] since, 3100 when, 3200 has,
  3300 count the number of times;
- IMAGE-GROUP-N (12): 6 predicates x 4000 count patients, 4100 list patient ids.

``template.queries(values)`` -> (gold SQL over TB_CXR_PLUS + TB_CXR, NeuralSQL over TB_CXR with
func_vqa(question, study_id)); ``template.question(values)`` -> the filled, lower-cased question;
``template.references(values)`` -> study subqueries that must each resolve to one study for the item to be
valid. ``values``: patient_id, study_id, study_id1, study_id2 (ints), exact1 / exact2 ('first' / 'last'),
global1 / global2 (``slots.TimeFilter``), unit_count ('days' / 'hours'), comparison, and the VQA argument
columns (object_1, attribute_1, category_1, ...). The func_vqa question is ``render_question(vqa,
args).lower()``, the exact wording the oracle inverts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ehrxqa_pipeline.questions.ehrxqa import slots
from ehrxqa_pipeline.questions.ehrxqa.vqa_gold import SUPPORTED, gold_vqa
from ehrxqa_pipeline.questions.vqa_templates import (CATEGORY_PLURAL, CATEGORY_TEXT, SLOT_COLUMNS, get_template,
                                                     render_question)

IMAGE_SCOPES = ("IMAGE-SINGLE-1", "IMAGE-SINGLE-2", "IMAGE-SINGLE-N", "IMAGE-GROUP-N")
_TIME1 = "the [time_filter_exact1] study of patient {patient_id} [time_filter_global1]"
_TIME2 = "the [time_filter_exact2] study of patient {patient_id} [time_filter_global2]"
# 2-image reference pairs: (index base, target words, compared words)
PAIRS = {"time-time": (2000, _TIME1, _TIME2), "time-previous": (2100, _TIME1, "the previous study"),
         "id-id": (2200, "the {study_id1} study", "the {study_id2} study"),
         "id-previous": (2300, "the {study_id1} study", "the previous study")}
# 2-image forms: (core text, embedded VQA template, kind). "attr": one attribute's presence in both studies
# (all four labels); "any" / "list": set operation over the two studies' VQA lists (no "still absent").
FORMS2 = (
    ("are there any ${category} that are ${comparison} in the ${object}", "base_9", "any"),
    ("is ${attribute} ${comparison} in the ${object}", "base_2", "attr"),
    ("are there any abnormality that are ${comparison} in the ${object}", "base_abn_2", "any"),
    ("are there any ${category} that are ${comparison}", "base_40", "any"),
    ("are there any abnormality that are ${comparison}", "base_abn_9", "any"),
    ("is ${attribute} ${comparison}", "base_33", "attr"),
    ("list all ${category} that are ${comparison} in the ${object}", "base_9", "list"),
    ("list all abnormality that are ${comparison} in the ${object}", "base_abn_2", "list"),
    ("list all ${category} that are ${comparison}", "base_40", "list"),
    ("list all abnormality that are ${comparison}", "base_abn_9", "list"),
    ("list all anatomical locations related to ${attribute} that are ${comparison}", "base_49", "list"),
    ("list all anatomical locations related to any ${category} that are ${comparison}", "base_66", "list"),
)
# N-image / group "indicating" predicates: (words, verify VQA template)
INDICATORS = (("${attribute} in the ${object}", "base_2"), ("any ${category} in the ${object}", "base_1"),
              ("any abnormality in the ${object}", "base_abn_1"), ("${attribute}", "base_33"),
              ("any ${category}", "base_30"), ("any abnormality", "base_abn_8"))
FORMS_N = {
    "since": (3000, "How many [unit_count] have passed since the [time_filter_exact1] time patient {patient_id} "
                    "had a chest X-ray study indicating {ind} [time_filter_global1]?"),
    "when": (3100, "When was the [time_filter_exact1] time that patient {patient_id} had a chest X-ray study "
                   "indicating {ind} [time_filter_global1]?"),
    "has": (3200, "Has {patient_id} had any chest X-ray study indicating {ind} [time_filter_global1]?"),
    "count": (3300, "Count the number of times that patient {patient_id} had chest X-ray studies indicating {ind} "
                    "[time_filter_global1]."),
    "group-count": (4000, "Count the number of patients who had any chest X-ray study indicating {ind} "
                          "[time_filter_global1]."),
    "group-list": (4100, "List the IDs of patients who had any chest X-ray study indicating {ind} "
                         "[time_filter_global1]."),
}
_VSLOT = re.compile(r"\$\{(\w+)\}")


def _vqa_args(vqa_key: str, values: dict) -> dict[str, str]:
    return {c: values[c] for c in get_template(vqa_key).columns}


def vqa_question(vqa_key: str, values: dict) -> str:
    """The func_vqa question: the plain template wording, lower-cased (what the oracle inverts)."""
    return render_question(vqa_key, _vqa_args(vqa_key, values)).lower()


def render(text: str, values: dict) -> str:
    """Fill every slot of a template text; lower-cased, spaces tidied. Tense placeholders follow global1."""
    def visual(m: re.Match) -> str:
        slot = m.group(1)
        if slot == "comparison":
            return values["comparison"]
        v = values[SLOT_COLUMNS[slot]]
        if slot.startswith("category"):
            return (CATEGORY_TEXT if text[:m.start()].lower().endswith("which ") else CATEGORY_PLURAL)[v]
        return v
    out = slots.tense(_VSLOT.sub(visual, text), values.get("global1"))
    for i in ("1", "2"):
        if f"[time_filter_exact{i}]" in out:
            out = out.replace(f"[time_filter_exact{i}]", values[f"exact{i}"])
        if f"[time_filter_global{i}]" in out:
            out = out.replace(f"[time_filter_global{i}]", values.get(f"global{i}", slots.TimeFilter()).nl)
    if "[time_filter_within]" in out:
        out = out.replace("[time_filter_within]", values["within"].nl)
    out = out.replace("[unit_count]", values.get("unit_count", "")).replace("[age_group]", values.get("age_group", ""))
    out = re.sub(r"\{(\w+)\}", lambda m: str(slots.GENDER.get(values[m.group(1)], values[m.group(1)])
                                              if m.group(1) == "gender" else values[m.group(1)]), out)
    out = re.sub(r"\s+", " ", out)
    return re.sub(r" ([,?.])", r"\1", out).strip().lower()


def indicator(vqa_key: str, values: dict, sid: str = "tb_cxr.study_id") -> tuple[str, str]:
    """(gold, NeuralSQL) conditions: the study ``sid`` shows what the verify template ``vqa_key`` asks."""
    gold = f"{gold_vqa(vqa_key, _vqa_args(vqa_key, values), sid)[1]} = 1"
    return gold, f'func_vqa("{vqa_question(vqa_key, values)}", {sid}) = true'


@dataclass(frozen=True)
class ImageTemplate:
    """One EHRXQA image-related template."""

    index: int
    scope: str  # one of IMAGE_SCOPES
    text: str  # paper wording with slots
    vqa_key: str  # the embedded MIMIC-CXR-VQA template
    ref: str  # SINGLE-1: time / id; SINGLE-2: a PAIRS key; N / GROUP: a FORMS_N key
    kind: str = ""  # SINGLE-2: attr / any / list

    @property
    def comparisons(self) -> tuple[str, ...]:
        return slots.COMPARISONS if self.kind == "attr" else slots.SET_COMPARISONS if self.kind else ()

    @property
    def one_row(self) -> bool:
        """The answer must be exactly one row: verify questions, "how many ... since", "when", 2-image
        attribute / "any" comparisons."""
        verify_one = self.scope == "IMAGE-SINGLE-1" and get_template(self.vqa_key).semantic_type == "verify"
        return verify_one or self.ref in ("since", "when", "has", "count", "group-count") or self.kind in ("attr", "any")

    def question(self, values: dict) -> str:
        return render(self.text, values)

    def references(self, values: dict) -> list[str]:
        """Study subqueries that must each resolve to exactly one study (distinct ones for SINGLE-2)."""
        if self.scope == "IMAGE-SINGLE-1":
            return [self._study(1, values)]
        if self.scope == "IMAGE-SINGLE-2":
            return [self._study(1, values), self._study(2, values)]
        return []

    def _study(self, which: int, v: dict) -> str:
        ref = self.ref if self.scope == "IMAGE-SINGLE-1" else self.ref.split("-")[which - 1]
        if ref == "time":
            return slots.by_time(v["patient_id"], v[f"exact{which}"], v.get(f"global{which}", slots.TimeFilter()))
        if ref == "id":
            return slots.by_id(v["study_id"] if self.scope == "IMAGE-SINGLE-1" else v[f"study_id{which}"])
        return slots.previous(self._study(1, v))

    def queries(self, values: dict) -> tuple[str, str]:
        """(gold SQL, NeuralSQL), both with the ``current_time`` placeholder."""
        build = {"IMAGE-SINGLE-1": self._one, "IMAGE-SINGLE-2": self._two}.get(self.scope, self._many)
        return build(values)

    def _one(self, v: dict) -> tuple[str, str]:
        s, qn = self._study(1, v), vqa_question(self.vqa_key, v)
        args = _vqa_args(self.vqa_key, v)
        kind, sql = gold_vqa(self.vqa_key, args, "t1.study_id")
        # a list answer: the names query about the referenced study; a verify answer: one row per study
        gold = gold_vqa(self.vqa_key, args, f"({s})")[1] if kind == "rows" else f"select {sql} from ({s}) as t1"
        return gold, f'select func_vqa("{qn}", t1.study_id) from ({s}) as t1'

    def _two(self, v: dict) -> tuple[str, str]:
        s1, s2, qn, c = self._study(1, v), self._study(2, v), vqa_question(self.vqa_key, v), v["comparison"]
        if c not in self.comparisons:
            raise ValueError(f"template {self.index}: comparison {c!r} not in {self.comparisons}")
        args = _vqa_args(self.vqa_key, v)
        if self.kind == "attr":
            want1, want2 = {"still present": (1, 1), "still absent": (0, 0), "newly detected": (1, 0),
                            "resolved": (0, 1)}[c]
            b1, b2 = gold_vqa(self.vqa_key, args, "t1.study_id")[1], gold_vqa(self.vqa_key, args, "t2.study_id")[1]
            tf = ("false", "true")
            gold = (f"select (select count(*) from ({s1}) as t1 where {b1} = {want1}) > 0 and "
                    f"(select count(*) from ({s2}) as t2 where {b2} = {want2}) > 0")
            neural = (f'select (select count(*) from ({s1}) as t1 where func_vqa("{qn}", t1.study_id) = '
                      f'{tf[want1]}) > 0 and (select count(*) from ({s2}) as t2 where func_vqa("{qn}", '
                      f't2.study_id) = {tf[want2]}) > 0')
            return gold, neural
        op, first = {"still present": ("intersect", 1), "newly detected": ("except", 1), "resolved": ("except", 2)}[c]
        g = {1: gold_vqa(self.vqa_key, args, f"({s1})")[1], 2: gold_vqa(self.vqa_key, args, f"({s2})")[1]}
        n = {1: f'select func_vqa("{qn}", t1.study_id) from ({s1}) as t1',
             2: f'select func_vqa("{qn}", t2.study_id) from ({s2}) as t2'}
        gold, neural = f"{g[first]} {op} {g[3 - first]}", f"{n[first]} {op} {n[3 - first]}"
        if self.kind == "any":
            gold, neural = (f"select count(*) > 0 from ({x})" for x in (gold, neural))
        return gold, neural

    def _many(self, v: dict) -> tuple[str, str]:
        group = self.scope == "IMAGE-GROUP-N"
        pid = None if group else int(v["patient_id"])
        flt = v.get("global1", slots.TimeFilter()).sql(pid)
        base = [] if group else [f"tb_cxr.subject_id = {pid}"]
        gold_p, neural_p = indicator(self.vqa_key, v)
        out = []
        for pred in (gold_p, neural_p):
            w = slots.where(*base, flt, pred)
            if self.ref in ("since", "when"):
                inner = (f"select tb_cxr.studydatetime from tb_cxr{w}"
                         + slots.exact_clause(v["exact1"], slots.COL, "tb_cxr.study_id"))
                if self.ref == "when":
                    out.append(inner)
                else:
                    unit = slots.UNIT_COUNT[v["unit_count"]]
                    out.append(f"select {unit} * (strftime('%J', current_time) - strftime('%J', t1.studydatetime)) "
                               f"from ({inner}) as t1")
            elif self.ref == "has":
                out.append(f"select count(*) > 0 from tb_cxr{w}")
            elif self.ref == "count":
                out.append(f"select count(distinct tb_cxr.study_id) from tb_cxr{w}")
            elif self.ref == "group-count":
                out.append(f"select count(distinct tb_cxr.subject_id) from tb_cxr{w}")
            else:
                out.append(f"select distinct tb_cxr.subject_id from tb_cxr{w}")
        return out[0], out[1]


def _outer_vqa_text(key: str) -> str:
    t = get_template(key).text.replace("abnormalities", "abnormality")  # the paper's C11 wording
    return t[0].lower() + t[1:]


def _build() -> tuple[ImageTemplate, ...]:
    out: list[ImageTemplate] = []
    size = {"ct_ratio_1": 46, "mt_ratio_1": 47}  # plane / gender (programs 41-46) are not EHRXQA templates
    for base, ref, head in ((1000, "time", f"Given {_TIME1}, "), (1100, "id", "Given the study {study_id}, ")):
        for key in SUPPORTED:
            off = size[key] if key in size else get_template(key).index - 1
            out.append(ImageTemplate(base + off, "IMAGE-SINGLE-1", head + _outer_vqa_text(key), key, ref))
    for ref, (base, target, compared) in PAIRS.items():
        for j, (core, key, kind) in enumerate(FORMS2):
            out.append(ImageTemplate(base + j, "IMAGE-SINGLE-2", f"Given {target}, {core} compared to {compared}?",
                                     key, ref, kind))
    for form, (base, text) in FORMS_N.items():
        scope = "IMAGE-GROUP-N" if form.startswith("group") else "IMAGE-SINGLE-N"
        for j, (ind, key) in enumerate(INDICATORS):
            out.append(ImageTemplate(base + j, scope, text.replace("{ind}", ind), key, form))
    return tuple(out)


IMAGE_TEMPLATES: tuple[ImageTemplate, ...] = _build()
