"""What changed between two release builds, as markdown (``ehrxqa changelog OLD_RELEASE NEW_RELEASE``).

Grain: one document per pair of release folders. Source: each folder's ``manifest.json`` (release version,
identity, code, sources, seed, configuration, file digests) and, for the counts, the per-split and
per-template counts the release already holds: ``statistics/tables.json`` (``tables.gather``), else
``ehrxqa/statistics.json`` and ``mimic-cxr-vqa/statistics.json``; template wording from
``ehrxqa/template_catalog.json``. ``load_release`` attaches them to the manifest as ``contents``; the
manifest itself does not carry them. ``changelog(old, new)`` reads only the two dicts (hand-made in tests).

``contents``: dataset (``ehrxqa``, ``mimic_cxr_vqa``) -> ``{"records": {split: n}, "templates": {id:
{"train", "valid", "test", "definition"}}}``; a template's ``definition`` is its question template (EHRXQA) or
content and semantic type (MIMIC-CXR-VQA): a change there is a changed template, a change in its counts only
is listed as counts.

``CHANGELOG.md`` in the release (written by ``release/manifest``): the build keeps a snapshot of each release
version it made (``snapshot``: the manifest with ``contents``, without the changelog's own entry) in
``EHRXQA_HOME/release_history/<release_version>.json`` and the order in which the versions were first built
(``order.json``). ``record`` adds or replaces the current version's snapshot and returns the history up to it;
``render_changelog`` writes one section per version, newest first, each against the version built before it.
The snapshots are kept outside the release folder (they are this home's history, not part of the dataset): a
build in a fresh home writes a changelog with one entry, so two fresh builds stay byte-identical. A rebuild of
an older version (an older checkout) shows the history as it stood at that version.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from ehrxqa_pipeline.atomic import write_json
from ehrxqa_pipeline.markdown import count, table
from ehrxqa_pipeline.release.manifest import MANIFEST_NAME
from ehrxqa_pipeline.release.tables import SPLITS

TITLES = {"ehrxqa": "EHRXQA", "mimic_cxr_vqa": "MIMIC-CXR-VQA"}
SHOWN = 50  # template rows listed per dataset and kind of change; the rest are counted
CHANGELOG_FILE = "CHANGELOG.md"
ORDER_FILE = "order.json"


def _read(path: Path):
    return json.loads(path.read_text()) if path.is_file() else None


def release_contents(release_dir: Path) -> dict:
    """Records per split and per-template counts with definitions, from the release's statistics files."""
    release_dir = Path(release_dir)
    gathered = _read(release_dir / "statistics" / "tables.json") or {}
    catalog = _read(release_dir / "ehrxqa" / "template_catalog.json") or {}
    out = {}
    ehrxqa = gathered.get("ehrxqa")
    if ehrxqa is None and (stats := _read(release_dir / "ehrxqa" / "statistics.json")):
        rows = [{"template": r["template_index"], **{s: r[s] for s in SPLITS}} for r in stats["per_template"]]
        ehrxqa = {"per_template": rows, "records": {s: sum(r[s] for r in rows) for s in SPLITS}}
    if ehrxqa is not None:
        out["ehrxqa"] = {"records": dict(ehrxqa["records"]), "templates": {
            str(r["template"]): {**{s: r[s] for s in SPLITS},
                                 "definition": (catalog.get(str(r["template"])) or {}).get("question_template")}
            for r in ehrxqa["per_template"]}}
    vqa = gathered.get("mimic_cxr_vqa")
    if vqa is not None:
        out["mimic_cxr_vqa"] = {"records": dict(vqa["records"]), "templates": {
            r["template"]: {**{s: r[s] for s in SPLITS}, "definition": f"{r['content_type']} / {r['semantic_type']}"}
            for r in vqa["per_template"]}}
    elif stats := _read(release_dir / "mimic-cxr-vqa" / "statistics.json"):
        templates: dict[str, dict] = {}
        for r in stats.get("answer_entropy", []):
            templates.setdefault(r["template_key"], {s: 0 for s in SPLITS} | {"definition": None})[r["split"]] = r["n"]
        out["mimic_cxr_vqa"] = {"records": {s: sum(t[s] for t in templates.values()) for s in SPLITS},
                                "templates": templates}
    return out


