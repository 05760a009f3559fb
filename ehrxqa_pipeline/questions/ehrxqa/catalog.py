"""The 168 EHRXQA image-related templates (paper Table C11) as data, built compositionally.

A template = a study reference (paper Table C10) or a question form over many studies + one embedded
MIMIC-CXR-VQA template (``questions.mimic_cxr_vqa.templates``). Families and their indices (reference-builders.md 6.1):
- IMAGE-SINGLE-1 (84): 1000-1047 "given the [exact1] study of patient {patient_id} [global1], <vqa>" and
  1100-1147 "given the study {study_id}, <vqa>" -- VQA programs 1-40 at +(program-1), CTR at +46, MTR at +47;
- IMAGE-SINGLE-2 (48): 12 comparison forms x 4 reference pairs: 2000 time/time, 2100 time/previous,
  2200 id/id, 2300 id/previous;
- IMAGE-SINGLE-N (24): 6 "indicating" predicates x 3000 how many [unit_count] since, 3100 when, 3200 has,
  3300 count the number of times;
- IMAGE-GROUP-N (12): 6 predicates x 4000 count patients, 4100 list patient ids.

Texts are the published template list's, byte for byte (``text`` = q_tag, ``vqa_text`` = vqa_template;
tests/ehrxqa/test_published_templates.py): lower-case, EHRXQA's singular "abnormality", and "are there any
abnormality in the ${object}?" where an indicator or a comparison embeds "is the ${object} abnormal?".

Meaning (the published one): a 2-study yes/no comparison ("are there any ${category} that are ${comparison} in
the ${object} compared to ...?", "is ${attribute} ${comparison} ...?") asks its yes/no VQA question of both
studies, and the comparison label names the two answers (``YES_NO``: newly detected = yes in the target, no
in the compared study); a 2-study list comparison is a set operation over the two studies' lists.

``template.queries(values)`` -> (gold SQL over TB_CXR_PLUS + TB_CXR, NeuralSQL over TB_CXR with
func_vqa(question, study_id)) in the published NeuralSQL shapes (``neuralsql.shapes``): P1 for one study and
list comparisons, P3 for yes/no comparisons, P2 for N-study and group questions. ``template.question(values)``
-> the filled, lower-cased question; ``template.references(values)`` -> study subqueries that must each
resolve to one study for the item to be valid. ``values``: patient_id, study_id, study_id1, study_id2 (ints),
exact1 / exact2 ('first' / 'last'), global1 / global2 (``slots.TimeFilter``), unit_count ('days' / 'hours'),
comparison, and the VQA argument columns (object_1, attribute_1, category_1, ...). The func_vqa question is
``vqa_text`` filled (``render``), the exact wording the oracle inverts.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from ehrxqa_pipeline.questions.ehrxqa import slots
from ehrxqa_pipeline.questions.ehrxqa.vqa_gold import SUPPORTED, gold_vqa
from ehrxqa_pipeline.questions.mimic_cxr_vqa.templates import (EHRXQA_ANY_ABNORMALITY, EHRXQA_WORDING, SLOT_COLUMNS,
                                                     category_names, get_template)
from ehrxqa_pipeline.questions.wording import PLACEHOLDER, fill, placeholder_name

IMAGE_SCOPES = ("IMAGE-SINGLE-1", "IMAGE-SINGLE-2", "IMAGE-SINGLE-N", "IMAGE-GROUP-N")
_TIME1 = "the [time_filter_exact1] study of patient {patient_id} [time_filter_global1]"
_TIME2 = "the [time_filter_exact2] study of patient {patient_id} [time_filter_global2]"
# 2-image reference pairs: (index base, target words, compared words)
PAIRS = {"time-time": (2000, _TIME1, _TIME2), "time-previous": (2100, _TIME1, "the previous study"),
         "id-id": (2200, "the {study_id1} study", "the {study_id2} study"),
         "id-previous": (2300, "the {study_id1} study", "the previous study")}
# 2-image forms: (core text, embedded VQA template, kind, its EHRXQA wording where not the template's own).
# "yn": one yes/no question asked of both studies, the comparison label naming the (target, compared) answers
# (all four labels); "list": set operation over the two studies' VQA lists (no "still absent").
FORMS2 = (
    ("are there any ${category} that are ${comparison} in the ${object}", "base_1", "yn", ""),
    ("is ${attribute} ${comparison} in the ${object}", "base_2", "yn", ""),
    ("are there any abnormality that are ${comparison} in the ${object}", "base_abn_1", "yn", EHRXQA_ANY_ABNORMALITY),
    ("are there any ${category} that are ${comparison}", "base_30", "yn", ""),
    ("are there any abnormality that are ${comparison}", "base_abn_8", "yn", ""),
    ("is ${attribute} ${comparison}", "base_33", "yn", ""),
    ("list all ${category} that are ${comparison} in the ${object}", "base_9", "list", ""),
    ("list all abnormality that are ${comparison} in the ${object}", "base_abn_2", "list", ""),
    ("list all ${category} that are ${comparison}", "base_40", "list", ""),
    ("list all abnormality that are ${comparison}", "base_abn_9", "list", ""),
    ("list all anatomical locations related to ${attribute} that are ${comparison}", "base_49", "list", ""),
    ("list all anatomical locations related to any ${category} that are ${comparison}", "base_66", "list", ""),
)
# (target, compared) answers of the yes/no question that each comparison label names
YES_NO = {"still present": (1, 1), "still absent": (0, 0), "newly detected": (1, 0), "resolved": (0, 1)}
# N-image / group "indicating" predicates: (words, verify VQA template, its EHRXQA wording where not its own)
INDICATORS = (("${attribute} in the ${object}", "base_2", ""), ("any ${category} in the ${object}", "base_1", ""),
              ("any abnormality in the ${object}", "base_abn_1", EHRXQA_ANY_ABNORMALITY), ("${attribute}", "base_33", ""),
              ("any ${category}", "base_30", ""), ("any abnormality", "base_abn_8", ""))
FORMS_N = {
    "since": (3000, "how many [unit_count] have passed since the [time_filter_exact1] time patient {patient_id} "
                    "had a chest x-ray study indicating {ind} [time_filter_global1]?"),
    "when": (3100, "when was the [time_filter_exact1] time that patient {patient_id} had a chest x-ray study "
                   "indicating {ind} [time_filter_global1]?"),
    "has": (3200, "has {patient_id} had any chest x-ray study indicating {ind} [time_filter_global1]?"),
    "count": (3300, "count the number of times that patient {patient_id} had chest x-ray studies indicating {ind} "
                    "[time_filter_global1]."),
    "group-count": (4000, "count the number of patients who had any chest x-ray study indicating {ind} "
                          "[time_filter_global1]."),
    "group-list": (4100, "list the ids of patients who had any chest x-ray study indicating {ind} "
                         "[time_filter_global1]."),
}
# list answers of image questions are names (a set): stored sorted, so that an answer does not depend on the
# order a query plan or a VQA module happens to produce
SORTED = " order by 1"
_VSLOT = re.compile(r"\$\{(\w+)\}")


def _vqa_args(vqa_key: str, values: dict) -> dict[str, str]:
    return {c: values[c] for c in get_template(vqa_key).columns}


def vqa_question(vqa_text: str, values: dict) -> str:
    """The func_vqa question: an EHRXQA vqa template wording filled, lower-cased (what the oracle inverts)."""
    return render(vqa_text, values)


@functools.lru_cache(maxsize=4096)
def _placeholders(text: str) -> tuple[tuple[str, tuple, int], ...]:
    """(name, match groups, start) of every placeholder of a template text, once per text (every draw fills it)."""
    return tuple((placeholder_name(m), m.groups(), m.start()) for m in PLACEHOLDER.finditer(text))


def _words(name: str, groups: tuple, start: int, text: str, values: dict) -> str:
    """The words the placeholder ``name`` (match ``groups``) at ``start`` of ``text`` is filled with."""
    visual, bracket, database, verb = groups
    if visual:
        if visual == "comparison":
            return values["comparison"]
        v = values[SLOT_COLUMNS[visual]]
        return category_names(text[:start])[v] if visual.startswith("category") else v
    if verb:
        return slots.tense(verb, values.get("global1"))
    if database:
        return str(slots.GENDER.get(values[name], values[name]) if name == "gender" else values[name])
    which = re.fullmatch(r"time_filter_(exact|global|within)(\d?)", bracket)
    if which is None:  # unit_count, age_group and the operation slots of table templates
        return str(values.get(name, ""))
    kind, i = which.groups()
    if kind == "exact":
        return values[f"exact{i}"]
    return values["within"].nl if kind == "within" else values.get(f"global{i}", slots.TimeFilter()).nl


def slot_words(text: str, values: dict) -> dict[str, str]:
    """Placeholder name -> the words written for it in the question of ``text`` with ``values`` (the
    record's slot fills, stored when the question is sampled and used again to fill its paraphrases).
    Tense slots follow global1; a category reads singular after "which", else plural."""
    words: dict[str, str] = {}
    for name, groups, start in _placeholders(text):
        if name not in words:
            words[name] = _words(name, groups, start, text, values)
    return words


def render(text: str, values: dict) -> str:
    """Fill every slot of a template text; lower-cased, spaces tidied."""
    return fill(text, slot_words(text, values))


def indicator(vqa_key: str, vqa_text: str, values: dict, sid: str = "t1.study_id") -> tuple[str, str]:
    """(gold, NeuralSQL) conditions: the study ``sid`` shows what the verify template ``vqa_key`` asks."""
    gold = f"{gold_vqa(vqa_key, _vqa_args(vqa_key, values), sid)[1]} = 1"
    return gold, f'func_vqa("{vqa_question(vqa_text, values)}", {sid}) = true'


def over_studies(select: str, candidates: str, predicate: str, tail: str = "") -> str:
    """``select ... from (candidates) as t1 where predicate [tail]``: the published NeuralSQL way of filtering
    studies by a VQA predicate (func_vqa only over a derived table ``t1``, never in a WHERE over tb_cxr)."""
    return f"select {select} from ({candidates}) as t1 where {predicate}{tail}"


@dataclass(frozen=True)
class ImageTemplate:
    """One EHRXQA image-related template."""

    index: int
    scope: str  # one of IMAGE_SCOPES
    text: str  # published wording with slots (the record's q_tag)
    vqa_key: str  # the embedded MIMIC-CXR-VQA template (its meaning)
    ref: str  # SINGLE-1: time / id; SINGLE-2: a PAIRS key; N / GROUP: a FORMS_N key
    kind: str = ""  # SINGLE-2: yn / list
    wording: str = ""  # the published vqa_template where it is not EHRXQA_WORDING[vqa_key]

    @property
    def vqa_text(self) -> str:
        """The published vqa_template: the func_vqa question before its slots are filled."""
        return self.wording or EHRXQA_WORDING[self.vqa_key]

    @property
    def comparisons(self) -> tuple[str, ...]:
        return slots.COMPARISONS if self.kind == "yn" else slots.SET_COMPARISONS if self.kind else ()

    @property
    def one_row(self) -> bool:
        """The answer must be exactly one row: verify questions, "how many ... since", "when", 2-image
        yes/no comparisons."""
        verify_one = self.scope == "IMAGE-SINGLE-1" and get_template(self.vqa_key).semantic_type == "verify"
        return verify_one or self.ref in ("since", "when", "has", "count", "group-count") or self.kind == "yn"

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
        s, qn = self._study(1, v), vqa_question(self.vqa_text, v)
        args = _vqa_args(self.vqa_key, v)
        kind, sql = gold_vqa(self.vqa_key, args, "t1.study_id")
        # a list answer: the names query about the referenced study, sorted; a verify answer: one row per study
        if kind == "rows":
            gold = gold_vqa(self.vqa_key, args, f"({s})")[1] + SORTED
        else:
            gold = f"select {sql} from ({s}) as t1"
        return gold, f'select func_vqa("{qn}", t1.study_id) from ({s}) as t1'

    def _two(self, v: dict) -> tuple[str, str]:
        s1, s2, qn, c = self._study(1, v), self._study(2, v), vqa_question(self.vqa_text, v), v["comparison"]
        if c not in self.comparisons:
            raise ValueError(f"template {self.index}: comparison {c!r} not in {self.comparisons}")
        args = _vqa_args(self.vqa_key, v)
        if self.kind == "yn":  # (select count(*) > 0 ...) and (select count(*) > 0 ...), one side per study
            gold, neural = [], []
            for k, study, want in ((1, s1, YES_NO[c][0]), (2, s2, YES_NO[c][1])):
                sid = f"t{k}.study_id"
                head = f"select count(*) > 0 from ({study}) as t{k} where "
                gold.append(f"({head}{gold_vqa(self.vqa_key, args, sid)[1]} = {want})")
                neural.append(f'({head}func_vqa("{qn}", {sid}) = {"true" if want else "false"})')
            return "select " + " and ".join(gold), "select " + " and ".join(neural)
        op, first = {"still present": ("intersect", 1), "newly detected": ("except", 1), "resolved": ("except", 2)}[c]
        g = {1: gold_vqa(self.vqa_key, args, f"({s1})")[1], 2: gold_vqa(self.vqa_key, args, f"({s2})")[1]}
        n = {1: f'select func_vqa("{qn}", t1.study_id) from ({s1}) as t1',
             2: f'select func_vqa("{qn}", t2.study_id) from ({s2}) as t2'}
        return f"{g[first]} {op} {g[3 - first]}{SORTED}", f"{n[first]} {op} {n[3 - first]}"

    def _many(self, v: dict) -> tuple[str, str]:
        group = self.scope == "IMAGE-GROUP-N"
        pid = None if group else int(v["patient_id"])
        cond = slots.where(*([] if group else [f"tb_cxr.subject_id = {pid}"]), v.get("global1", slots.TimeFilter()).sql(pid))
        timed = self.ref in ("since", "when")
        candidates = f"select {'tb_cxr.study_id, tb_cxr.studydatetime' if timed else '*'} from tb_cxr{cond}"
        tail = " order by t1.subject_id" if self.ref == "group-list" else ""  # a set of patients: sorted
        if timed:
            order, offset = slots.EXACT[v["exact1"]]
            tail = f" order by t1.studydatetime {order} limit 1" + (f" offset {offset}" if offset else "")
        select = {"since": f"{slots.UNIT_COUNT[v.get('unit_count', 'days')]} * (strftime('%J', current_time) - "
                           "strftime('%J', t1.studydatetime))",
                  "when": "t1.studydatetime", "has": "count(*) > 0", "count": "count(distinct t1.study_id)",
                  "group-count": "count(distinct t1.subject_id)", "group-list": "distinct t1.subject_id"}[self.ref]
        gold, neural = (over_studies(select, candidates, p, tail) for p in indicator(self.vqa_key, self.vqa_text, v))
        return gold, neural


def _build() -> tuple[ImageTemplate, ...]:
    out: list[ImageTemplate] = []
    size = {"ct_ratio_1": 46, "mt_ratio_1": 47}  # plane / gender (programs 41-46) are not EHRXQA templates
    for base, ref, head in ((1000, "time", f"given {_TIME1}, "), (1100, "id", "given the study {study_id}, ")):
        for key in SUPPORTED:
            off = size[key] if key in size else get_template(key).index - 1
            out.append(ImageTemplate(base + off, "IMAGE-SINGLE-1", head + EHRXQA_WORDING[key], key, ref))
    for ref, (base, target, compared) in PAIRS.items():
        for j, (core, key, kind, wording) in enumerate(FORMS2):
            out.append(ImageTemplate(base + j, "IMAGE-SINGLE-2", f"given {target}, {core} compared to {compared}?",
                                     key, ref, kind, wording))
    for form, (base, text) in FORMS_N.items():
        scope = "IMAGE-GROUP-N" if form.startswith("group") else "IMAGE-SINGLE-N"
        for j, (ind, key, wording) in enumerate(INDICATORS):
            out.append(ImageTemplate(base + j, scope, text.replace("{ind}", ind), key, form, wording=wording))
    return tuple(out)


IMAGE_TEMPLATES: tuple[ImageTemplate, ...] = _build()
