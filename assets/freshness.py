"""Which assets are out of date on an instance, and why: what a build must report instead of "succeeded".

An asset (partition) is out of date when it was never materialized, when its code version changed since, when
a parent's data version differs from the one its latest materialization read (the `dagster/input_data_version`
tags Dagster records), or when a parent is itself out of date. For each asset whose own inputs changed, the
reason also names the parents' blocking checks that did not pass on the parent's latest materialization
(failed, or never evaluated): what stops the automation from re-running it.
"""

from __future__ import annotations

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


def stale_assets(graph, instance: dg.DagsterInstance, keys=None) -> dict[str, str]:
    """``out_of_date`` on an asset graph (the Definitions' or, in an automation condition, the evaluator's)."""
    stale: dict[dg.AssetKey, str] = {}
    latest = _Latest(instance, graph)
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