def load_release(release_dir: Path) -> dict:
    """``manifest.json`` of ``release_dir`` with ``contents`` (``release_contents``) attached."""
    release_dir = Path(release_dir)
    path = release_dir / MANIFEST_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no manifest; is {release_dir} a release folder (EHRXQA_HOME/release)?")
    return {**json.loads(path.read_text()), "contents": release_contents(release_dir)}


def _version(m: Mapping) -> str:
    code = m.get("code") or {}
    return m.get("release_version") or f"{code.get('version', '?')}+{str(code.get('sha256', '?'))[:12]}"


def _delta(a: int | None, b: int | None) -> str:
    if a is None or b is None:
        return "new" if a is None else "gone"
    return f"{b - a:+,}" if b != a else "0"


def _build_lines(old: Mapping, new: Mapping) -> list[str]:
    lines = []
    facts = [("release version", _version), ("code digest", lambda m: (m.get("code") or {}).get("sha256")),
             ("source releases", lambda m: json.dumps((m.get("sources") or {}).get("releases"), sort_keys=True)),
             ("source digest", lambda m: (m.get("sources") or {}).get("digest")), ("seed", lambda m: m.get("seed")),
             ("reproduces", lambda m: ", ".join(v["name"] for _, v in sorted(
                 ((m.get("identity") or {}).get("reproduces") or {}).items())) or "(not recorded)")]
    for label, get in facts:
        a, b = get(old), get(new)
        lines.append(f"- {label}: `{a}`" if a == b else f"- {label}: `{a}` -> `{b}`")
    oc, nc = old.get("config") or {}, new.get("config") or {}
    changed = sorted(k for k in set(oc) | set(nc) if oc.get(k) != nc.get(k))
    lines.append("- configuration: " + (", ".join(f"`{k}` changed" for k in changed) if changed else "unchanged"))
    return lines


def _files_lines(old: Mapping, new: Mapping) -> list[str]:
    of = {f["path"]: f["sha256"] for f in old.get("files", [])}
    nf = {f["path"]: f["sha256"] for f in new.get("files", [])}
    out = []
    for label, paths in (("added", sorted(set(nf) - set(of))), ("removed", sorted(set(of) - set(nf))),
                         ("changed", sorted(p for p in set(of) & set(nf) if of[p] != nf[p]))):
        out.append(f"- {label} ({len(paths)}): " + (", ".join(f"`{p}`" for p in paths) if paths else "none"))
    out.append(f"- unchanged: {sum(1 for p in set(of) & set(nf) if of[p] == nf[p])}")
    return out


def _template_key(t: str):
    return (0, int(t), "") if str(t).isdigit() else (1, 0, str(t))


def _limited(rows: list[list]) -> list[list]:
    return rows[:SHOWN] + ([[f"... {len(rows) - SHOWN} more", *[""] * (len(rows[0]) - 1)]] if len(rows) > SHOWN
                           else [])


def _dataset_section(key: str, old: Mapping | None, new: Mapping | None, h: str = "###") -> list[str]:
    title = TITLES.get(key, key)
    if old is None or new is None:
        return [f"{h} {title}", f"No counts for the {'old' if old is None else 'new'} release (no statistics files)."]
    parts = [f"{h} {title}", "Records per split:",
             table(["split", "old", "new", "change"],
                   [[s, count(old["records"].get(s)), count(new["records"].get(s)),
                     _delta(old["records"].get(s), new["records"].get(s))] for s in SPLITS]
                   + [["all", count(sum(old["records"].values())), count(sum(new["records"].values())),
                       _delta(sum(old["records"].values()), sum(new["records"].values()))]])]
    ot, nt = old["templates"], new["templates"]
    added = sorted(set(nt) - set(ot), key=_template_key)
    removed = sorted(set(ot) - set(nt), key=_template_key)
    both = sorted(set(ot) & set(nt), key=_template_key)
    redefined = [t for t in both if ot[t].get("definition") != nt[t].get("definition")]
    recounted = [t for t in both if any(ot[t].get(s) != nt[t].get(s) for s in SPLITS)]
    parts.append(f"Templates: {len(nt)} (was {len(ot)}); {len(added)} added, {len(removed)} removed, "
                 f"{len(redefined)} changed, {len(recounted)} with other counts.")
    for label, ids, src in (("Added", added, nt), ("Removed", removed, ot)):
        if ids:
            parts += [f"{label} templates:", table(["template", "definition", *SPLITS], _limited(
                [[t, src[t].get("definition") or "", *(count(src[t].get(s)) for s in SPLITS)] for t in ids]))]
    if redefined:
        parts += ["Changed templates (same id, other definition):", table(["template", "old", "new"], _limited(
            [[t, ot[t].get("definition") or "", nt[t].get("definition") or ""] for t in redefined]))]
    if recounted:
        parts += ["Counts changed (old -> new):", table(["template", *SPLITS], _limited(
            [[t, *(f"{count(ot[t].get(s))} -> {count(nt[t].get(s))}" if ot[t].get(s) != nt[t].get(s)
                   else count(nt[t].get(s)) for s in SPLITS)] for t in recounted]))]
    return parts


