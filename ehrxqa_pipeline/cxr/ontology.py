"""The Chest ImaGenome label ontology used by MIMIC-CXR-VQA and EHRXQA, built from the parsed semantics files.

Source: ``chest-imagenome/1.0.0/semantics/`` through ``sources.semantics.read_semantics``. Nothing here is
hard-coded except what the paper and the published builders decide on top of the files
(reference-builders.md 3.2): the five target categories, the removed minority labels and the
``all_children`` edits.

Choices (and where they depart from the published scripts, reference-builders.md section 8):

- **Objects** = the report objects file, in file order, duplicates dropped (38 in the release);
  ``objects`` excludes ``REMOVED_OBJECTS`` (36 left).
- **Attributes** = the attribute-file lines of the 5 ``TARGET_CATEGORIES`` (``nlp``, temporal, severity ...
  lines are ignored), file order, duplicates dropped (so a doubly listed ``sternotomy wires`` is removed
  completely -- defect 7); an attribute listed under two target categories keeps its first category and
  the conflict is recorded in ``warnings``. ``attributes`` excludes ``REMOVED_ATTRIBUTES`` (68 left).
- **Hierarchy** = ``all_children`` after ``ALL_CHILDREN_EDITS`` (``+=`` appends missing children, ``:=``
  replaces, a missing key is created). Ancestors are the TRANSITIVE closure of that graph over every
  label of the file (intermediate labels such as ``lungs`` or ``hilar structures`` that are not report
  objects still connect their ancestors and descendants), then restricted to report objects (for
  objects) and target attributes (for attributes). The published augmentation is a single,
  order-dependent pass (defect 8). A label listed as its own child is ignored; any longer cycle raises
  ``OntologyCycleError`` naming it.
- **Removed labels** stay in the hierarchy: they are real findings, only absent from the answer
  vocabulary, so an affirmed ``pigtail catheter`` still implies its parent ``chest tube`` (as in the
  published order: propagate, then remove). They never appear in ``pairs``.
- **Possible pairs** = ``possible_attribute_of`` closed to a fixed point under two rules: an attribute
  possible at an object is possible at every ancestor object, and an object possible for an attribute
  is possible for every ancestor attribute. With transitive ancestor maps the fixed point is
  ``{(ancestor-or-self of o, ancestor-or-self of a) : (o, a) listed}``; every label of the file takes
  part (including the removed ones and objects without a report name), then the set is restricted to
  report objects x target attributes (``all_pairs``, for reporting) and to kept objects x kept
  attributes (``pairs``: the label pool; the paper reports 563). The pool is closed upwards: every
  ancestor pair of a pool pair that uses kept labels is in the pool.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

import duckdb
import polars as pl

from ehrxqa_pipeline.contracts import load_contract
from ehrxqa_pipeline.sources.semantics import Semantics

TARGET_CATEGORIES: tuple[str, ...] = ("anatomicalfinding", "technicalassessment", "disease", "tubesandlines",
                                      "device")
# Minority labels removed by the paper (6 attributes + sternotomy wires, and the two arms).
REMOVED_OBJECTS: tuple[str, ...] = ("left arm", "right arm")
REMOVED_ATTRIBUTES: tuple[str, ...] = (
    "artifact", "bronchiectasis", "pigtail catheter", "skin fold", "aortic graft/repair",
    "diaphragmatic eventration (benign)", "sternotomy wires")
# The documented edits of all_children, applied in this order: (label, "+=" append | ":=" replace, children).
ALL_CHILDREN_EDITS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("lungs", "+=", ("hilar structures", "right hilar structures", "left hilar structures")),
    ("left lung", "+=", ("left hilar structures",)),
    ("right lung", "+=", ("right hilar structures",)),
    ("hilar structures", ":=", ("right hilar structures", "left hilar structures")),
    ("mediastinum", "+=", ("aortic arch", "svc")),
)
PAIR_SCHEMA = load_contract("cxr_labels.pairs").polars_schema()  # the pool (table cxr_labels.pairs)


class OntologyCycleError(ValueError):
    """The label hierarchy has a cycle, so ancestors are undefined."""


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def edit_all_children(all_children: Mapping[str, Iterable[str]]) -> dict[str, tuple[str, ...]]:
    """``all_children`` after ``ALL_CHILDREN_EDITS`` (a copy; the input is not changed)."""
    out = {k: _unique(v) for k, v in all_children.items()}
    for label, op, children in ALL_CHILDREN_EDITS:
        out[label] = _unique(children) if op == ":=" else _unique((*out.get(label, ()), *children))
    return out


def descendants_closure(children: Mapping[str, Iterable[str]]) -> dict[str, frozenset[str]]:
    """label -> every label reachable through ``children`` (the transitive closure), for every label named.

    Self-references are ignored; a longer cycle raises ``OntologyCycleError`` with the cycle spelled out.
    Iterative depth-first search, so deep hierarchies cannot hit the recursion limit.
    """
    graph = {k: tuple(c for c in v if c != k) for k, v in children.items()}
    nodes = _unique((*graph, *(c for v in graph.values() for c in v)))
    done: dict[str, frozenset[str]] = {}
    for root in nodes:
        if root in done:
            continue
        path, on_path, stack = [root], {root}, [iter(graph.get(root, ()))]
        while stack:
            child = next(stack[-1], None)
            if child is None:
                node = path.pop()
                on_path.discard(node)
                stack.pop()
                done[node] = frozenset(d for c in graph.get(node, ()) for d in (c, *done[c]))
            elif child in on_path:
                cycle = " -> ".join(path[path.index(child):] + [child])
                raise OntologyCycleError(
                    f"label_to_UMLS_mapping.json all_children has a cycle: {cycle}; a label cannot be its "
                    "own descendant -- fix the semantics file (or the edits in cxr/ontology.py)")
            elif child not in done:
                path.append(child)
                on_path.add(child)
                stack.append(iter(graph.get(child, ())))
    return done


def ancestors_of(descendants: Mapping[str, frozenset[str]]) -> dict[str, frozenset[str]]:
    """Invert a descendants map: label -> every label that has it as a descendant."""
    acc: dict[str, set[str]] = {k: set() for k in descendants}
    for parent, kids in descendants.items():
        for k in kids:
            acc.setdefault(k, set()).add(parent)
    return {k: frozenset(v) for k, v in acc.items()}


def close_possible(possible: Mapping[str, Iterable[str]], ancestors: Mapping[str, frozenset[str]]
                   ) -> frozenset[tuple[str, str]]:
    """(object, attribute) pairs of ``possible`` (attribute -> objects) at their fixed point under the two
    augmentation rules (object -> ancestor objects, attribute -> ancestor attributes); ``ancestors`` must
    be transitive, which makes one application of each rule the fixed point."""
    up = lambda label: (label, *ancestors.get(label, ()))  # noqa: E731
    return frozenset((po, pa) for a, objs in possible.items() for o in objs for po in up(o) for pa in up(a))


@dataclass(frozen=True)
class Ontology:
    """Objects, attributes, transitive hierarchies and the possible-pair pool (see the module docstring).

    Mappings are plain dicts for speed; treat them as read-only.
    """

    all_objects: tuple[str, ...]  # report objects, removed ones included (38)
    all_attributes: tuple[str, ...]  # target-category attributes, removed ones included (75)
    category_of: dict[str, str]  # attribute -> category, for all_attributes
    object_ancestors: dict[str, frozenset[str]]  # report object -> ancestor report objects (transitive)
    attribute_ancestors: dict[str, frozenset[str]]  # target attribute -> ancestor target attributes
    all_pair_set: frozenset[tuple[str, str]]  # possible (object, attribute) over all_objects x all_attributes
    removed_objects: tuple[str, ...] = REMOVED_OBJECTS
    removed_attributes: tuple[str, ...] = REMOVED_ATTRIBUTES
    warnings: tuple[str, ...] = ()
    all_children: dict[str, tuple[str, ...]] = field(default_factory=dict, repr=False)  # edited

    @cached_property
    def objects(self) -> tuple[str, ...]:
        """Kept report objects (36 in the release), file order."""
        return tuple(o for o in self.all_objects if o not in self.removed_objects)

    @cached_property
    def attributes(self) -> tuple[str, ...]:
        """Kept attributes (68 in the release), file order."""
        return tuple(a for a in self.all_attributes if a not in self.removed_attributes)

    @cached_property
    def attributes_by_category(self) -> dict[str, tuple[str, ...]]:
        """Kept attributes per target category (categories in ``TARGET_CATEGORIES`` order)."""
        return {c: tuple(a for a in self.attributes if self.category_of[a] == c) for c in TARGET_CATEGORIES}

    @cached_property
    def pair_set(self) -> frozenset[tuple[str, str]]:
        """The label pool: possible pairs over kept objects x kept attributes."""
        keep_o, keep_a = set(self.objects), set(self.attributes)
        return frozenset(p for p in self.all_pair_set if p[0] in keep_o and p[1] in keep_a)

    @property
    def n_pairs(self) -> int:
        return len(self.pair_set)

    @cached_property
    def pairs(self) -> pl.DataFrame:
        """object, attribute, category: one row per pool pair, sorted by (object, attribute)."""
        rows = sorted(self.pair_set)
        return pl.DataFrame([(o, a, self.category_of[a]) for o, a in rows], schema=PAIR_SCHEMA, orient="row")

    @cached_property
    def all_pairs(self) -> pl.DataFrame:
        """Every possible pair incl. removed labels, with ``removed`` (True when not in the pool); sorted."""
        rows = [(o, a, self.category_of[a], (o, a) not in self.pair_set) for o, a in sorted(self.all_pair_set)]
        return pl.DataFrame(rows, schema=load_contract("cxr_labels.pairs_all").polars_schema(), orient="row")

    def object_closure(self) -> pl.DataFrame:
        """object, ancestor: every report object with itself and each ancestor report object."""
        rows = [(o, p) for o in self.all_objects for p in (o, *sorted(self.object_ancestors[o]))]
        return pl.DataFrame(rows, schema={"object": pl.String, "ancestor": pl.String}, orient="row")

    def attribute_closure(self) -> pl.DataFrame:
        """attribute, ancestor: every target attribute with itself and each ancestor target attribute."""
        rows = [(a, p) for a in self.all_attributes for p in (a, *sorted(self.attribute_ancestors[a]))]
        return pl.DataFrame(rows, schema={"attribute": pl.String, "ancestor": pl.String}, orient="row")

    def summary(self) -> dict:
        """Counts for asset metadata."""
        return {"objects": len(self.objects), "attributes": len(self.attributes),
                "attributes_by_category": {c: len(v) for c, v in self.attributes_by_category.items()},
                "pairs": self.n_pairs, "pairs_incl_removed": len(self.all_pair_set),
                "removed_objects": list(self.removed_objects), "removed_attributes": list(self.removed_attributes),
                "warnings": list(self.warnings)}


def build_ontology(sem: Semantics) -> Ontology:
    """The ontology of ``sem`` (parsed semantics files); raises ``OntologyCycleError`` on a cyclic hierarchy."""
    warnings: list[str] = []
    all_objects = _unique(sem.objects)
    category_of: dict[str, str] = {}
    for category, _relation, attribute in sem.attributes:
        if category not in TARGET_CATEGORIES:
            continue
        seen = category_of.setdefault(attribute, category)
        if seen != category:
            warnings.append(f"attribute {attribute!r} is listed under {seen} and {category}; kept {seen}")
    all_attributes = tuple(category_of)
    for kind, removed, present in (("object", REMOVED_OBJECTS, all_objects),
                                   ("attribute", REMOVED_ATTRIBUTES, all_attributes)):
        missing = [r for r in removed if r not in present]
        if missing:
            warnings.append(f"removed {kind}s not in the semantics files: {', '.join(missing)}")

    edited = edit_all_children(sem.all_children)
    ancestors = ancestors_of(descendants_closure(edited))
    obj_set, att_set = set(all_objects), set(all_attributes)
    object_ancestors = {o: ancestors.get(o, frozenset()) & obj_set for o in all_objects}
    attribute_ancestors = {a: ancestors.get(a, frozenset()) & att_set for a in all_attributes}

    closed = close_possible(sem.possible_attribute_of, ancestors)
    all_pair_set = frozenset((o, a) for o, a in closed if o in obj_set and a in att_set)
    return Ontology(all_objects=all_objects, all_attributes=all_attributes, category_of=category_of,
                    object_ancestors=object_ancestors, attribute_ancestors=attribute_ancestors,
                    all_pair_set=all_pair_set, warnings=tuple(warnings), all_children=edited)


def ontology_tables(ontology: Ontology) -> dict[str, pl.DataFrame]:
    """The ontology as tables (name -> frame; contracts data_contracts/cxr_labels.ontology_*.yaml), besides
    ``pairs`` / ``all_pairs``: report objects and target attributes in file order with their removed flag
    (attributes with their category), and both closures. ``read_ontology`` rebuilds the ontology from them, so
    later steps read it from the warehouse, not from the semantics files."""
    rem_o, rem_a = set(ontology.removed_objects), set(ontology.removed_attributes)
    objects, attributes = ontology.all_objects, ontology.all_attributes
    columns = {
        "ontology_objects": {"position": range(len(objects)), "object": objects,
                             "removed": [o in rem_o for o in objects]},
        "ontology_attributes": {"position": range(len(attributes)), "attribute": attributes,
                                "category": [ontology.category_of[a] for a in attributes],
                                "removed": [a in rem_a for a in attributes]},
        "ontology_object_closure": ontology.object_closure().to_dict(as_series=False),
        "ontology_attribute_closure": ontology.attribute_closure().to_dict(as_series=False),
    }
    return {name: pl.DataFrame(data, schema=load_contract(f"cxr_labels.{name}").polars_schema())
            for name, data in columns.items()}


def read_ontology(con: duckdb.DuckDBPyConnection, schema: str) -> Ontology:
    """The ontology written to ``schema`` (``ontology_tables`` and ``all_pairs`` as ``pairs_all``) by
    cxr_labels/ontology. Warnings and the edited ``all_children`` stay with that asset (its metadata)."""
    objects = con.execute(f"SELECT object, removed FROM {schema}.ontology_objects ORDER BY position").fetchall()
    attributes = con.execute(f"SELECT attribute, category, removed FROM {schema}.ontology_attributes "
                             "ORDER BY position").fetchall()

    def ancestors(table: str, column: str) -> dict[str, frozenset[str]]:
        out: dict[str, set[str]] = {}
        for label, ancestor in con.execute(f"SELECT {column}, ancestor FROM {schema}.{table}").fetchall():
            out.setdefault(label, set()).update({ancestor} - {label})  # the closure lists each label with itself
        return {k: frozenset(v) for k, v in out.items()}

    return Ontology(
        all_objects=tuple(o for o, _ in objects), all_attributes=tuple(a for a, _, _ in attributes),
        category_of={a: c for a, c, _ in attributes},
        object_ancestors=ancestors("ontology_object_closure", "object"),
        attribute_ancestors=ancestors("ontology_attribute_closure", "attribute"),
        all_pair_set=frozenset(con.execute(f"SELECT object, attribute FROM {schema}.pairs_all").fetchall()),
        removed_objects=tuple(o for o, removed in objects if removed),
        removed_attributes=tuple(a for a, _, removed in attributes if removed))
