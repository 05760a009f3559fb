"""Which assets are out of date on an instance, and why: what a build must report instead of "succeeded".

An asset (partition) is out of date when it was never materialized, when its code version changed since, when
a parent's data version differs from the one its latest materialization read (the `dagster/input_data_version`
tags Dagster records), or when a parent is itself out of date. For each asset whose own inputs changed, the
reason also names the parents' blocking checks that did not pass on the parent's latest materialization
(failed, or never evaluated): what stops the automation from re-running it.

``damaged_outputs`` looks at the disk instead: the files an asset's latest materialization names that are gone
or no longer what it wrote (`ehrxqa build --changed` writes them again).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg

_INPUT = "dagster/input_data_version/"
UPSTREAM = "upstream out of date"  # the whole reason of an asset out of date only because a parent is
NOT_EVALUATED = "not evaluated on its latest materialization"


class _Latest:
    """The latest data-version record of each asset (partition) on the instance, read once per pass: the latest
    materializations of all unpartitioned assets in one query, a partitioned asset's partitions in two queries
    when one of them is first asked for, sources one by one (the asset records hold no observation)."""

    def __init__(self, instance: dg.DagsterInstance, graph):
        self.instance, self.graph = instance, graph
        keys = [k for k in graph.materializable_asset_keys if graph.get(k).partitions_def is None]
        self._records = dict.fromkeys(((k, None) for k in keys), None)  # none: never materialized
        for record in instance.get_asset_records(keys):
            self._records[(record.asset_entry.asset_key, None)] = record.asset_entry.last_materialization_record
        self._partitioned: set[dg.AssetKey] = set()

    def record(self, key: dg.AssetKey, partition: str | None = None):
        if partition is not None and key not in self._partitioned:
            self._partitioned.add(key)
            self._records.update(self._latest_by_partition(key))
        if (key, partition) not in self._records:
            self._records[(key, partition)] = self.instance.get_latest_data_version_record(
                key, is_source=key not in self.graph.materializable_asset_keys, partition_key=partition)
        return self._records[(key, partition)]

    def _latest_by_partition(self, key: dg.AssetKey) -> dict:
        latest = self.instance.get_latest_storage_id_by_partition(key, dg.DagsterEventType.ASSET_MATERIALIZATION)
        if not latest:
            return {}
        found = self.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key, storage_ids=list(latest.values())), limit=len(latest)).records
        by_id = {r.storage_id: r for r in found}
        return {(key, p): by_id.get(i) for p, i in latest.items()}

    def event(self, key: dg.AssetKey, partition: str | None = None):
        """The materialization (observation, for a source) of ``record``; None when there is none."""
        record = self.record(key, partition)
        if record is None:
            return None
        return record.asset_materialization if key in self.graph.materializable_asset_keys else record.asset_observation

    def version(self, key: dg.AssetKey, partition: str | None = None) -> str | None:
        event = self.event(key, partition)
        return (event.tags or {}).get("dagster/data_version") if event is not None else None


def blocking_problems(instance: dg.DagsterInstance, graph, latest_records: _Latest, parent: dg.AssetKey
                      ) -> list[tuple[dg.AssetCheckKey, str]]:
    """The parent's blocking checks that did not pass on its latest materialization, each with why: failed, or
    not evaluated on it (``NOT_EVALUATED``: never, or only planned by a run that was killed)."""
    latest = latest_records.record(parent)
    out = []
    for check_key in sorted(graph.get_check_keys_for_assets({parent}), key=str):
        if not graph.get(check_key).blocking:
            continue
        record = instance.get_latest_asset_check_evaluation_record(check_key)
        evaluation = record.event.dagster_event.event_specific_data if record and record.event else None
        name = f"{parent.to_user_string()}:{check_key.name}"
        target = getattr(getattr(evaluation, "target_materialization_data", None), "storage_id", None)
        evaluated = evaluation is not None and hasattr(evaluation, "passed")  # not a still-planned execution
        if not evaluated or (latest is not None and target is not None and target < latest.storage_id):
            out.append((check_key, f"blocking check {name} {NOT_EVALUATED}"))
        elif not evaluation.passed:
            out.append((check_key, f"blocking check {name} failed" + (f": {evaluation.description}"
                                                                      if evaluation.description else "")))
    return out


def _blocking(instance: dg.DagsterInstance, graph, latest_records: _Latest, parent: dg.AssetKey) -> list[str]:
    """Why each of the parent's blocking checks did not pass on its latest materialization."""
    return [why for _, why in blocking_problems(instance, graph, latest_records, parent)]


