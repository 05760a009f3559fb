"""Apply paraphrase pools to dataset records: each question gets one phrasing of its template's pool.

The phrasing is drawn uniformly from the pool side of the record's split (train -> train side, valid and
test -> valid/test side), one draw per record in record order from the step generator
``rng.generator(seed, "paraphrase.apply.<dataset>")``: same records, pools and seed, same phrasings.
A template with an empty pool side keeps its own wording (``para_type = "original"``).

MIMIC-CXR-VQA (``choose_vqa_phrasings``): adds ``paraphrase`` (template text with ``${...}`` slots) and
``para_type`` to the sampled-question frame; ``questions.vqa_records`` fills the slots.

EHRXQA (``apply_paraphrases``): works on the record dicts of ``FilledItem.record()`` (+ ``split``). The
slot values are recovered by aligning the template (``q_tag``) with the filled, unparaphrased question
(``template``), using the record's own values where it has them (``value``, ``v_tag``, ``t_tag``, ``o_tag``),
then substituted into the phrasing; the alignment is checked by re-filling ``q_tag``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

import polars as pl

from ehrxqa_pipeline.paraphrase.placeholders import PLACEHOLDER, leftovers
from ehrxqa_pipeline.paraphrase.pools import SPLIT_SIDE
from ehrxqa_pipeline.paraphrase.templates import EHRXQA, MIMIC_CXR_VQA
from ehrxqa_pipeline.rng import generator

ORIGINAL = "original"


class AlignmentError(ValueError):
    """A record's filled question does not match its template; the message names the record."""


def _side(split: str | None) -> str:
    if split not in SPLIT_SIDE:
        raise ValueError(f"unknown split {split!r}; known: {tuple(SPLIT_SIDE)}")
    return SPLIT_SIDE[split]


# ---- MIMIC-CXR-VQA -------------------------------------------------------------------------------------


def choose_vqa_phrasings(questions: pl.DataFrame, pools: pl.DataFrame, seed: int) -> pl.DataFrame:
    """``questions`` (split, template_key, ...) with ``paraphrase`` and ``para_type`` added, order kept."""
    from ehrxqa_pipeline.questions.vqa_templates import TEMPLATES

    p = (pools.filter(pl.col("dataset") == MIMIC_CXR_VQA).select("template_key", "side", "text", "source")
         .sort("template_key", "side", "text").with_columns(_slot=pl.int_range(pl.len()).over("template_key", "side")))
    sizes = p.group_by("template_key", "side").len("_n")
    draws = generator(seed, f"paraphrase.apply.{MIMIC_CXR_VQA}").random(questions.height)
    q = questions.with_columns(_side=pl.col("split").replace_strict(SPLIT_SIDE, return_dtype=pl.String),
                               _u=pl.Series(draws, dtype=pl.Float64))
    q = (q.join(sizes, left_on=["template_key", "_side"], right_on=["template_key", "side"], how="left",
                maintain_order="left")
         .with_columns(_slot=(pl.col("_u") * pl.col("_n")).floor().cast(pl.Int64))
         .join(p, left_on=["template_key", "_side", "_slot"], right_on=["template_key", "side", "_slot"],
               how="left", maintain_order="left"))
    original = pl.col("template_key").replace_strict({t.key: t.text for t in TEMPLATES}, return_dtype=pl.String)
    return (q.with_columns(paraphrase=pl.coalesce("text", original),
                           para_type=pl.when(pl.col("text").is_null()).then(pl.lit(ORIGINAL)).otherwise("source"))
            .drop("_side", "_u", "_n", "_slot", "text", "source"))


# ---- EHRXQA -------------------------------------------------------------------------------------------


def _category_forms(raw: str) -> list[str]:
    from ehrxqa_pipeline.questions.vqa_templates import CATEGORY_PLURAL, CATEGORY_TEXT

    return [f for f in (CATEGORY_PLURAL.get(raw), CATEGORY_TEXT.get(raw), raw) if f]


def _known(name: str, rec: Mapping) -> list[str] | None:
    """The possible filled words of one placeholder from the record's own fields (None: unknown)."""
    value, vt, tt, ot = rec.get("value") or {}, rec.get("v_tag") or {}, rec.get("t_tag") or [], rec.get("o_tag") or {}
    m = re.fullmatch(r"(object|attribute|category)(?:_(\d))?", name)
    if m:
        items, i = vt.get(m.group(1)) or [], int(m.group(2) or 1) - 1
        if i >= len(items):
            return None
        return _category_forms(str(items[i])) if m.group(1) == "category" else [str(items[i])]
    if name == "comparison" and vt.get("comparison"):
        return [str(vt["comparison"][0])]
    m = re.fullmatch(r"time_filter_exact([12])", name)
    if m and len(tt) == 5 and tt[2 + int(m.group(1))]:
        return [tt[2 + int(m.group(1))].removeprefix("exact-").replace("_", " ")]
    if name in ot:
        return [str(ot[name]["nlq"] if isinstance(ot[name], Mapping) else ot[name])]
    if name in value and name != "gender":  # gender is stored as m/f and shown as words
        return [str(value[name])]
    return None


def _pattern(q_tag: str, rec: Mapping, use_known: bool) -> tuple[re.Pattern, list[str]]:
    parts, names, pos, groups = [], [], 0, {}
    for m in PLACEHOLDER.finditer(q_tag):
        lit = q_tag[pos:m.start()].lower()
        parts.append(r"\s*".join(re.escape(w) for w in re.split(r"\s+", lit)))
        name = next(g for g in m.groups() if g)
        name = name.lower() if name.lower().endswith("_verb") else name
        if name in groups:
            parts.append(f"(?P={groups[name]})")
        else:
            groups[name] = f"g{len(groups)}"
            names.append(name)
            alts = _known(name, rec) if use_known else None
            body = "|".join(re.escape(a.lower()) for a in alts) if alts else r".*?"
            parts.append(f"(?P<{groups[name]}>{body})")
        pos = m.end()
    lit = q_tag[pos:].lower()
    parts.append(r"\s*".join(re.escape(w) for w in re.split(r"\s+", lit)))
    return re.compile("^" + "".join(parts) + "$", re.DOTALL), names


