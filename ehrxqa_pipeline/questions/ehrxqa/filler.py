"""Value filler: instantiates image templates with values drawn from an EHRXQA SQLite database.

``ImageFiller(conn)`` reads, once, the studies of TB_CXR (patient, study, time, hadm_id) and the
(object, attribute, category) pool and the positives of TB_CXR_PLUS; ``conn`` must see both tables (one
database, or the answer sheet ATTACHed). ``fill(template, rng)`` draws values for one template:
- a patient with >= 1 study (SINGLE-1 / SINGLE-N), >= 2 studies (SINGLE-2); study ids of that patient;
- time filters anchored at one of the patient's studies (so the reference usually resolves);
- ontology-valid visual values: every (object, attribute) pair in the pool, every (object, category) with a
  pool pair, the category of a choose template = its attributes' category, two values of a kind distinct;
  half the draws start from a positive label of the patient's studies, so answers are not all negative;
- a comparison label allowed for the template (``ImageTemplate.comparisons``).
It keeps a draw only when every study reference resolves to exactly one study (for 2-image, the compared
study strictly earlier than the target), the gold SQL executes without error, and the answer is valid
(no NULL; exactly one row for verify, "how many ... since" and "when" questions).
``fill_items(conn, seed)`` fills every template with its own generator
``rng.generator(seed, "ehrxqa.image.<index>")``; ``instantiate(template, values)`` builds one item from given
values (same validity rules).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

import numpy as np

from ehrxqa_pipeline.questions.ehrxqa.catalog import CATALOG, ImageTemplate
from ehrxqa_pipeline.questions.ehrxqa.slots import EXACT, UNIT_COUNT, TimeFilter
from ehrxqa_pipeline.questions.neuralsql import normalise_rows, postprocess_query
from ehrxqa_pipeline.questions.vqa_templates import get_template
from ehrxqa_pipeline.rng import generator

NOW_YEAR, NOW_MONTH = 2105, 12


@dataclass
class FilledItem:
    """One instantiated template: question, both queries and the gold answer."""

    template: ImageTemplate
    values: dict
    question: str
    gold_sql: str
    neural_sql: str
    answer: list
    studies: list[int] = field(default_factory=list)  # the resolved study references

    def record(self) -> dict:
        """The EHRXQA record fields this step fills (reference-builders.md 6.7); ``_gold_program`` kept."""
        v = self.values
        tags = [v[k].tag if k in v else "" for k in ("global1", "global2")] + [""] + \
               [f"exact-{v[k]}" if k in v else "" for k in ("exact1", "exact2")]
        vtag = {kind: [v[c] for c in (f"{kind}_1", f"{kind}_2") if c in v] for kind in ("object", "attribute",
                                                                                          "category")}
        if "comparison" in v:
            vtag["comparison"] = [v["comparison"]]
        return {"db_id": "mimic_iv_cxr", "template": self.question, "query": self.neural_sql.lower(),
                "value": {k: v[k] for k in ("patient_id", "study_id", "study_id1", "study_id2") if k in v},
                "q_tag": self.template.text, "t_tag": tags,
                "o_tag": {"unit_count": v["unit_count"]} if "unit_count" in v else {}, "v_tag": vtag,
                "template_index": self.template.index, "scope": self.template.scope,
                "_gold_program": self.gold_sql.lower(), "answer": self.answer}


def run_sql(conn: sqlite3.Connection, sql: str) -> list:
    """Normalised answer of a plain SQL query (``current_time`` substituted)."""
    return normalise_rows(conn.execute(postprocess_query(sql)).fetchall())


class ImageFiller:
    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn
        self.studies = conn.execute("select subject_id, study_id, studydatetime, hadm_id from tb_cxr "
                                    "order by subject_id, studydatetime, study_id").fetchall()
        self.time_of = {row[1]: row[2] for row in self.studies}
        self.by_patient: dict[int, list[tuple]] = {}
        for row in self.studies:
            self.by_patient.setdefault(row[0], []).append(row)
        self.pairs = conn.execute("select distinct object, attribute, category from tb_cxr_plus where object is not "
                                  "null and attribute is not null and category is not null "
                                  "order by object, attribute").fetchall()
        self.category_of = {a: c for _, a, c in self.pairs}
        self.positives: dict[int, list[tuple]] = {}
        for sid, o, a, c in conn.execute("select distinct study_id, object, attribute, category from tb_cxr_plus "
                                         "where relation = 1 order by study_id, object, attribute"):
            self.positives.setdefault(sid, []).append((o, a, c))

    # -- visual values -----------------------------------------------------------------------------------
    def _valid(self, o=(), a=(), c=()) -> bool:
        pair = {(x, y) for x, y, _ in self.pairs}
        objcat = {(x, z) for x, _, z in self.pairs}
        return all((x, y) in pair for x in o for y in a) and all((x, z) in objcat for x in o for z in c)

    def visual(self, vqa_key: str, rng: np.random.Generator, studies: list[int], tries: int = 100) -> dict | None:
        cols = get_template(vqa_key).columns
        objects = sorted({o for o, _, _ in self.pairs})
        attributes = sorted({a for _, a, _ in self.pairs})
        categories = sorted({c for _, _, c in self.pairs})
        seeds = [p for s in studies for p in self.positives.get(s, [])]
        pick = lambda xs: xs[int(rng.integers(len(xs)))] if xs else None  # noqa: E731
        for _ in range(tries):
            seed = pick(seeds) if seeds and rng.random() < 0.5 else None
            v: dict[str, str] = {}
            for kind, pool, pos in (("object", objects, 0), ("attribute", attributes, 1), ("category", categories, 2)):
                for i, col in enumerate((f"{kind}_1", f"{kind}_2")):
                    if col not in cols:
                        continue
                    if kind == "category" and "attribute_1" in v:
                        v[col] = self.category_of[v["attribute_1"]]
                        continue
                    v[col] = seed[pos] if seed is not None and i == 0 else pick(pool)
            if any(v.get(f"{k}_1") is not None and v.get(f"{k}_1") == v.get(f"{k}_2")
                   for k in ("object", "attribute", "category")):
                continue
            objs = [v[c] for c in ("object_1", "object_2") if c in v]
            attrs = [v[c] for c in ("attribute_1", "attribute_2") if c in v]
            cats = [v[c] for c in ("category_1", "category_2") if c in v]
            if "category_1" in cols and attrs and any(self.category_of[x] != cats[0] for x in attrs):
                continue  # choose templates: both offered attributes of the asked category
            if self._valid(objs, attrs, [] if attrs else cats):
                return v
        return None

    # -- time filters ------------------------------------------------------------------------------------
    def time_filter(self, rng: np.random.Generator, anchor: tuple, patient: bool = True) -> TimeFilter:
        """A global filter that contains the anchor study's time (hospital-visit ones may not)."""
        t = anchor[2]
        y, m = int(t[:4]), int(t[5:7])
        days = self.conn.execute(f"select cast(julianday('{NOW_YEAR}-12-31 23:59:00') - julianday(?) as integer)",
                                 [t]).fetchone()[0]
        options = [TimeFilter(), TimeFilter("abs-year-in", t[:4]), TimeFilter("abs-year-since", t[:4]),
                   TimeFilter("abs-year-until", t[:4]), TimeFilter("abs-month-in", t[:7]),
                   TimeFilter("abs-day-in", t[:10]), TimeFilter("rel-year-since", NOW_YEAR - y + 1),
                   TimeFilter("rel-month-since", (NOW_YEAR - y) * 12 + NOW_MONTH - m + 1),
                   TimeFilter("rel-day-since", days + 1)]
        if NOW_YEAR - y in (0, 1):
            options.append(TimeFilter("rel-year-this" if y == NOW_YEAR else "rel-year-last"))
        if (NOW_YEAR - y) * 12 + NOW_MONTH - m in (0, 1):
            options.append(TimeFilter("rel-month-this" if (y, m) == (NOW_YEAR, NOW_MONTH) else "rel-month-last"))
        if patient and anchor[3] is not None:
            options += [TimeFilter("rel-hosp-cur"), TimeFilter("rel-hosp-first"), TimeFilter("rel-hosp-last")]
        return options[int(rng.integers(len(options)))]

    # -- one draw ----------------------------------------------------------------------------------------
    def _draw(self, t: ImageTemplate, rng: np.random.Generator) -> dict | None:
        need = 2 if t.scope == "IMAGE-SINGLE-2" else 1
        patients = [p for p, rows in self.by_patient.items() if len(rows) >= need]
        if not patients:
            return None
        pid = patients[int(rng.integers(len(patients)))]
        rows = self.by_patient[pid]
        v: dict = {}
        if t.scope == "IMAGE-GROUP-N":
            anchor = self.studies[int(rng.integers(len(self.studies)))]
            v["global1"] = self.time_filter(rng, anchor, patient=False)
            look = [anchor[1]]
        elif t.scope == "IMAGE-SINGLE-2":
            i, j = sorted(rng.choice(len(rows), size=2, replace=False).tolist())
            if t.ref.endswith("previous"):
                j = max(j, 1)
                i = j - 1
            earlier, later = rows[i], rows[j]
            v.update(patient_id=pid, study_id1=later[1], study_id2=earlier[1],
                     comparison=t.comparisons[int(rng.integers(len(t.comparisons)))])
            for k, anchor in (("1", later), ("2", earlier)):
                v[f"exact{k}"] = list(EXACT)[int(rng.integers(len(EXACT)))]
                v[f"global{k}"] = self.time_filter(rng, anchor)
            look = [earlier[1], later[1]]
        else:
            anchor = rows[int(rng.integers(len(rows)))]
            v.update(patient_id=pid, study_id=anchor[1], exact1=list(EXACT)[int(rng.integers(len(EXACT)))],
                     global1=self.time_filter(rng, anchor))
            if t.ref == "since":
                v["unit_count"] = list(UNIT_COUNT)[int(rng.integers(len(UNIT_COUNT)))]
            look = [r[1] for r in rows] if t.scope == "IMAGE-SINGLE-N" else [anchor[1]]
        visual = self.visual(t.vqa_key, rng, look)
        if visual is None:
            return None
        return {**v, **visual}

    def instantiate(self, t: ImageTemplate, v: dict) -> FilledItem | None:
        """The item of template ``t`` with values ``v``, or None when the values give no valid item."""
        studies = []
        for ref in t.references(v):
            got = [r[0] for r in self.conn.execute(postprocess_query(ref)).fetchall()]
            if len(got) != 1:
                return None
            studies.append(got[0])
        if len(studies) == 2:  # 2-image: the compared study strictly before the target study
            t1, t2 = (self.time_of[s] for s in studies)
            if not t2 < t1:
                return None
        gold, neural = t.queries(v)
        try:
            answer = run_sql(self.conn, gold)
        except sqlite3.Error:
            return None
        if any(a is None for a in answer):
            return None
        verify_one = t.scope == "IMAGE-SINGLE-1" and get_template(t.vqa_key).semantic_type == "verify"
        if (verify_one or t.ref in ("since", "when") or t.kind in ("attr", "any")) and len(answer) != 1:
            return None
        return FilledItem(t, v, t.question(v), gold, neural, answer, studies)

    def fill(self, template: ImageTemplate, rng: np.random.Generator, tries: int = 40) -> FilledItem | None:
        """One valid item of ``template``, or None when ``tries`` draws all failed."""
        for _ in range(tries):
            v = self._draw(template, rng)
            item = None if v is None else self.instantiate(template, v)
            if item is not None:
                return item
        return None


def fill_items(conn: sqlite3.Connection, seed: int, templates: tuple[ImageTemplate, ...] = CATALOG,
               per_template: int = 1) -> list[FilledItem]:
    """Up to ``per_template`` items per template (duplicates of a question dropped), deterministic in seed."""
    filler, out = ImageFiller(conn), []
    for t in templates:
        rng, seen = generator(seed, f"ehrxqa.image.{t.index}"), set()
        for _ in range(per_template):
            item = filler.fill(t, rng)
            if item is not None and item.question not in seen:
                seen.add(item.question)
                out.append(item)
    return out