def _own_reasons(instance: dg.DagsterInstance, graph, latest: _Latest, key: dg.AssetKey) -> list[str]:
    node = graph.get(key)
    partitions = ([None] if node.partitions_def is None
                  else node.partitions_def.get_partition_keys(dynamic_partitions_store=instance))
    reasons: list[str] = []
    for partition in partitions:
        where = f"[{partition}]" if partition else ""
        event = latest.event(key, partition)
        if event is None:
            reasons.append(f"{where} never materialized".strip())
            continue
        tags = event.tags or {}
        if node.code_version is not None and tags.get("dagster/code_version") != node.code_version:
            reasons.append(f"{where} code version {tags.get('dagster/code_version')} -> {node.code_version}".strip())
        for parent in sorted(node.parent_keys, key=str):
            read = tags.get(_INPUT + parent.to_user_string())
            if read is None or graph.get(parent).partitions_def is not None:
                continue  # partitioned parents are read whole; their versions are per partition
            if read != latest.version(parent):
                reasons.append(f"{where} {parent.to_user_string()} changed since it was built".strip())
                reasons.extend(_blocking(instance, graph, latest, parent))
    return list(dict.fromkeys(reasons))


def latest_data_version(instance: dg.DagsterInstance, key: dg.AssetKey) -> str | None:
    """The data version of the latest materialization of ``key`` (unpartitioned; None: never materialized)."""
    record = instance.get_latest_data_version_record(key)
    event = record.asset_materialization if record is not None else None
    return (event.tags or {}).get("dagster/data_version") if event is not None else None


def data_versions(graph, instance: dg.DagsterInstance, keys) -> dict[str, str | None]:
    """The current data version of each of ``keys`` (None: never materialized)."""
    latest = _Latest(instance, graph)
    return {k.to_user_string(): latest.version(k) for k in keys}


def out_of_date(defs: dg.Definitions, instance: dg.DagsterInstance,
                keys: list[dg.AssetKey] | None = None) -> dict[str, str]:
    """Asset key -> why it is out of date, for the materializable assets (of ``keys`` when given), in
    dependency order; {} when everything is up to date."""
    return stale_assets(defs.resolve_asset_graph(), instance, keys)


def stale_assets(graph, instance: dg.DagsterInstance, keys=None, latest: _Latest | None = None) -> dict[str, str]:
    """``out_of_date`` on an asset graph (the Definitions' or, in an automation condition, the evaluator's);
    ``latest``: the records read already in this pass."""
    stale: dict[dg.AssetKey, str] = {}
    latest = latest or _Latest(instance, graph)
    for key in graph.toposorted_asset_keys:
        if key not in graph.materializable_asset_keys:
            continue
        reasons = _own_reasons(instance, graph, latest, key)
        upstream = sorted(p.to_user_string() for p in graph.get(key).parent_keys if p in stale)
        if not reasons and upstream:
            reasons = [f"{UPSTREAM}: {', '.join(upstream)}"]
        if reasons:
            stale[key] = "; ".join(reasons)
    wanted = set(keys) if keys is not None else None
    return {k.to_user_string(): why for k, why in stale.items() if wanted is None or k in wanted}


# -- outputs on disk ------------------------------------------------------------------------------------------
# The automation and ``out_of_date`` see the instance only; a file an asset wrote that was deleted or edited since
# (a release file opened and saved by hand, `rm -rf release/`) leaves every asset up to date. `ehrxqa build
# --changed` asks ``damaged_outputs`` first and materializes what it names again (cli/build.py).

@dataclass
class Damage:
    """What ``damaged_outputs`` found. ``assets``: per asset (in dependency order), what of its files or tables is
    missing or changed; ``files``: those in the release (relative paths), but the manifest's own; ``manifest``: the
    asset that writes the manifest and SHA256SUMS.txt, ``manifest_sha256`` the manifest as it wrote it, and
    ``manifest_due`` whether it is out of date (it lists the release again when what it reads is done);
    ``unnamed``: listed release files gone or changed that no materialization names (a home built before every
    file was named: only a full build writes them; the manifest must not list the release without them)."""

    assets: dict[dg.AssetKey, list[str]] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    manifest: dg.AssetKey | None = None
    manifest_sha256: str | None = None
    manifest_due: bool = False
    unnamed: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.assets or self.unnamed)

    def lines(self) -> list[str]:
        return [f"{k.to_user_string()}: {'; '.join(why)}" for k, why in self.assets.items()] + self.unnamed_lines()

    def unnamed_lines(self) -> list[str]:
        return [f"release/{rel} is gone or changed, and no asset's latest materialization names it: `ehrxqa build` "
                "(every asset) writes the release again" for rel in self.unnamed]


