"""release/plots/*.png from release/statistics/tables.json: answer distributions, records per template and
the cohort funnels.

Figures are drawn on matplotlib's Agg canvas directly (no pyplot, no global backend state) and saved with
no ``Software`` text chunk and no date, so the same numbers give the same PNG bytes (with the same
matplotlib and its bundled fonts). ``markdown_image`` embeds a PNG in markdown for the Dagster UI.

A figure whose numbers, titles, this module and matplotlib's version are those of the PNG file already in the
release is not drawn again (``render_all(kept=...)``): a gold label edit changes the answer counts, not the
funnels or the records per template, whose figure is the slowest to draw.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from ehrxqa_pipeline.atomic import write_bytes
from ehrxqa_pipeline.hashing import bytes_digest, combine, file_digest
from ehrxqa_pipeline.release.memo import OutputMemo
from ehrxqa_pipeline.release.tables import SPLITS

if TYPE_CHECKING:
    from matplotlib.figure import Figure

COLORS = {"train": "#4C72B0", "valid": "#DD8452", "test": "#55A868"}
DPI = 100
TOP_ANSWERS = 20
OUT_DIR = "plots"


def _figure(width: float, height: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # here: a build that draws nothing never imports it
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def to_png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def answer_distribution_png(answers: Mapping[str, Mapping[str, int]], title: str, top: int = TOP_ANSWERS) -> bytes:
    """One panel per split: the ``top`` most frequent answers as a share (%) of the split's answers."""
    fig = _figure(4.2 * len(SPLITS), 0.25 * top + 1.4)
    axes = fig.subplots(1, len(SPLITS))
    for ax, split in zip(axes, SPLITS):
        counts = answers.get(split, {})
        total = sum(counts.values()) or 1
        items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top][::-1]
        ax.barh(range(len(items)), [100 * n / total for _, n in items], color=COLORS[split])
        ax.set_yticks(range(len(items)), [a[:28] for a, _ in items], fontsize=7)
        ax.set_xlabel("% of answers")
        ax.set_title(f"{split} ({total:,} answers)" if counts else f"{split} (none)", fontsize=9)
    fig.suptitle(title)
    return to_png(fig)


def grouped_bars_png(counts: Mapping[str, Mapping[str, int]], title: str, ylabel: str) -> bytes:
    """Bars per category, one per split side by side (e.g. EHRXQA answer kinds)."""
    cats = list(dict.fromkeys(k for s in SPLITS for k in counts.get(s, {})))
    fig = _figure(max(5.0, 0.9 * len(cats) + 2), 3.6)
    ax = fig.subplots()
    width = 0.8 / len(SPLITS)
    for i, split in enumerate(SPLITS):
        ax.bar([c + (i - 1) * width for c in range(len(cats))], [counts.get(split, {}).get(k, 0) for k in cats],
               width=width, color=COLORS[split], label=split)
    ax.set_xticks(range(len(cats)), cats)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    ax.set_title(title)
    return to_png(fig)


def template_counts_png(rows: Sequence[Mapping], title: str, group: str | None = None) -> bytes:
    """Records per template stacked by split, templates in catalog order (x: template number). With
    ``group`` (e.g. modality, contiguous in the catalog) each group's span is marked and named."""
    many = len(rows) > 60
    fig = _figure(11.0 if many else 8.0, 3.8)
    ax = fig.subplots()
    x = list(range(len(rows)))
    bottom = [0] * len(rows)
    edges = [i - 0.5 for i in range(len(rows) + 1)]
    for split in SPLITS:
        values = [r[split] for r in rows]
        top = [b + v for b, v in zip(bottom, values)]
        if many:  # touching bars drawn as one stepped area per split: 3 artists, not one bar each (1,251)
            ax.stairs(top, edges, baseline=bottom, fill=True, color=COLORS[split], label=split)
        else:
            ax.bar(x, values, bottom=bottom, width=0.8, color=COLORS[split], label=split)
        bottom = top
    step = 25 if many else 1
    ax.set_xticks(x[::step], [str(r["template"]).rsplit("_", 1)[-1] for r in rows[::step]], fontsize=7)
    ax.set_xlim(-0.5, len(rows) - 0.5)
    if group is not None:
        starts = [i for i, r in enumerate(rows) if i == 0 or r[group] != rows[i - 1][group]]
        for i in starts:
            if i:
                ax.axvline(i - 0.5, color="#333333", linewidth=0.8)
            ax.annotate(str(rows[i][group]), (i, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -12),
                        textcoords="offset points", fontsize=8)
    ax.set_xlabel(f"template ({len(rows)} in catalog order)")
    ax.set_ylabel("records")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(title)
    return to_png(fig)


