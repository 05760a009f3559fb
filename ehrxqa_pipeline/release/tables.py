"""release/statistics/tables.{md,json}: the release's statistics in one place, for readers, plots and the
datasheet.

Nothing is computed twice: paper Tables B4-B6 are copied from ``mimic-cxr-vqa/statistics.{md,json}`` and
Table C9 and the per-template EHRXQA counts from ``ehrxqa/statistics.{md,json}`` (which keep the answer
entropy and sampling outcome per template). Added here: the cohort funnels, the rows every filter set aside
per reason (the ``*_rejected`` tables), MIMIC-CXR-VQA records per template and the answer distributions
of the released files.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

from ehrxqa_pipeline.atomic import write_text
from ehrxqa_pipeline.hashing import file_digest
from ehrxqa_pipeline.markdown import table
from ehrxqa_pipeline.release.memo import OutputMemo
from ehrxqa_pipeline.names import DATASET_SPLITS

SPLITS = DATASET_SPLITS
VQA_DIR, EHRXQA_DIR, OUT_DIR = "mimic-cxr-vqa", "ehrxqa", "statistics"
TOP_ANSWERS = 10  # answers per split in the markdown table (the JSON keeps them all)
_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}( \d{2}:\d{2}(:\d{2})?)?$")


def _sorted_counts(counter: Mapping[str, int]) -> dict[str, int]:
    return {k: n for k, n in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))}


def answer_kind(answer: list) -> str:
    """EHRXQA answer kinds: none (empty), 0/1, number, time, text, list (several values)."""
    if not answer:
        return "none"
    if len(answer) > 1:
        return "list"
    (a,) = answer
    if isinstance(a, bool) or a in (0, 1):
        return "0/1"
    if isinstance(a, (int, float)):
        return "number"
    return "time" if _TIME.match(str(a)) else "text"


def file_counts(path: Path, dataset: str) -> dict:
    """What the tables take from one release JSON file: its record count and, for MIMIC-CXR-VQA, per template
    program [content type, semantic type, records] and records per answer (an empty answer counts as
    "(none)"); for EHRXQA, records per answer kind and per phrasing source (``para_type``)."""
    records = json.loads(Path(path).read_text())
    if dataset == VQA_DIR:
        templates: dict[str, list] = {}
        for r in records:
            templates.setdefault(r["template_program"], [r["content_type"], r["semantic_type"], 0])[2] += 1
        return {"records": len(records), "templates": templates,
                "answers": dict(Counter(a for r in records for a in (r["answer"] or ["(none)"])))}
    return {"records": len(records), "answer_kinds": dict(Counter(answer_kind(r["answer"]) for r in records)),
            "para_types": dict(Counter(r["para_type"] for r in records))}


# What else a file's counts depend on: this module.
_CODE = file_digest(Path(__file__))


def split_counts(release_dir: Path, dataset: str, memo: OutputMemo) -> dict[str, dict]:
    """``file_counts`` of each split's file of ``dataset``; ``memo`` keeps them for files whose content did not
    change (a gold edit rewrites the test files only: the silver train and valid files are not read again)."""
    out = {}
    for split in SPLITS:
        path, name = Path(release_dir) / dataset / f"{split}.json", f"{dataset}/{split}"
        facts = memo.kept(name, _CODE, path)
        out[split] = facts if facts is not None else memo.record(name, _CODE, file_digest(path),
                                                                 file_counts(path, dataset))
    return out


def vqa_template_counts(counts: Mapping[str, Mapping]) -> list[dict]:
    """One row per MIMIC-CXR-VQA template program with its content / semantic type and records per split, from
    ``split_counts``."""
    rows: dict[str, dict] = {}
    for split in SPLITS:
        for program, (content, semantic, n) in counts[split]["templates"].items():
            row = rows.setdefault(program, {"template": program, "content_type": content,
                                            "semantic_type": semantic, **{s: 0 for s in SPLITS}})
            row[split] += n
    return sorted(rows.values(), key=lambda r: int(r["template"].rsplit("_", 1)[-1]))


def ehrxqa_template_counts(per_template: Sequence[Mapping]) -> list[dict]:
    """One row per EHRXQA template (from ehrxqa/statistics.json) with modality, scope and records per split."""
    return [{"template": r["template_index"], "modality": r["modality"], "scope": r["scope"],
             **{s: r[s] for s in SPLITS}} for r in sorted(per_template, key=lambda r: r["template_index"])]


def rejected_counts(con) -> list[dict]:
    """Rows set aside per (table, reason) over every ``*_rejected`` table of the warehouse that has a
    ``reason`` column (a DuckDB connection); tables without rejected rows are left out."""
    tables = con.execute("""SELECT table_schema, table_name FROM information_schema.columns
                            WHERE table_name LIKE '%\\_rejected' ESCAPE '\\' AND column_name = 'reason'
                            ORDER BY 1, 2""").fetchall()
    out = []
    for schema, name in tables:
        for reason, n in con.execute(f'SELECT reason, count(*) FROM "{schema}"."{name}" GROUP BY 1 ORDER BY 1'
                                     ).fetchall():
            out.append({"table": f"{schema}.{name}", "reason": str(reason), "rows": int(n)})
    return out


def section(markdown: str, first: str, stop: str | None = None) -> str:
    """The part of ``markdown`` from the heading that starts with ``first`` up to the heading ``stop``."""
    start = markdown.index(first)
    end = markdown.index(stop, start) if stop and stop in markdown[start:] else len(markdown)
    return markdown[start:end].strip()


def read_funnels(con, schema: str = "cxr_cohort") -> dict[str, list[tuple[str, int]]]:
    """Cohort -> [(rule, images remaining)] in rule order, from the table the cohort step writes."""
    out: dict[str, list[tuple[str, int]]] = {}
    for cohort, rule, n in con.execute(f"SELECT cohort, rule, images FROM {schema}.funnel "
                                       "ORDER BY cohort = 'gold', step").fetchall():
        out.setdefault(cohort, []).append((rule, int(n)))
    return out


def gather(release_dir: Path, funnels: Mapping[str, Sequence], rejected: Sequence[Mapping],
           memo: Path | None = None) -> dict:
    """Everything release/statistics/tables.json holds (see the module docstring). ``funnels``: cohort ->
    [(rule, images remaining)], kept in the given order (silver, then gold). ``memo``: a JSON file outside the
    release keeping each record file's counts (``split_counts``)."""
    release_dir, done = Path(release_dir), OutputMemo(memo)
    vqa_stats = json.loads((release_dir / VQA_DIR / "statistics.json").read_text())
    ehrxqa_stats = json.loads((release_dir / EHRXQA_DIR / "statistics.json").read_text())
    vqa, ehrxqa = split_counts(release_dir, VQA_DIR, done), split_counts(release_dir, EHRXQA_DIR, done)
    done.save()
    per_template = ehrxqa_stats["per_template"]
    return {
        "mimic_cxr_vqa": {
            **{k: vqa_stats[k] for k in ("overall", "by_content_type", "by_semantic_type")},
            "records": {s: vqa[s]["records"] for s in SPLITS}, "per_template": vqa_template_counts(vqa),
            "answers": {s: _sorted_counts(vqa[s]["answers"]) for s in SPLITS}},
        "ehrxqa": {
            "c9": ehrxqa_stats["c9"], "records": {s: ehrxqa[s]["records"] for s in SPLITS},
            "per_template": ehrxqa_template_counts(per_template),
            "templates_below_cap": sum(1 for r in per_template if r["silver_reason"] or r["gold_reason"]),
            "answer_kinds": {s: _sorted_counts(ehrxqa[s]["answer_kinds"]) for s in SPLITS},
            "para_types": {s: _sorted_counts(ehrxqa[s]["para_types"]) for s in SPLITS}},
        "funnels": [{"cohort": k, "steps": [[str(rule), int(n)] for rule, n in v]} for k, v in funnels.items()],
        "rejected": [dict(r) for r in rejected],
    }


