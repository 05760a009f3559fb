"""EHRXQA statistics: paper Table C9 (samples per modality x patient scope x split) and per-template counts
with the sampling outcome (how many draws, why fewer than the cap or none).

The axes come from the scope name alone, so new scopes need no code here: the prefix gives the modality
(IMAGE -> image, MULTIMODAL -> image+table, TABLE -> table), the rest the patient scope (NONE -> none,
SINGLE -> single, GROUP -> group) and, for single-patient image scopes, the image count (SINGLE-1 -> 1-image,
SINGLE-2 -> 2-image, SINGLE-N -> N-image); the C9 row is the image count where there is one, else the
patient scope. Inputs: a frame with columns ``split`` and ``scope`` (the stored ``ehrxqa.questions`` rows, or
``frame_from_records`` over released records) and the sampling reports (``TemplateReport.row()`` dicts).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import polars as pl

from ehrxqa_pipeline.markdown import table
from ehrxqa_pipeline.names import DATASET_SPLITS
from ehrxqa_pipeline.questions.ehrxqa import CATALOG

SPLITS = DATASET_SPLITS
MODALITIES = {"IMAGE": "image", "TABLE": "table", "MULTIMODAL": "image+table"}  # C9 order
PATIENT_SCOPES = {"NONE": "none", "SINGLE": "single", "GROUP": "group"}
C9_ORDER = ("none", "single", "1-image", "2-image", "N-image", "group")


def modality(scope: str) -> str:
    """'image', 'image+table' or 'table' from the scope prefix."""
    prefix = scope.split("-")[0]
    if prefix not in MODALITIES:
        raise ValueError(f"scope {scope!r}: unknown modality prefix {prefix!r}; known: {sorted(MODALITIES)}")
    return MODALITIES[prefix]


def scope_axes(scope: str) -> dict[str, str]:
    """{"modality", "patient_scope" (none/single/group), "images" ('' or 1-image/2-image/N-image), "c9"}."""
    parts = scope.split("-")
    if len(parts) < 2 or parts[1] not in PATIENT_SCOPES:
        raise ValueError(f"scope {scope!r}: expected <MODALITY>-<NONE|SINGLE|GROUP>[-<images>]")
    patient = PATIENT_SCOPES[parts[1]]
    images = f"{parts[2]}-image" if patient == "single" and len(parts) > 2 else ""
    return {"modality": modality(scope), "patient_scope": patient, "images": images, "c9": images or patient}


def _rows_key(modality_: str, c9: str) -> tuple[int, int]:
    order = list(MODALITIES.values())
    return (order.index(modality_), C9_ORDER.index(c9) if c9 in C9_ORDER else len(C9_ORDER))


def c9_counts(frame: pl.DataFrame, scopes: Iterable[str] | None = None) -> list[dict]:
    """Table C9: one row per (modality, patient) of the catalog's scopes (and any other scope in ``frame``),
    in paper order, with counts per split and their share of the split, then a total row."""
    scopes = {t.scope for t in CATALOG} if scopes is None else set(scopes)
    scopes |= set(frame["scope"].unique().to_list()) if frame.height else set()
    axes = pl.DataFrame([{"scope": s, **scope_axes(s)} for s in sorted(scopes)],
                        schema={"scope": pl.String, "modality": pl.String, "patient_scope": pl.String,
                                "images": pl.String, "c9": pl.String})
    counts = (frame.select("split", "scope").join(axes, on="scope", how="left")
              .group_by("modality", "c9", "split").len())
    n = {(m, c, s): k for m, c, s, k in counts.iter_rows()}
    totals = {s: int(frame.filter(pl.col("split") == s).height) for s in SPLITS}
    keys = sorted({(m, c) for m, c in axes.select("modality", "c9").iter_rows()}, key=lambda k: _rows_key(*k))
    rows = []
    for m, c in keys:
        row = {"modality": m, "patient": c}
        for s in SPLITS:
            row[s] = int(n.get((m, c, s), 0))
            row[f"{s}_pct"] = 100.0 * row[s] / totals[s] if totals[s] else 0.0
        row["total"] = sum(row[s] for s in SPLITS)
        rows.append(row)
    total = {"modality": "total", "patient": "", **{s: totals[s] for s in SPLITS},
             **{f"{s}_pct": 100.0 if totals[s] else 0.0 for s in SPLITS}, "total": sum(totals.values())}
    return rows + [total]


def per_template(frame: pl.DataFrame, reports: Sequence[Mapping], templates: Sequence = CATALOG) -> list[dict]:
    """One row per catalog template: counts per split, and per database the draws, kept and the reason
    when fewer than the cap were kept ('' when the cap was reached)."""
    counts = {(i, s): k for i, s, k in frame.group_by("template_index", "split").len().iter_rows()} \
        if frame.height else {}
    by = {(r["template_index"], r["database"]): r for r in reports}
    rows = []
    for t in sorted(templates, key=lambda x: x.index):
        axes = scope_axes(t.scope)
        row = {"template_index": t.index, "scope": t.scope, "modality": axes["modality"], "patient": axes["c9"],
               **{s: int(counts.get((t.index, s), 0)) for s in SPLITS}}
        for database in ("silver", "gold"):
            r = by.get((t.index, database), {})
            row.update({f"{database}_draws": r.get("draws", 0), f"{database}_kept": r.get("kept", 0),
                        f"{database}_stop": r.get("stop", "not sampled"), f"{database}_reason": r.get("reason", "")})
        rows.append(row)
    return rows


def frame_from_records(records: Mapping[str, Sequence[dict]], templates: Sequence = CATALOG) -> pl.DataFrame:
    """(split, template_index, scope) per released answerable record; the template is found by its q_tag."""
    by_text = {t.text: t for t in templates}
    rows = []
    for split, recs in records.items():
        for r in recs:
            if r.get("is_impossible"):
                continue  # unanswerable items (opt-in) are counted apart, not in Table C9
            if r["q_tag"] not in by_text:
                raise ValueError(f"{split} record {r.get('id')}: q_tag {r['q_tag']!r} is not a catalog template")
            t = by_text[r["q_tag"]]
            rows.append({"split": split, "template_index": t.index, "scope": t.scope})
    return pl.DataFrame(rows, schema={"split": pl.String, "template_index": pl.Int64, "scope": pl.String})


def _cell(row: Mapping, split: str) -> str:
    return f"{row[split]:,} ({row[f'{split}_pct']:.1f}%)"


def render_markdown(c9: Sequence[Mapping], templates: Sequence[Mapping] | None = None) -> str:
    """Table C9 and (when given) the per-template table as markdown."""
    out = ["### Samples per modality, patient scope and split (cf. paper Table C9)",
           table(["modality", "patient", *SPLITS], [[r["modality"], r["patient"], *[_cell(r, s) for s in SPLITS]]
                                                    for r in c9])]
    if templates:
        short = [r for r in templates if r["silver_reason"] or r["gold_reason"]]
        out += [f"### Per template ({len(templates)} templates; {len(short)} below a cap)",
                table(["#", "scope", *SPLITS, "silver draws", "gold draws", "why fewer than the cap"],
                      [[r["template_index"], r["scope"], *[r[s] for s in SPLITS], r["silver_draws"],
                        r["gold_draws"], "; ".join(f"{db}: {r[f'{db}_reason']}" for db in ("silver", "gold")
                                                   if r[f"{db}_reason"])]
                       for r in templates])]
    return "\n\n".join(out) + "\n"
