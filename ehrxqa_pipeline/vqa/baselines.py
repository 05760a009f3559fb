"""Language-only baselines of the EHRXQA paper (Table 4, E.1.2): Prior (Most) and Prior (Question), plus a
text-keyed Prior (Question) for the paraphrase-robustness measure.

Source: the ``mimic_cxr_vqa.questions`` frame (one row per sampled question: split, template_key, the
argument columns, answer list[str]); fitting uses the train and valid rows only.

Semantics:
- An answer is its sorted list of strings; "most popular" counts whole answers. Ties are broken
  deterministically by the *smallest answer* in list order (element-wise string comparison, ``[]`` first):
  e.g. ["no"] beats ["yes"] on a tie, ["a"] beats ["a", "b"].
- ``PriorMost``: the most popular answer over train+valid (the paper's is "yes"), for every question.
- ``PriorQuestion``: the most popular answer per template over train+valid (the paper's "for each question
  (template)"); a template unseen in train+valid gets Prior (Most) (counted in ``fallbacks``).
- ``PriorQuestionText``: the most popular answer per normalised question text (lower-cased, spaces collapsed,
  final ?/. dropped); unseen text gets Prior (Most) (counted). It is the baseline that really reads the text.

Every baseline answers MIMIC-CXR-VQA rows in batch (``answer_frame``) and is a VqaModule for EHRXQA
(``module(images, questions)``): verify answers come back as bool, others as list[str]. As a module,
``PriorQuestion`` finds the template by inverting the question text with the oracle's ``QuestionInverter``;
a question it cannot invert gets Prior (Most) and is counted in ``fallbacks``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import polars as pl

from ehrxqa_pipeline.names import SIDE_SPLITS
from ehrxqa_pipeline.questions.neuralsql.errors import OracleQuestionError
from ehrxqa_pipeline.questions.neuralsql.oracle import QuestionInverter
from ehrxqa_pipeline.questions.neuralsql.vqa_modules import Answer, ImageRef
from ehrxqa_pipeline.questions.mimic_cxr_vqa.records import phrasing_expr
from ehrxqa_pipeline.questions.mimic_cxr_vqa.templates import TEMPLATES, get_template, question_expr

FIT_SPLITS = SIDE_SPLITS["silver"]
_LIST = pl.List(pl.String)
_SPACES = re.compile(r"\s+")


def normalise_text(text: str) -> str:
    return _SPACES.sub(" ", text.strip().lower()).rstrip("?.").rstrip()


def question_texts(frame: pl.DataFrame) -> pl.Series:
    """The question text of each row: its ``question`` column, else its ``paraphrase`` phrasing filled with
    the row's arguments (``paraphrase.choose_vqa_phrasings`` output), else the template's own wording."""
    if "question" in frame.columns:
        return frame["question"]
    f = frame.with_row_index("_q")
    parts = [f.filter(pl.col("template_key") == t.key).select(
        "_q", phrasing_expr(t) if "paraphrase" in f.columns else question_expr(t)) for t in TEMPLATES]
    out = pl.concat(parts).sort("_q")
    if out.height != frame.height:
        raise ValueError(f"unknown template keys {sorted(set(frame['template_key']) - {t.key for t in TEMPLATES})}")
    return out["question"]


def _fit_rows(questions: pl.DataFrame) -> pl.DataFrame:
    """The train and valid rows with each answer list sorted. Lazily: sorting the lists of an eagerly filtered
    frame takes polars 2.1 about 20 times as long (0.3 s for the demo's 27k rows, each fit) as in one plan."""
    rows = questions.lazy()
    if "split" in questions.columns:
        rows = rows.filter(pl.col("split").is_in(FIT_SPLITS))
    rows = rows.with_columns(pl.col("answer").cast(_LIST).list.sort()).collect()
    if rows.height == 0:
        raise ValueError(f"no {'/'.join(FIT_SPLITS)} rows to fit a prior on")
    return rows


def most_popular(frame: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Per group of ``by`` (one row for all rows when ``by`` is empty): the most popular ``answer`` and its
    count ``n``; ties go to the smallest answer (answers joined with NUL sort in list order)."""
    key = pl.col("answer").list.join("\x00").alias("_key")
    counts = frame.group_by(*by, key).agg(pl.col("answer").first(), n=pl.len())
    ranked = counts.sort([*by, "n", "_key"], descending=[False] * len(by) + [True, False])
    best = ranked.group_by(by, maintain_order=True).first() if by else ranked.head(1)
    return best.drop("_key")


def normalised_text_expr(text: pl.Expr) -> pl.Expr:
    """``normalise_text`` as a polars expression."""
    return (text.str.strip_chars().str.to_lowercase().str.replace_all(r"\s+", " ")
            .str.strip_chars_end("?.").str.strip_chars_end())


def as_module_answer(answer: list[str]) -> Answer:
    """["yes"] / ["no"] -> bool (the executor's verify form); any other list stays a list."""
    return answer == ["yes"] if answer in (["yes"], ["no"]) else list(answer)


class PriorMost:
    """The most popular answer of train+valid, for every question."""

    name = "prior_most"
    reads_pixels = False

    def __init__(self, answer: list[str]):
        self.answer = list(answer)
        self.fallbacks = 0  # never falls back; kept so every baseline reports the same counters

    @classmethod
    def fit(cls, questions: pl.DataFrame) -> PriorMost:
        return cls.of_rows(_fit_rows(questions))

    @classmethod
    def of_rows(cls, rows: pl.DataFrame) -> PriorMost:
        """Fitted on ``_fit_rows`` already taken (``fit_priors`` shares them)."""
        return cls(most_popular(rows, [])["answer"][0].to_list())

    def answer_frame(self, questions: pl.DataFrame) -> list[list[str]]:
        return [list(self.answer) for _ in range(questions.height)]

    def __call__(self, images: list[ImageRef], questions: list[str]) -> list[Answer]:
        return [as_module_answer(self.answer) for _ in questions]


class PriorQuestion:
    """The most popular answer per template of train+valid; Prior (Most) where the template is unknown."""

    name = "prior_question"
    reads_pixels = False

    def __init__(self, by_template: dict[str, list[str]], most: PriorMost, objects: Iterable[str],
                 attributes: Iterable[str]):
        self.by_template, self.most = by_template, most
        self.objects, self.attributes = list(objects), list(attributes)  # the vocabulary (``priors_state``)
        self.inverter = QuestionInverter.of(self.objects, self.attributes)
        self.fallbacks = 0

    @classmethod
    def fit(cls, questions: pl.DataFrame, pairs: pl.DataFrame | None = None) -> PriorQuestion:
        """``pairs`` (object, attribute): the vocabulary for inverting EHRXQA questions; default: every object
        and attribute named by the fitted rows."""
        return cls.of_rows(_fit_rows(questions), pairs)

    @classmethod
    def of_rows(cls, rows: pl.DataFrame, pairs: pl.DataFrame | None = None,
                most: PriorMost | None = None) -> PriorQuestion:
        best = most_popular(rows, ["template_key"])
        by_template = dict(zip(best["template_key"], best["answer"].to_list()))
        src = pairs if pairs is not None else rows
        objects = {v for c in ("object", "object_1", "object_2") if c in src.columns for v in src[c].drop_nulls()}
        attributes = {v for c in ("attribute", "attribute_1", "attribute_2") if c in src.columns
                      for v in src[c].drop_nulls()}
        return cls(by_template, most or PriorMost.of_rows(rows), sorted(objects), sorted(attributes))

    def answer_frame(self, questions: pl.DataFrame) -> list[list[str]]:
        keys = questions["template_key"].to_list()
        for k in set(keys):
            get_template(k)  # unknown keys are an error, not a fallback
        unseen = sum(1 for k in keys if k not in self.by_template)
        self.fallbacks += unseen
        return [list(self.by_template.get(k, self.most.answer)) for k in keys]

    def __call__(self, images: list[ImageRef], questions: list[str]) -> list[Answer]:
        out = []
        for q in questions:
            try:
                key = self.inverter.invert(q)[0].key
            except OracleQuestionError:
                key = None
            if key not in self.by_template:
                self.fallbacks += 1
            out.append(as_module_answer(self.by_template.get(key, self.most.answer)))
        return out


class PriorQuestionText:
    """The most popular answer per normalised question text of train+valid; Prior (Most) for unseen text."""

    name = "prior_question_text"
    reads_pixels = False

    def __init__(self, by_text: dict[str, list[str]], most: PriorMost):
        self.by_text, self.most = by_text, most
        self.fallbacks = 0

    @classmethod
    def fit(cls, questions: pl.DataFrame) -> PriorQuestionText:
        """Texts from ``question_texts`` (a ``question`` or ``paraphrase`` column is used when present)."""
        return cls.of_rows(_fit_rows(questions))

    @classmethod
    def of_rows(cls, rows: pl.DataFrame, most: PriorMost | None = None) -> PriorQuestionText:
        texts = rows.with_columns(_text=normalised_text_expr(pl.lit(question_texts(rows))))
        best = most_popular(texts, ["_text"])
        return cls(dict(zip(best["_text"], best["answer"].to_list())), most or PriorMost.of_rows(rows))

    def answer_texts(self, texts: Iterable[str]) -> list[list[str]]:
        out = []
        for t in texts:
            ans = self.by_text.get(normalise_text(t))
            if ans is None:
                self.fallbacks += 1
                ans = self.most.answer
            out.append(list(ans))
        return out

    def answer_frame(self, questions: pl.DataFrame) -> list[list[str]]:
        return self.answer_texts(question_texts(questions).to_list())

    def __call__(self, images: list[ImageRef], questions: list[str]) -> list[Answer]:
        return [as_module_answer(a) for a in self.answer_texts(questions)]


def fit_priors(questions: pl.DataFrame, pairs: pl.DataFrame | None = None) -> dict[str, object]:
    """The three priors (by ``name``) fitted on the train and valid rows of ``questions``, which are taken and
    their answers sorted once for all three (each ``fit`` alone does that itself): the same modules."""
    rows = _fit_rows(questions)
    most = PriorMost.of_rows(rows)
    return {m.name: m for m in (most, PriorQuestion.of_rows(rows, pairs, most), PriorQuestionText.of_rows(rows, most))}


def priors_state(priors: dict[str, object]) -> dict:
    """What ``fit_priors`` learned, as JSON (kept by the scores between builds: fitting on the full-scale train
    and valid rows takes 0.6-0.7 s, reading this back a few hundredths)."""
    question, text = priors["prior_question"], priors["prior_question_text"]
    return {"most": priors["prior_most"].answer, "by_template": question.by_template,
            "objects": question.objects, "attributes": question.attributes,
            "by_text": text.by_text}


def priors_of_state(state: dict) -> dict[str, object]:
    """The priors ``priors_state`` wrote: the modules ``fit_priors`` made."""
    most = PriorMost(state["most"])
    return {m.name: m for m in (most, PriorQuestion(state["by_template"], most, state["objects"], state["attributes"]),
                                PriorQuestionText(state["by_text"], most))}
