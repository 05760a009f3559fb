"""MIMIC-CXR-VQA statistics: the paper's Tables B4 (overall), B5 (content type), B6 (semantic type), and
per-template answer entropy against the entropy an unbalanced (uniform-random) sample would have.

Table inputs are a frame with columns split, image_id, question, content_type, semantic_type, answer
(``mimic_cxr_vqa.records.record_frame`` gives it; ``frame_from_records`` builds it from record dicts). Counts:
images = distinct image_id, questions = distinct question strings, answers = distinct answer lists,
samples = rows. Entropy is in bits over the exact answer list of each question.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import polars as pl

from ehrxqa_pipeline.questions.mimic_cxr_vqa.sampling import ANSWER_SEP, SPLITS, VqaSample
from ehrxqa_pipeline.questions.mimic_cxr_vqa.templates import CONTENT_TYPES, SEMANTIC_TYPES, TEMPLATES
from ehrxqa_pipeline.markdown import table
from ehrxqa_pipeline.rng import generator

_FIELDS = ("split", "image_id", "question", "content_type", "semantic_type", "answer")


def frame_from_records(records: Mapping[str, Sequence[dict]]) -> pl.DataFrame:
    """The table-input frame from split -> record dicts (as ``build_records`` returns)."""
    rows = [r for split in records for r in records[split]]
    return pl.DataFrame({f: [r[f] for r in rows] for f in _FIELDS},
                        schema={**{f: pl.String for f in _FIELDS[:-1]}, "answer": pl.List(pl.String)})


def _splits(frame: pl.DataFrame) -> list[str]:
    return _ordered(set(frame["split"].unique()))


def _ordered(present: set[str]) -> list[str]:
    return [s for s in SPLITS if s in present] + sorted(present - set(SPLITS))


def overall(frame: pl.DataFrame) -> dict[str, dict[str, int]]:
    """Table B4: {"images" | "questions" | "answers" | "samples": {split: count}}."""
    g = frame.group_by("split").agg(images=pl.col("image_id").n_unique(), questions=pl.col("question").n_unique(),
                                    answers=pl.col("answer").list.join(ANSWER_SEP).n_unique(), samples=pl.len())
    by = {r["split"]: r for r in g.iter_rows(named=True)}
    return {k: {s: int(by[s][k]) for s in _splits(frame)} for k in ("images", "questions", "answers", "samples")}


def _share(frame: pl.DataFrame, column: str, levels: Sequence[str]) -> dict[str, dict[str, dict]]:
    counts = frame.group_by("split", column).len()
    totals = dict(frame.group_by("split").len().iter_rows())
    n = {(s, v): c for s, v, c in counts.iter_rows()}
    return {v: {s: {"n": n.get((s, v), 0), "pct": 100.0 * n.get((s, v), 0) / totals[s]} for s in _splits(frame)}
            for v in levels}


def by_content_type(frame: pl.DataFrame) -> dict[str, dict[str, dict]]:
    """Table B5: {content_type: {split: {"n": count, "pct": percent of the split}}}."""
    return _share(frame, "content_type", CONTENT_TYPES)


def by_semantic_type(frame: pl.DataFrame) -> dict[str, dict[str, dict]]:
    """Table B6: {semantic_type: {split: {"n": count, "pct": percent of the split}}}."""
    return _share(frame, "semantic_type", SEMANTIC_TYPES)


def entropy_bits(counts: np.ndarray) -> float:
    """Shannon entropy (bits) of a count vector (zeros ignored)."""
    c = np.asarray(counts, dtype=float)
    c = np.sort(c[c > 0])  # a fixed summation order: group_by row order varies, the last bits must not
    if c.size == 0:
        return 0.0
    p = c / c.sum()
    return float(-(p * np.log2(p)).sum())


def answer_entropy(sample: VqaSample, *, seed: int, draws: int = 20) -> list[dict]:
    """One row per sampled (split, template): n, distinct answers, entropy of the sampled answers, the
    candidate pool's own entropy, and the mean entropy of ``draws`` uniform-random samples of the same size
    drawn without replacement from the candidate pool (multivariate hypergeometric, seeded per template)."""
    q = sample.questions.with_columns(answer_key=pl.col("answer").list.join(ANSWER_SEP))
    got = q.group_by("split", "template_key", "answer_key").len()
    rows = []
    for split in _splits(q) if q.height else []:
        for t in TEMPLATES:
            mine = got.filter((pl.col("split") == split) & (pl.col("template_key") == t.key))["len"].to_numpy()
            if mine.size == 0:
                continue
            pool = sample.pool.filter((pl.col("split") == split) & (pl.col("template_key") == t.key))["n"]
            pool = pool.to_numpy().astype(np.int64)
            n = int(mine.sum())
            rng = generator(seed, f"vqa_stats.{split}.{t.key}")
            random = rng.multivariate_hypergeometric(pool, min(n, int(pool.sum())), size=draws)
            rows.append({"split": split, "template_key": t.key, "template_index": t.index, "n": n,
                         "answers": int(mine.size), "entropy": entropy_bits(mine),
                         "uniform_sample_entropy": float(np.mean([entropy_bits(r) for r in random])),
                         "pool_entropy": entropy_bits(pool), "pool_size": int(pool.sum())})
    return rows


TABLES = ("overall", "by_content_type", "by_semantic_type")


def split_tables(frame: pl.DataFrame) -> dict[str, dict]:
    """Tables B4-B6 of the frame (``overall``, ``by_content_type``, ``by_semantic_type``): every count is of one
    split, so the tables of frames of other splits merge into those of all their rows (``merge_split_tables``)."""
    return {"overall": overall(frame), "by_content_type": by_content_type(frame),
            "by_semantic_type": by_semantic_type(frame)}


def merge_split_tables(parts: Sequence[Mapping[str, dict]]) -> dict[str, dict]:
    """``split_tables`` of frames with no split in common, as the ``split_tables`` of their rows together."""
    out: dict[str, dict] = {}
    for part in parts:
        for name in TABLES:
            for row, per_split in part[name].items():
                out.setdefault(name, {}).setdefault(row, {}).update(per_split)
    return {name: {row: {s: per[s] for s in _ordered(set(per))} for row, per in rows.items()}
            for name, rows in out.items()}


def render_markdown(tables: Mapping[str, dict], entropy: Sequence[dict] | None = None) -> str:
    """Tables B4-B6 (``split_tables``; and the entropy table when given) as markdown."""
    o = tables["overall"]
    splits = _ordered(set(o["samples"]))
    out = ["### Overall (cf. paper Table B4)", table(["", *splits], [[k.capitalize(), *[f"{v[s]:,}" for s in splits]]
                                                                 for k, v in o.items()])]
    for title, counts in (("content type (cf. Table B5)", tables["by_content_type"]),
                         ("semantic type (cf. Table B6)", tables["by_semantic_type"])):
        rows = [[k, *[f"{v[s]['n']:,} ({v[s]['pct']:.1f}%)" for s in splits]] for k, v in counts.items()]
        out += [f"### By {title}", table([title.split(" (")[0].capitalize(), *splits], rows)]
    if entropy:
        rows = [[r["split"], r["template_index"], r["template_key"], f"{r['n']:,}", r["answers"],
                 f"{r['entropy']:.3f}", f"{r['uniform_sample_entropy']:.3f}", f"{r['pool_entropy']:.3f}"]
                for r in entropy]
        out += ["### Answer entropy per template (bits)",
                table(["split", "#", "template", "n", "answers", "entropy", "uniform sample", "pool"], rows)]
    return "\n\n".join(out) + "\n"