def tidy(text: str) -> str:
    """The catalog's finishing of a filled question: spaces collapsed, none before , ? . ; lower-cased."""
    out = re.sub(r"\s+", " ", text)
    return re.sub(r" ([,?.])", r"\1", out).strip().lower()


def fill(text: str, fills: Mapping[str, str]) -> str:
    """Substitute slot words into a template or phrasing (keys: placeholder names) and tidy."""
    def one(m: re.Match) -> str:
        name = next(g for g in m.groups() if g)
        name = name.lower() if name.lower().endswith("_verb") else name
        if name not in fills:
            raise KeyError(f"no value for placeholder {m.group(0)}")
        return fills[name]
    return tidy(PLACEHOLDER.sub(one, text))


def slot_fills(rec: Mapping) -> dict[str, str]:
    """Placeholder name -> filled words of one EHRXQA record (q_tag aligned with template)."""
    q_tag, filled = rec["q_tag"], tidy(rec["template"])
    for use_known in (True, False):
        rx, names = _pattern(q_tag, rec, use_known)
        m = rx.match(filled)
        if m:
            fills = {n: m.group(f"g{i}").strip() for i, n in enumerate(names)}
            if fill(q_tag, fills) == filled:
                return fills
    raise AlignmentError(f"template {rec.get('template_index', '?')}: the filled question {filled!r} does not "
                         f"match its q_tag {q_tag!r}")


def _pool_index(pools: pl.DataFrame | Iterable[Mapping]) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(template id, side) -> [(phrasing, source)] sorted by phrasing."""
    rows = pools.filter(pl.col("dataset") == EHRXQA).to_dicts() if isinstance(pools, pl.DataFrame) else list(pools)
    index: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for r in sorted(rows, key=lambda r: (r["template_id"], r["side"], r["text"])):
        index.setdefault((r["template_id"], r["side"]), []).append((r["text"], r["source"]))
    return index


def _template_id(rec: Mapping, by_text: dict[str, str]) -> str:
    if rec.get("template_index") is not None:
        return f"{EHRXQA}/{rec['template_index']}"
    if rec["q_tag"] in by_text:
        return by_text[rec["q_tag"]]
    raise AlignmentError(f"record without template_index and with an unknown q_tag {rec['q_tag']!r}")


def _with_fields(rec: Mapping, question: str, para_type: str) -> dict:
    """A copy with ``question`` and ``para_type`` set: in place when present, else ``question`` before
    ``template`` and ``para_type`` after ``tag`` (or ``v_tag``, or at the end)."""
    after = next((k for k in ("tag", "v_tag") if k in rec), None)
    new: dict = {}
    for k, v in rec.items():
        if k == "template" and "question" not in rec:
            new["question"] = question
        new[k] = {"question": question, "para_type": para_type}.get(k, v)
        if k == after and "para_type" not in rec:
            new["para_type"] = para_type
    new.setdefault("question", question)
    new.setdefault("para_type", para_type)
    return new


def apply_paraphrases(records: Sequence[Mapping], pools: pl.DataFrame | Iterable[Mapping], seed: int,
                      split: str | None = None) -> list[dict]:
    """Paraphrased copies of EHRXQA records.

    Each record needs ``template`` (the filled question before paraphrase), ``q_tag`` (the template text),
    ``template_index`` (or a q_tag equal to a catalog text) and its split (``record["split"]`` or the
    ``split`` argument); ``value``, ``v_tag``, ``t_tag`` and ``o_tag`` pin the slot values where present.
    The copy gets ``question`` (the phrasing with the record's values, lower-cased) and ``para_type``
    (``llm``, ``rule-based``, ``reviewer`` or ``original``): replaced where the record has them, else
    ``question`` just before ``template`` and ``para_type`` after ``tag`` (or ``v_tag``, or at the end).
    A template without phrasings on the record's side keeps the filled template as its question.
    Raises AlignmentError when a record's template does not match its q_tag."""
    from ehrxqa_pipeline.questions.ehrxqa import CATALOG

    index = _pool_index(pools)
    # every catalog template, also those without a pool (table templates): they keep the filled template
    by_text = {} if all(r.get("template_index") is not None for r in records) else \
        {t.text: f"{EHRXQA}/{t.index}" for t in CATALOG}
    rng = generator(seed, f"paraphrase.apply.{EHRXQA}")
    draws = rng.random(len(records))
    out = []
    for rec, u in zip(records, draws):
        tid = _template_id(rec, by_text)
        phrasings = index.get((tid, _side(rec.get("split", split))), [])
        if not phrasings:  # no pool (e.g. table templates): the filled template is the question
            out.append(_with_fields(rec, rec["template"], ORIGINAL))
            continue
        text, source = phrasings[int(u * len(phrasings))]
        fills = slot_fills(rec)
        question = fill(text, fills)
        # checked with neutral fills: database values may hold brackets ("egd [esophagogastroduodenoscopy]")
        if leftovers(fill(text, dict.fromkeys(fills, "x"))):
            raise AlignmentError(f"template {tid}: placeholders left in {question!r}")
        out.append(_with_fields(rec, question, source))
    return out


__all__ = ["ORIGINAL", "AlignmentError", "apply_paraphrases", "choose_vqa_phrasings", "fill", "slot_fills", "tidy"]
