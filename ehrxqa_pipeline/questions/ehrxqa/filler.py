"""Value filler: instantiates EHRXQA image and image+table templates with values drawn from a database.

``ImageFiller(conn)`` reads, once, the studies of TB_CXR (patient, study, time, hadm_id); on first use the
(object, attribute, category) pool and the positives of TB_CXR_PLUS, and for image+table templates each
patient's diagnoses, procedures and prescriptions (name, time, hadm_id), admission ages and genders. For image
and image+table templates ``conn`` must see TB_CXR_PLUS too (one database, or the answer sheet ATTACHed); table
templates read the MIMIC-IV tables only. ``fill(template, rng)``
draws values for one template (paper section 4.1.4, stages 1-4):
- a patient with >= 1 study (>= 2 for 2-image templates; >= 1 event of the kind for image+table); study ids
  and event names of that patient;
- time filters anchored at one of the patient's studies or events (``time_filter``: every non-visit filter
  offered contains the anchor, checked in SQLite), within filters that usually cover the anchor pair's gap,
  age groups and genders usually those of the anchor study's admission / patient;
- ontology-valid visual values: every (object, attribute) pair in the pool, every (object, category) with a
  pool pair, the category of a choose template = its attributes' category, two values of a kind distinct;
  half the draws start from a positive label of the anchor studies, so answers are not all negative;
- a comparison label allowed for the template (``ImageTemplate.comparisons``).
It keeps a draw only when every study reference resolves to exactly one study (for 2-image, the compared
study strictly earlier than the target), the gold SQL executes without error, and the answer is valid
(no NULL; exactly one row where ``template.one_row``).
What the filler keeps between draws and templates is kept through its ``trace`` (``reads.TableReads``), which
says which tables each template's draws read (the sampling memo's key).
``fill_items(conn, seed)`` fills every template with its own generator
``rng.generator(seed, "ehrxqa.image.<index>")``; ``instantiate(template, values)`` builds one item from given
values (same validity rules).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
import numpy as np

from ehrxqa_pipeline.questions.ehrxqa.item import FilledItem
from ehrxqa_pipeline.questions.ehrxqa.multimodal import EVENTS
from ehrxqa_pipeline.questions.ehrxqa.reads import TableReads, cached_read
from ehrxqa_pipeline.questions.ehrxqa.registry import CATALOG
from ehrxqa_pipeline.questions.ehrxqa.slots import AGE_GROUP, IMAGE_EXACT, UNIT_COUNT, TimeFilter, WithinFilter
from ehrxqa_pipeline.questions.ehrxqa.table_draws import draw_table
from ehrxqa_pipeline.questions.neuralsql import normalise_rows, postprocess_query
from ehrxqa_pipeline.questions.mimic_cxr_vqa.templates import get_template
from ehrxqa_pipeline.rng import generator

__all__ = ["FilledItem", "ImageFiller", "fill_items", "run_sql"]
NOW_YEAR, NOW_MONTH, NOW_DAY = 2105, 12, 31
_EVENT_SQL = {
    "diagnoses_icd": "select d.subject_id, dd.long_title, d.charttime, d.hadm_id from diagnoses_icd d join "
                     "d_icd_diagnoses dd on dd.icd_code = d.icd_code order by 1, 3, 2",
    "procedures_icd": "select d.subject_id, dd.long_title, d.charttime, d.hadm_id from procedures_icd d join "
                      "d_icd_procedures dd on dd.icd_code = d.icd_code order by 1, 3, 2",
    "prescriptions": "select subject_id, drug, starttime, hadm_id from prescriptions order by 1, 3, 2",
}


def run_sql(conn: sqlite3.Connection, sql: str) -> list:
    """Normalised answer of a plain SQL query (``current_time`` substituted)."""
    return normalise_rows(conn.execute(postprocess_query(sql)).fetchall())


def _pick(rng: np.random.Generator, xs):
    return xs[int(rng.integers(len(xs)))] if len(xs) else None


def _age_group(age: int) -> str | None:
    return "60 or above" if age >= 60 else f"{age // 10 * 10}s" if age >= 20 else None


class ImageFiller:
    def __init__(self, conn: sqlite3.Connection):
        self.trace = TableReads(conn)  # what each template's draws read (``reads``)
        self.conn = self.trace.conn  # ``conn``, counting the tables each statement names
        with self.trace.frame() as read:
            self.studies = self.conn.execute("select subject_id, study_id, studydatetime, hadm_id from tb_cxr "
                                             "order by subject_id, studydatetime, study_id").fetchall()
        self.read_at_start = frozenset(read)  # read for every template
        self.time_of = {row[1]: row[2] for row in self.studies}
        self.by_patient: dict[int, list[tuple]] = {}
        for row in self.studies:
            self.by_patient.setdefault(row[0], []).append(row)
        self._last_answer: tuple[str, list, frozenset] | None = None  # (gold SQL, its answer, tables): ``answer``

    def answer(self, sql: str) -> list:
        """``run_sql(self.conn, sql)``, run once for two calls in a row with the same ``sql``: a list template's
        draw runs its gold SQL to see that the answer is not empty (``table_draws.draw_table``), then
        ``instantiate`` needs the same answer (running it twice was 40 % of the table templates' sampling)."""
        if self._last_answer is None or self._last_answer[0] != sql:
            with self.trace.frame() as read:
                answer = run_sql(self.conn, sql)
            self._last_answer = (sql, answer, frozenset(read))
        self.trace.note(self._last_answer[2])
        return list(self._last_answer[1])  # each caller its own list

    # -- the answer sheet (TB_CXR_PLUS), read on first use: table templates never read it ---------------------
    @cached_read
    def pairs(self) -> list[tuple]:
        """The (object, attribute, category) pool."""
        return self.conn.execute("select distinct object, attribute, category from tb_cxr_plus where object is not "
                                 "null and attribute is not null and category is not null "
                                 "order by object, attribute").fetchall()

    @cached_read
    def category_of(self) -> dict[str, str]:
        return {a: c for _, a, c in self.pairs}

    @cached_read
    def positives(self) -> dict[int, list[tuple]]:
        """study id -> its positive (object, attribute, category) labels."""
        out: dict[int, list[tuple]] = {}
        for sid, o, a, c in self.conn.execute("select distinct study_id, object, attribute, category from "
                                              "tb_cxr_plus where relation = 1 order by study_id, object, attribute"):
            out.setdefault(sid, []).append((o, a, c))
        return out

    # -- table events (image+table templates), read on first use -------------------------------------------
    @cached_read
    def events(self) -> dict[str, dict[int, list[tuple]]]:
        """table -> patient -> [(name, time, hadm_id)] ordered by time, for the patients with studies."""
        out: dict[str, dict[int, list[tuple]]] = {}
        for table, sql in _EVENT_SQL.items():
            per: dict[int, list[tuple]] = {}
            for subject, name, time, hadm in self.conn.execute(sql):
                if subject in self.by_patient:
                    per.setdefault(subject, []).append((name, time, hadm))
            out[table] = per
        return out

    @cached_read
    def age_of(self) -> dict[int, int]:
        return dict(self.conn.execute("select hadm_id, age from admissions where age is not null"))

    @cached_read
    def gender_of(self) -> dict[int, str]:
        return dict(self.conn.execute("select subject_id, gender from patients"))

    # -- visual values -----------------------------------------------------------------------------------
    @cached_read
    def _vocab(self) -> tuple[set, set, list[str], list[str], list[str]]:
        """(object, attribute) and (object, category) pairs of the label pool, and its sorted objects,
        attributes and categories: what every visual draw consults (built once, not per draw)."""
        return ({(x, y) for x, y, _ in self.pairs}, {(x, z) for x, _, z in self.pairs},
                sorted({o for o, _, _ in self.pairs}), sorted({a for _, a, _ in self.pairs}),
                sorted({c for _, _, c in self.pairs}))

    def _valid(self, o=(), a=(), c=()) -> bool:
        pair, objcat = self._vocab[:2]
        return all((x, y) in pair for x in o for y in a) and all((x, z) in objcat for x in o for z in c)

    def visual(self, vqa_key: str, rng: np.random.Generator, studies: list[int], tries: int = 100) -> dict | None:
        cols = get_template(vqa_key).columns
        objects, attributes, categories = self._vocab[2:]
        category_of = self.category_of
        seeds = [p for s in studies for p in self.positives.get(s, [])]
        for _ in range(tries):
            seed = _pick(rng, seeds) if seeds and rng.random() < 0.5 else None
            v: dict[str, str] = {}
            for kind, pool, pos in (("object", objects, 0), ("attribute", attributes, 1), ("category", categories, 2)):
                for i, col in enumerate((f"{kind}_1", f"{kind}_2")):
                    if col not in cols:
                        continue
                    if kind == "category" and "attribute_1" in v:
                        v[col] = category_of[v["attribute_1"]]
                        continue
                    v[col] = seed[pos] if seed is not None and i == 0 else _pick(rng, pool)
            if any(v.get(f"{k}_1") is not None and v.get(f"{k}_1") == v.get(f"{k}_2")
                   for k in ("object", "attribute", "category")):
                continue
            objs = [v[c] for c in ("object_1", "object_2") if c in v]
            attrs = [v[c] for c in ("attribute_1", "attribute_2") if c in v]
            cats = [v[c] for c in ("category_1", "category_2") if c in v]
            if "category_1" in cols and attrs and any(category_of[x] != cats[0] for x in attrs):
                continue  # choose templates: both offered attributes of the asked category
            if self._valid(objs, attrs, [] if attrs else cats):
                return v
        return None

    # -- time filters ------------------------------------------------------------------------------------
    def holding(self, filters: Sequence[TimeFilter], time: str) -> list[TimeFilter]:
        """Those of the (non-visit) ``filters`` that hold for an event at ``time``, in their order: each one's
        condition evaluated by SQLite, all in one statement (asked once per time, through
        ``filters_containing``)."""
        literal = f"'{time}'"
        conditions = [f"({flt.sql(None, column=literal) or '1'})" for flt in filters]
        held = self.conn.execute(postprocess_query(f"select {', '.join(conditions)}")).fetchone()
        return [flt for flt, value in zip(filters, held) if value]

    def time_filter(self, rng: np.random.Generator, anchor_time: str, hadm_id: int | None = None,
                    patient: bool = True, allow_null: bool = True) -> TimeFilter:
        """A global filter containing ``anchor_time`` (visit filters, offered when the anchor lies in an
        admission of a single patient, may not contain it)."""
        options = list(self.filters_containing(anchor_time))
        if allow_null:
            options.append(TimeFilter())
        if patient and hadm_id is not None:
            options += [TimeFilter("rel-hosp-cur"), TimeFilter("rel-hosp-first"), TimeFilter("rel-hosp-last")]
        return _pick(rng, options)

    def filters_containing(self, t: str) -> tuple[TimeFilter, ...]:
        """The absolute, relative and mixed filters that contain an event at ``t``, in a fixed order (worked out
        once per time: a template's draws come back to the same studies and events)."""
        return self.trace.cached(("filters_containing", t), lambda: tuple(self._filters_containing(t)))

    def _filters_containing(self, t: str) -> list[TimeFilter]:
        y, m = int(t[:4]), int(t[5:7])
        years, months = NOW_YEAR - y, (NOW_YEAR - y) * 12 + NOW_MONTH - m
        days = int(self.conn.execute(f"select julianday('{NOW_YEAR}-12-31 23:59:00') - julianday(?)", [t]).fetchone()[0])
        options = [TimeFilter(f"abs-{unit}-{rel}", t[:n]) for unit, n in (("year", 4), ("month", 7), ("day", 10))
                   for rel in ("in", "since", "until")]
        options += [TimeFilter("rel-year-since", years + 1), TimeFilter("rel-month-since", months + 1),
                    TimeFilter("rel-day-since", days + 1), TimeFilter("rel-year-until", max(years, 1)),
                    TimeFilter("rel-month-until", max(months, 1)), TimeFilter("rel-day-until", max(days, 1))]
        for rel, back in (("this", 0), ("last", 1)):
            options += [TimeFilter(f"rel-year-{rel}"), TimeFilter(f"rel-month-{rel}"), TimeFilter(f"rel-day-{rel}"),
                        TimeFilter(f"mix-month-{rel}_year", t[5:7]), TimeFilter(f"mix-day-{rel}_year", t[5:10]),
                        TimeFilter(f"mix-day-{rel}_month", t[8:10])]
        return self.holding(options, t)

    def within(self, rng: np.random.Generator, t1: str, t2: str) -> WithinFilter:
        """A within filter that usually (not always) holds for the earlier time t1 and the later t2."""
        gap = self.conn.execute("select julianday(?) - julianday(?)", [t2, t1]).fetchone()[0]
        n_day = max(1, int(np.ceil(gap)) if gap > 0 and rng.random() < 0.7 else int(rng.integers(1, 8)))
        n_month = max(1, int(np.ceil(gap / 30)) if gap > 0 and rng.random() < 0.7 else int(rng.integers(1, 4)))
        return _pick(rng, [WithinFilter("within-hosp"), WithinFilter("within-month"),
                           WithinFilter("within-n_day", n_day), WithinFilter("within-n_month", n_month)])

    # -- draws -------------------------------------------------------------------------------------------
    def _draw(self, t, rng: np.random.Generator) -> dict | None:
        if t.scope.startswith("TABLE"):
            return draw_table(self, t, rng)
        if t.scope.startswith("MULTIMODAL"):
            return self._draw_multimodal(t, rng)
        need = 2 if t.scope == "IMAGE-SINGLE-2" else 1
        patients = [p for p, rows in self.by_patient.items() if len(rows) >= need]
        if not patients:
            return None
        pid = _pick(rng, patients)
        rows = self.by_patient[pid]
        v: dict = {}
        if t.scope == "IMAGE-GROUP-N":
            anchor = _pick(rng, self.studies)
            v["global1"] = self.time_filter(rng, anchor[2], patient=False)
            look = [anchor[1]]
        elif t.scope == "IMAGE-SINGLE-2":
            i, j = sorted(rng.choice(len(rows), size=2, replace=False).tolist())
            if t.ref.endswith("previous"):
                j = max(j, 1)
                i = j - 1
            earlier, later = rows[i], rows[j]
            v.update(patient_id=pid, study_id1=later[1], study_id2=earlier[1],
                     comparison=_pick(rng, t.comparisons))
            for k, anchor in (("1", later), ("2", earlier)):
                v[f"exact{k}"] = _pick(rng, IMAGE_EXACT)
                v[f"global{k}"] = self.time_filter(rng, anchor[2], anchor[3])
            look = [earlier[1], later[1]]
        else:
            anchor = _pick(rng, rows)
            v.update(patient_id=pid, study_id=anchor[1], exact1=_pick(rng, IMAGE_EXACT),
                     global1=self.time_filter(rng, anchor[2], anchor[3]))
            if t.ref == "since":
                v["unit_count"] = _pick(rng, list(UNIT_COUNT))
            look = [r[1] for r in rows] if t.scope == "IMAGE-SINGLE-N" else [anchor[1]]
        visual = self.visual(t.vqa_key, rng, look)
        return None if visual is None else {**v, **visual}

    def _draw_multimodal(self, t, rng: np.random.Generator) -> dict | None:
        if t.scope == "MULTIMODAL-GROUP":
            subject, sid, time, hadm = _pick(rng, self.studies)
            age = _age_group(self.age_of.get(hadm, -1)) if hadm is not None else None
            v = {"global1": self.time_filter(rng, time, patient=False),
                 "age_group": age if age is not None and rng.random() < 0.7 else _pick(rng, list(AGE_GROUP))}
            if t.form.startswith("gender"):
                v["gender"] = self.gender_of[subject] if rng.random() < 0.7 else _pick(rng, ["f", "m"])
            look = [sid]
        else:
            ev = EVENTS[t.event]
            per = self.events[ev.table]
            pid = _pick(rng, sorted(per))
            if pid is None:
                return None
            name, etime, ehadm = _pick(rng, per[pid])
            studies = self.by_patient[pid]
            if t.form == "cxr-after":
                later = [s for s in studies if s[2] > etime]
                study = _pick(rng, later) if later and rng.random() < 0.8 else _pick(rng, studies)
            elif t.form == "event-after":
                study = _pick(rng, studies)
                after = [e for e in per[pid] if e[1] > study[2]]
                if after and rng.random() < 0.8:
                    name, etime, ehadm = _pick(rng, after)
            else:
                study = _pick(rng, studies)
            v = {"patient_id": pid}
            if ev.slot is not None:
                v[ev.slot] = name
            anchor_time, anchor_hadm = (study[2], study[3]) if rng.random() < 0.5 else (etime, ehadm)
            v["global1"] = self.time_filter(rng, anchor_time, anchor_hadm, allow_null=t.form != "same")
            if t.form != "same":
                first, then = (etime, study[2]) if t.form == "cxr-after" else (study[2], etime)
                v["within"] = self.within(rng, first, then)
            look = [study[1]]
        visual = self.visual(t.vqa_key, rng, look)
        return None if visual is None else {**v, **visual}

    def studies_of(self, ref: str) -> tuple:
        """The study ids a reference query returns, worked out once per query: a template's draws come back to
        the same studies (the database does not change while items are sampled from it)."""
        return self.trace.cached(("studies_of", ref), lambda: tuple(
            r[0] for r in self.conn.execute(postprocess_query(ref)).fetchall()))

    def instantiate(self, t, v: dict) -> FilledItem | None:
        """The item of template ``t`` with values ``v``, or None when the values give no valid item."""
        studies = []
        for ref in t.references(v):
            got = self.studies_of(ref)
            if len(got) != 1:
                return None
            studies.append(got[0])
        if len(studies) == 2:  # 2-image: the compared study strictly before the target study
            t1, t2 = (self.time_of[s] for s in studies)
            if not t2 < t1:
                return None
        gold, neural = t.queries(v)
        try:
            answer = self.answer(gold)
        except sqlite3.Error:
            return None
        if any(a is None for a in answer) or (t.one_row and len(answer) != 1):
            return None
        return FilledItem(t, v, t.question(v), gold, neural, answer, studies)

    def fill(self, template, rng: np.random.Generator, tries: int = 40) -> FilledItem | None:
        """One valid item of ``template``, or None when ``tries`` draws all failed."""
        for _ in range(tries):
            v = self._draw(template, rng)
            item = None if v is None else self.instantiate(template, v)
            if item is not None:
                return item
        return None


def fill_items(conn: sqlite3.Connection, seed: int, templates: tuple = CATALOG, per_template: int = 1) -> list[FilledItem]:
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