def written_paths(metadata: Mapping) -> list[Path]:
    """The files and folders a materialization's metadata names: its path values, and the absolute paths among
    the strings of its JSON values (``{"test": "/.../ehrxqa/test.json"}``, ``assets.metadata.written``)."""
    out, stack = [], []
    for value in metadata.values():
        if isinstance(value, dg.PathMetadataValue):
            out.append(Path(value.value))
        elif isinstance(value, dg.JsonMetadataValue):
            stack.append(value.value)
    while stack:
        x = stack.pop()
        if isinstance(x, Mapping):
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
        elif isinstance(x, str) and os.path.isabs(x):
            out.append(Path(x))
    return out


def _writers(path: Path, written: Mapping[dg.AssetKey, tuple[int, list[Path]]]) -> list[dg.AssetKey]:
    """The assets whose materialization names ``path`` itself, else those naming the deepest folder holding it."""
    exact = [k for k, (_, paths) in written.items() if path in paths]
    if exact:
        return exact
    depth = {k: max((len(p.parts) for p in paths if path.is_relative_to(p)), default=0)
             for k, (_, paths) in written.items()}
    deepest = max(depth.values(), default=0)
    return [k for k, d in depth.items() if d and d == deepest]


def written_by(graph, instance: dg.DagsterInstance, home: Path, release_dir: Path, inputs: Path | None = None,
               latest: _Latest | None = None) -> dict[dg.AssetKey, tuple[int, list[Path]]]:
    """Per unpartitioned asset (in dependency order), the storage id of its latest materialization and the files
    and folders under ``home`` its metadata names (``written_paths``; not under ``inputs``, the source). Paths are
    recorded absolute, in the home of the build that wrote them: the homes this one was moved or copied from (a
    copy of a build on a larger disk) are found where the manifest wrote SHA256SUMS.txt (in ``release_dir``, a
    folder of the home) over its materializations, and their paths are read in this home. ``latest``: the
    records read already in this pass."""
    from ehrxqa_pipeline.release.manifest import SUMS_NAME

    home, release_dir = Path(os.path.abspath(home)), Path(os.path.abspath(release_dir))
    inner = release_dir.relative_to(home).parts

    def homes_of(paths) -> set[Path]:  # the homes whose SHA256SUMS.txt ``paths`` name
        return {Path(*p.parts[:-1 - len(inner)]) for p in paths
                if p.name == SUMS_NAME and p.parent.parts[len(p.parts) - 1 - len(inner):] == inner}

    latest = latest or _Latest(instance, graph)
    recorded = {}
    for key in graph.toposorted_asset_keys:
        if key in graph.materializable_asset_keys and graph.get(key).partitions_def is None:
            record = latest.record(key)
            if record is not None:
                recorded[key] = (record.storage_id, written_paths(record.asset_materialization.metadata))
    homes = {home}
    manifest = next((k for k, (_, paths) in recorded.items() if homes_of(paths)), None)
    if manifest is not None and not all(p.is_relative_to(home) for _, paths in recorded.values() for p in paths):
        for r in instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=manifest), limit=100).records:
            homes |= homes_of(written_paths(r.asset_materialization.metadata))  # moved from one, then another
    homes_deepest_first = sorted(homes, key=lambda h: -len(h.parts))

    def here(p: Path) -> Path:
        was = next((h for h in homes_deepest_first if p.is_relative_to(h)), None)
        return home / p.relative_to(was) if was is not None else p

    out = {}
    for key, (storage_id, paths) in recorded.items():
        paths = [q for q in map(here, paths) if q.is_relative_to(home) and not (inputs and q.is_relative_to(inputs))]
        if paths:
            out[key] = (storage_id, paths)
    return out