def _split_table(first: str, rows: Mapping[str, Mapping[str, int]], top: int | None = None) -> str:
    keys = list(dict.fromkeys(k for s in SPLITS for k in list(rows.get(s, {}))[:top]))
    return table([first, *SPLITS], [[k, *[f"{rows.get(s, {}).get(k, 0):,}" for s in SPLITS]] for k in keys])


def render_markdown(tables: Mapping, vqa_markdown: str, ehrxqa_markdown: str) -> str:
    """tables.md: B4-B6 and C9 copied from the dataset statistics, then the tables added here."""
    vqa, ehrxqa = tables["mimic_cxr_vqa"], tables["ehrxqa"]
    parts = [
        "# Release statistics",
        f"Copied from `{VQA_DIR}/statistics.md` (which also has the answer entropy per template) and "
        f"`{EHRXQA_DIR}/statistics.md` (which also has every template's sampling outcome); the tables after "
        "them are computed from the release files and the build's quarantine tables.",
        "## MIMIC-CXR-VQA", section(vqa_markdown, "### Overall", "### Answer entropy"),
        "## EHRXQA", section(ehrxqa_markdown, "### Samples per modality", "### Per template"),
        f"{ehrxqa['templates_below_cap']} templates stay below a sampling cap; the reasons are in "
        f"`{EHRXQA_DIR}/statistics.md`.",
        "## Cohort funnels (images remaining after each rule)",
        *[part for f in tables["funnels"] for part in
          (f"### {f['cohort'].capitalize()} cohort",
           table(["rule", "images"], [[rule, f"{n:,}"] for rule, n in f["steps"]]))],
        "## Rows set aside, per table and reason",
        table(["table", "reason", "rows"], [[r["table"], r["reason"], f"{r['rows']:,}"] for r in tables["rejected"]]),
        "## MIMIC-CXR-VQA records per template",
        table(["template", "content type", "semantic type", *SPLITS],
              [[r["template"], r["content_type"], r["semantic_type"], *[f"{r[s]:,}" for s in SPLITS]]
               for r in vqa["per_template"]]),
        f"## MIMIC-CXR-VQA answers (the {TOP_ANSWERS} most frequent per split)",
        _split_table("answer", vqa["answers"], TOP_ANSWERS),
        "## EHRXQA answer kinds", _split_table("kind", ehrxqa["answer_kinds"]),
        "## EHRXQA question sources (`para_type`)", _split_table("para_type", ehrxqa["para_types"]),
    ]
    return "\n\n".join(parts) + "\n"


def write_tables(release_dir: Path, tables: Mapping, markdown: str) -> dict[str, Path]:
    out = Path(release_dir) / OUT_DIR
    return {"json": write_text(out / "tables.json", json.dumps(tables, indent=2, sort_keys=True,
                                                                ensure_ascii=False) + "\n"),
            "md": write_text(out / "tables.md", markdown)}