def funnel_png(funnels: Sequence[Mapping]) -> bytes:
    """One panel per cohort (``[{"cohort", "steps": [(rule, images remaining)]}]``): images remaining
    after each selection rule, first rule on top."""
    fig = _figure(5.5 * max(1, len(funnels)), 0.32 * max((len(f["steps"]) for f in funnels), default=1) + 1.4)
    axes = fig.subplots(1, max(1, len(funnels)), squeeze=False)[0]
    for ax, funnel in zip(axes, funnels):
        name, steps = funnel["cohort"], list(funnel["steps"])[::-1]
        ax.barh(range(len(steps)), [n for _, n in steps], color="#8172B3")
        ax.set_yticks(range(len(steps)), [str(rule) for rule, _ in steps], fontsize=7)
        for i, (_, n) in enumerate(steps):
            ax.annotate(f"{n:,}", (n, i), xytext=(2, 0), textcoords="offset points", va="center", fontsize=7)
        ax.set_xlabel("images remaining")
        ax.set_title(f"{name} cohort", fontsize=9)
    fig.suptitle("Image selection funnel")
    return to_png(fig)


def figures(tables: Mapping) -> dict[str, tuple]:
    """File name -> (drawing function, its arguments) for every plot of the release, from the tables.json
    content."""
    vqa, ehrxqa = tables["mimic_cxr_vqa"], tables["ehrxqa"]
    return {
        "answers_mimic_cxr_vqa.png": (answer_distribution_png, vqa["answers"], "MIMIC-CXR-VQA: most frequent answers"),
        "answers_ehrxqa.png": (grouped_bars_png, ehrxqa["answer_kinds"], "EHRXQA: answer kinds", "records"),
        "templates_mimic_cxr_vqa.png": (template_counts_png, vqa["per_template"],
                                        "MIMIC-CXR-VQA: records per template"),
        "templates_ehrxqa.png": (template_counts_png, ehrxqa["per_template"], "EHRXQA: records per template",
                                 "modality"),
        "funnel.png": (funnel_png, tables["funnels"]),
    }


# What else a figure's bytes depend on: this module and matplotlib (with its bundled fonts).
_CODE = combine(file_digest(Path(__file__)), metadata.version("matplotlib"))


def render_all(tables: Mapping, kept: Path | None = None, memo: Path | None = None) -> dict[str, bytes]:
    """File name -> PNG bytes for every plot of the release, from the tables.json content. With ``kept`` (the
    release's plots folder) and ``memo`` (a JSON file outside the release), a figure whose inputs are those the
    memo holds for the PNG file in ``kept``, and whose file is still that PNG, is read from there, not drawn."""
    done, out = OutputMemo(memo if kept is not None else None), {}
    for name, (draw, *args) in figures(tables).items():
        inputs = combine(json.dumps(args, sort_keys=True, default=str), _CODE)
        if done.kept(name, inputs, Path(kept or ".") / name) is not None:
            out[name] = (Path(kept) / name).read_bytes()
            continue
        out[name] = draw(*args)
        done.record(name, inputs, bytes_digest(out[name]), {})
    done.save()
    return out


def markdown_image(png: bytes, alt: str) -> str:
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode('ascii')})"


def write_plots(release_dir: Path, pngs: Mapping[str, bytes]) -> dict[str, Path]:
    """Write ``release_dir/plots/<name>`` for each PNG and remove PNGs there that are no longer drawn."""
    out = Path(release_dir) / OUT_DIR
    for old in out.glob("*.png") if out.is_dir() else ():
        if old.name not in pngs:
            old.unlink()
    return {name: write_bytes(out / name, data) for name, data in sorted(pngs.items())}