def changelog(old_manifest: Mapping, new_manifest: Mapping, level: int = 1) -> str:
    """Markdown: what changed from the release of ``old_manifest`` to that of ``new_manifest`` (manifests as
    ``load_release`` returns them; without ``contents`` only the build facts and files are compared).
    ``level``: the depth of its top heading (its sections are one and two levels below)."""
    h1, h2, h3 = ("#" * (level + i) for i in range(3))
    oc, nc = old_manifest.get("contents") or {}, new_manifest.get("contents") or {}
    parts = [f"{h1} Changes from {_version(old_manifest)} to {_version(new_manifest)}", f"{h2} Build",
             "\n".join(_build_lines(old_manifest, new_manifest)), f"{h2} Counts"]
    for key in sorted(set(oc) | set(nc), key=lambda k: list(TITLES).index(k) if k in TITLES else len(TITLES)):
        parts += _dataset_section(key, oc.get(key), nc.get(key), h3)
    if not (oc or nc):
        parts.append("No per-split or per-template counts in either manifest.")
    parts += [f"{h2} Files", "\n".join(_files_lines(old_manifest, new_manifest))]
    return "\n\n".join(parts) + "\n"


def snapshot(release_dir: Path, manifest: Mapping) -> dict:
    """What the history keeps of the release under ``release_dir`` whose manifest is ``manifest`` (as
    ``manifest.build_manifest`` returns it): the manifest with ``contents`` (``release_contents``), without an
    entry for CHANGELOG.md, which is written from the history and would otherwise differ from itself."""
    files = [f for f in manifest.get("files", []) if f["path"] != CHANGELOG_FILE]
    return {**manifest, "files": files, "contents": release_contents(release_dir)}


def record(history_dir: Path, current: Mapping) -> list[dict]:
    """Keep ``current`` (a ``snapshot``) as its release version's entry of ``history_dir`` (replacing an earlier
    build of the same version) and return the snapshots of every version built up to it, oldest first."""
    history_dir = Path(history_dir)
    version = _version(current)
    if "/" in version or version.startswith("."):
        raise ValueError(f"release version {version!r} cannot name a file in {history_dir}")
    order_path = history_dir / ORDER_FILE
    order = json.loads(order_path.read_text()) if order_path.is_file() else []
    if version not in order:
        order.append(version)
        write_json(order_path, order)
    write_json(history_dir / f"{version}.json", current, sort_keys=True)
    history = []
    for v in order[:order.index(version) + 1]:
        kept = _read(history_dir / f"{v}.json")
        if kept is not None:  # a snapshot removed by hand: its version drops out of the changelog
            history.append(current if v == version else kept)
    return history


def render_changelog(history: list[Mapping]) -> str:
    """CHANGELOG.md for the last release of ``history`` (oldest first, as ``record`` returns it): one section
    per version, newest first, each against the version built before it in this home."""
    parts = ["# Changelog",
             "One section per release version built in this EHRXQA_HOME, newest first, each compared with the "
             "version built before it: build facts, records per split, templates added, removed or changed, "
             "per-template counts and files. `ehrxqa changelog OLD NEW` compares any two release folders."]
    for old, new in reversed(list(zip([None, *history[:-1]], history))):
        if old is None:
            parts.append(f"## {_version(new)}\n\nThe first release version built in this home: no earlier "
                         "version to compare with.\n")
        else:
            parts.append(changelog(old, new, level=2))
    return "\n\n".join(p.rstrip("\n") for p in parts) + "\n"
