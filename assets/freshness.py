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


def _version(instance: dg.DagsterInstance, graph, key: dg.AssetKey, partition: str | None = None) -> str | None:
    source = key not in graph.materializable_asset_keys
    record = instance.get_latest_data_version_record(key, is_source=source, partition_key=partition)
    if record is None:
        return None
    event = record.asset_materialization if not source else record.asset_observation
    return (event.tags or {}).get("dagster/data_version") if event is not None else None


def _blocking(instance: dg.DagsterInstance, graph, parent: dg.AssetKey) -> list[str]:
    """The parent's blocking checks that did not pass on its latest materialization."""
    latest = instance.get_latest_data_version_record(parent, is_source=False)
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
            out.append(f"blocking check {name} not evaluated on its latest materialization")
        elif not evaluation.passed:
            out.append(f"blocking check {name} failed" + (f": {evaluation.description}" if evaluation.description
                                                           else ""))
    return out


def _own_reasons(instance: dg.DagsterInstance, graph, key: dg.AssetKey) -> list[str]:
    node = graph.get(key)
    partitions = ([None] if node.partitions_def is None
                  else node.partitions_def.get_partition_keys(dynamic_partitions_store=instance))
    reasons: list[str] = []
    for partition in partitions:
        where = f"[{partition}]" if partition else ""
        record = instance.get_latest_data_version_record(key, is_source=False, partition_key=partition)
        event = record.asset_materialization if record is not None else None
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
            if read != _version(instance, graph, parent):
                reasons.append(f"{where} {parent.to_user_string()} changed since it was built".strip())
                reasons.extend(_blocking(instance, graph, parent))
    return list(dict.fromkeys(reasons))


def out_of_date(defs: dg.Definitions, instance: dg.DagsterInstance,
                keys: list[dg.AssetKey] | None = None) -> dict[str, str]:
    """Asset key -> why it is out of date, for the materializable assets (of ``keys`` when given), in
    dependency order; {} when everything is up to date."""
    return stale_assets(defs.resolve_asset_graph(), instance, keys)


def stale_assets(graph, instance: dg.DagsterInstance, keys=None) -> dict[str, str]:
    """``out_of_date`` on an asset graph (the Definitions' or, in an automation condition, the evaluator's)."""
    stale: dict[dg.AssetKey, str] = {}
    for key in graph.toposorted_asset_keys:
        if key not in graph.materializable_asset_keys:
            continue
        reasons = _own_reasons(instance, graph, key)
        upstream = sorted(p.to_user_string() for p in graph.get(key).parent_keys if p in stale)
        if not reasons and upstream:
            reasons = [f"upstream out of date: {', '.join(upstream)}"]
        if reasons:
            stale[key] = "; ".join(reasons)
    wanted = set(keys) if keys is not None else None
    return {k.to_user_string(): why for k, why in stale.items() if wanted is None or k in wanted}