def damaged_outputs(graph, instance: dg.DagsterInstance, home: Path, release_dir: Path,
                    inputs: Path | None = None, tables: Collection[str] | None = None) -> Damage:
    """The assets whose latest materialization wrote files under ``home`` (``written_by``), or tables, that are no
    longer what it wrote:

    - a table its data contract names is not among ``tables`` (schema.name, lower case: those of the warehouse;
      None: not looked at), as after the warehouse file was deleted (any partition materialized: all again);
    - a file or folder it names is gone;
    - a release file is missing or differs from its line of SHA256SUMS.txt (or, when that file is itself gone or
      edited, from its entry in the manifest, if the manifest is as its step wrote it), and the manifest was
      written after the asset: a file its asset wrote again since (a build under way, or killed) is not damage,
      the manifest, out of date then, lists it when it runs. A file SHA256SUMS.txt does not list is left alone;
      one it lists that no materialization names is ``unnamed``.

    A changed file of an asset whose own inputs changed (``stale_assets``, not only ``UPSTREAM``) is left out: it
    runs anyway, and the file may be one a build killed before its materialization was recorded had written.
    ``files``, which must come back as listed, holds the release files of the others only.

    Stat calls and ``sha256_file`` (remembered by stat key) when the release is whole: a fraction of a second on
    a full-scale home."""
    import json

    from ehrxqa_pipeline.hashing import sha256_file
    from ehrxqa_pipeline.release.manifest import MANIFEST_NAME, SUMS_NAME, manifest_problems, sums_problems

    home, release_dir = Path(os.path.abspath(home)), Path(os.path.abspath(release_dir))
    damage = Damage()
    # An asset whose own inputs changed runs anyway, and a file of it that differs may be a build's under way
    # (killed between its files and its materialization): not damage. A file or table gone is, whatever the
    # asset's state (writes are atomic: a kill leaves none missing): what reads it cannot wait for the rounds.
    latest = _Latest(instance, graph)  # (one read of the asset records for the three uses below)
    stale = stale_assets(graph, instance, latest=latest)
    runs = {dg.AssetKey.from_user_string(k) for k, why in stale.items() if not why.startswith(UPSTREAM)}
    written = written_by(graph, instance, home, release_dir, inputs, latest)
    damage.manifest = next((k for k, (_, paths) in written.items() if release_dir / SUMS_NAME in paths), None)
    if damage.manifest is not None:
        damage.manifest_due = damage.manifest.to_user_string() in stale
        damage.manifest_sha256 = getattr(latest.event(damage.manifest).metadata.get("manifest_sha256"), "value", None)
    if tables is not None:
        from ehrxqa_pipeline.contracts import all_contracts

        present, by_asset = {t.lower() for t in tables}, {}
        for contract in all_contracts():
            for asset, table in contract.tables:
                by_asset.setdefault(dg.AssetKey.from_user_string(asset), []).append(table)
        for key, its_tables in by_asset.items():
            gone = [t for t in its_tables if t.lower() not in present]
            if gone and key in graph.materializable_asset_keys and instance.get_latest_materialization_event(key):
                damage.assets.setdefault(key, []).extend(f"table {t} is missing from the warehouse" for t in gone)
    for key, (_, paths) in written.items():
        for p in paths:
            if not p.exists():
                damage.assets.setdefault(key, []).append(f"{p.relative_to(home).as_posix()} is missing")
    if damage.manifest is not None:
        since = written[damage.manifest][0]
        problems = sums_problems(release_dir)
        if SUMS_NAME in problems:  # the manifest, as its step wrote it, is the record then
            doc = release_dir / MANIFEST_NAME
            if doc.is_file() and sha256_file(doc) == damage.manifest_sha256:
                problems = {SUMS_NAME: problems[SUMS_NAME],
                            **manifest_problems(release_dir, json.loads(doc.read_text()))}
            else:  # nothing says what the release held: all of it is written again
                for key, (_, paths) in written.items():
                    if any(p.is_relative_to(release_dir) for p in paths):
                        damage.assets.setdefault(key, []).append(
                            f"release/{SUMS_NAME} and {MANIFEST_NAME} are gone or not as written: the release cannot "
                            "be compared with what was written")
        for rel, why in problems.items():
            if why == "unlisted":
                continue  # not the build's (a file the user put there): left alone
            writers = _writers(release_dir / rel, written)
            if not writers:  # (every file a build writes is named: tests/test_damaged_outputs.py)
                damage.unnamed.append(rel)
            for w in writers:
                as_listed = w not in runs and written[w][0] <= since  # written again, it is as listed
                if why == "changed" and not as_listed:
                    continue
                damage.assets.setdefault(w, []).append(f"release/{rel} {why} since the manifest listed it")
                if as_listed and w != damage.manifest and rel not in damage.files:
                    damage.files.append(rel)
    order = {k: i for i, k in enumerate(graph.toposorted_asset_keys)}
    damage.assets = {k: list(dict.fromkeys(damage.assets[k])) for k in sorted(damage.assets, key=order.get)}
    return damage
