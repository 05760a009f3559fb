"""Reader for the Chest ImaGenome ontology files (``chest-imagenome/1.0.0/semantics/``).

- ``objects_extracted_from_reports_v1.txt``: one object name per line; commas and surrounding whitespace
  are stripped, blank lines skipped.
- ``attribute_relations_v1.txt``: ``category|relation|attribute`` per line, commas stripped.
- ``label_to_UMLS_mapping.json``: an object whose keys ``all_children`` (label -> every descendant label)
  and ``possible_attribute_of`` (attribute -> objects it may occur in) the pipeline reads.

Filtering (target categories, removed attributes) is not done here; the ontology step owns it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from .errors import SourceError
from .layout import SourceLayout, as_layout
from .schema import IMAGENOME, SEMANTICS_ATTRIBUTES, SEMANTICS_OBJECTS, SEMANTICS_UMLS

_FIX = ("download the Chest ImaGenome 1.0.0 semantics/ folder unchanged from PhysioNet into "
        "chest-imagenome/1.0.0/semantics/")


@dataclass(frozen=True)
class Semantics:
    objects: list[str]
    attributes: list[tuple[str, str, str]]  # (category, relation, attribute)
    all_children: dict[str, list[str]]
    possible_attribute_of: dict[str, list[str]]
    raw: dict = field(repr=False)


def semantics_paths(root: Path | SourceLayout) -> tuple[Path, ...]:
    """The three semantics files of the Chest ImaGenome release below ``root``."""
    layout = as_layout(root)
    return tuple(layout.path(IMAGENOME, rel) for rel in (SEMANTICS_OBJECTS, SEMANTICS_ATTRIBUTES, SEMANTICS_UMLS))


def _shown(root: Path | SourceLayout, rel: str) -> str:
    """How messages name a semantics file: relative to the source root."""
    layout = as_layout(root)
    try:
        return layout.relative(layout.path(IMAGENOME, rel))
    except SourceError:
        return rel


def _lines(root: Path | SourceLayout, rel: str) -> list[str]:
    layout = as_layout(root)
    path = layout.path(IMAGENOME, rel)
    shown = layout.relative(path)
    if not path.is_file():
        raise SourceError(shown, "file not found", fix=_FIX)
    try:
        return path.read_text(encoding="utf-8-sig").splitlines()
    except UnicodeDecodeError as exc:
        raise SourceError(shown, f"is not UTF-8 text (byte {exc.start})", fix=_FIX) from None
    except OSError as exc:
        raise SourceError(shown, f"cannot be read ({exc.strerror or exc})",
                          fix="check that the file is readable by this user") from None


def read_objects(root: Path | SourceLayout) -> list[str]:
    out = []
    for line in _lines(root, SEMANTICS_OBJECTS):
        name = line.replace(",", "").strip()
        if name:
            out.append(name)
    if not out:
        raise SourceError(_shown(root, SEMANTICS_OBJECTS), "holds no object names", fix=_FIX)
    return out


def read_attributes(root: Path | SourceLayout) -> list[tuple[str, str, str]]:
    out = []
    for number, line in enumerate(_lines(root, SEMANTICS_ATTRIBUTES), start=1):
        text = line.replace(",", "").strip()
        if not text:
            continue
        parts = [p.strip() for p in text.split("|")]
        if len(parts) != 3 or not all(parts):
            raise SourceError(
                _shown(root, SEMANTICS_ATTRIBUTES), "has a line that is not 'category|relation|attribute'",
                row=number, value=line, unit="line",
                fix=_FIX + "; every non-blank line has three non-empty '|'-separated fields")
        out.append((parts[0], parts[1], parts[2]))
    if not out:
        raise SourceError(_shown(root, SEMANTICS_ATTRIBUTES), "holds no attribute lines", fix=_FIX)
    return out


def _string_lists(root: Path | SourceLayout, data: dict, key: str) -> dict[str, list[str]]:
    if key not in data:
        raise SourceError(_shown(root, SEMANTICS_UMLS), f"has no key '{key}' (keys: {', '.join(sorted(data)[:10])})",
                          column=key, fix=_FIX)
    value = data[key]
    if not isinstance(value, dict):
        raise SourceError(_shown(root, SEMANTICS_UMLS), f"key '{key}' is not an object of label -> list of labels",
                          column=key, fix=_FIX)
    for label, items in value.items():
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise SourceError(_shown(root, SEMANTICS_UMLS), f"'{key}' entry {label!r} is not a list of labels",
                              column=key, fix=_FIX)
    return {label: list(items) for label, items in value.items()}


def read_umls(root: Path | SourceLayout) -> dict:
    text = "\n".join(_lines(root, SEMANTICS_UMLS))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SourceError(_shown(root, SEMANTICS_UMLS), f"is not valid JSON ({exc.msg} at column {exc.colno})",
                          row=exc.lineno, unit="line", fix=_FIX) from None
    if not isinstance(data, dict):
        raise SourceError(_shown(root, SEMANTICS_UMLS), "is not a JSON object", fix=_FIX)
    return data


def read_semantics(root: Path | SourceLayout) -> Semantics:
    """Parse the three ontology files below ``root``; ``SourceError`` names the file and line on problems."""
    root = as_layout(root)
    raw = read_umls(root)
    return Semantics(
        objects=read_objects(root),
        attributes=read_attributes(root),
        all_children=_string_lists(root, raw, "all_children"),
        possible_attribute_of=_string_lists(root, raw, "possible_attribute_of"),
        raw=raw,
    )
