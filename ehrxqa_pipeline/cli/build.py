"""`ehrxqa build`: observe the sources, then materialize a selection in process on the persistent instance."""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field

import dagster as dg

from ehrxqa_pipeline.config import Settings


@dataclass
class BuildSummary:
    success: bool
    seconds: float
    materialized: dict[str, dict] = field(default_factory=dict)  # asset key -> selected metadata
    checks: list[tuple[str, str, bool, str]] = field(default_factory=list)  # key, check, passed, text
    failures: list[str] = field(default_factory=list)


def _selection(defs: dg.Definitions, select: str | None) -> tuple[list[dg.AssetKey], list[dg.AssetKey]]:
    graph = defs.resolve_asset_graph()
    if select:
        keys = dg.AssetSelection.from_string(select).resolve(graph)
    else:
        keys = graph.materializable_asset_keys
    sources = {k for k in graph.observable_asset_keys}
    return sorted(k for k in keys if k not in sources), sorted(sources)


def _root_cause(error) -> str:
    """The innermost error message: the user's problem, not Dagster's wrapper around it."""
    while getattr(error, "cause", None) is not None:
        error = error.cause
    return error.message.strip()


def _step_failures(result, partition: str | None = None) -> list[str]:
    where = f"[{partition}]" if partition else ""
    return [f"{e.step_key}{where}: {_root_cause(e.event_specific_data.error)}"
            for e in result.all_events if e.is_step_failure]


def _stages(defs: dg.Definitions, targets: list[dg.AssetKey]) -> list[list[dg.AssetKey]]:
    """Split targets into consecutive stages, each all-partitioned or all-unpartitioned, in dependency
    order: a run cannot mix partitioned and unpartitioned assets."""
    graph = defs.resolve_asset_graph()
    wanted, stage = set(targets), {}
    for key in graph.toposorted_asset_keys:
        if key not in wanted:
            continue
        partitioned = graph.get(key).partitions_def is not None
        level = 0
        for parent in graph.get(key).parent_keys:
            if parent in stage:
                same = (graph.get(parent).partitions_def is not None) == partitioned
                level = max(level, stage[parent] + (0 if same else 1))
        stage[key] = level
    return [[k for k in targets if stage[k] == lvl] for lvl in sorted(set(stage.values()))]


def _stage_config(base: dict, op_config: dict, stage: list[dg.AssetKey]) -> dict:
    """Run config of one stage: ``base`` plus the op config of the stage's assets (a run rejects config
    for ops it does not contain). An asset's op is named after its key: ehrxqa/questions -> ehrxqa__questions."""
    ops = {k.to_python_identifier() for k in stage}
    mine = {name: cfg for name, cfg in op_config.items() if name in ops}
    return {**base, "ops": mine} if mine else base


def build(settings: Settings, select: str | None = None, instance: dg.DagsterInstance | None = None,
          defs: dg.Definitions | None = None, run_config: dict | None = None) -> BuildSummary:
    """Run on ``instance`` (default: the one under DAGSTER_HOME, see ``prepare_instance``). ``run_config``:
    ``{"ops": {op name: {"config": ...}}}`` for configurable assets, e.g. smaller EHRXQA caps in tests."""
    if defs is None:
        from ehrxqa_pipeline.definitions import defs
    start = time.perf_counter()
    targets, sources = _selection(defs, select)
    job = defs.resolve_implicit_global_asset_job_def()
    quiet = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}  # step events, not engine chatter
    op_config = dict((run_config or {}).get("ops", {}))
    with (nullcontext(instance) if instance is not None else dg.DagsterInstance.get()) as instance:
        # Observing records each source file's content hash, so later changes are detected.
        observed = job.execute_in_process(instance=instance, asset_selection=sources, raise_on_error=False,
                                          run_config=quiet)
        failures = _step_failures(observed)
        results = []
        graph = defs.resolve_asset_graph()
        for stage in _stages(defs, targets) if observed.success else []:
            pdef = graph.get(stage[0]).partitions_def
            keys = pdef.get_partition_keys(dynamic_partitions_store=instance) if pdef else [None]
            for partition in keys:
                result = job.execute_in_process(instance=instance, asset_selection=stage, partition_key=partition,
                                                raise_on_error=False,
                                                run_config=_stage_config(quiet, op_config, stage))
                results.append(result)
                failures += _step_failures(result, partition)
            if not all(r.success for r in results):
                break  # later stages depend on this one
    summary = BuildSummary(success=observed.success and all(r.success for r in results),
                           seconds=time.perf_counter() - start, failures=failures)
    for result in results:
        for m in result.get_asset_materialization_events():
            mat = m.materialization
            key = mat.asset_key.to_user_string() + (f"[{mat.partition}]" if mat.partition else "")
            summary.materialized[key] = {
                k: getattr(v, "value", v) for k, v in mat.metadata.items()
                if k in ("dagster/row_count", "rejected_rows")}
        for ev in result.get_asset_check_evaluations():
            summary.checks.append((ev.asset_key.to_user_string(), ev.check_name, ev.passed,
                                   ev.description or ""))
    return summary


def format_summary(s: BuildSummary, settings: Settings) -> str:
    lines = [f"{'asset':<40} {'rows':>12} {'quarantined':>12}"]
    for key, meta in sorted(s.materialized.items()):
        lines.append(f"{key:<40} {meta.get('dagster/row_count', ''):>12} {meta.get('rejected_rows', ''):>12}")
    failed = [c for c in s.checks if not c[2]]
    lines.append(f"\n{len(s.materialized)} assets materialized, {len(s.checks) - len(failed)}/{len(s.checks)} "
                 f"checks passed, {s.seconds:.1f}s")
    for key, name, _, text in failed:
        lines.append(f"  FAILED check {key}:{name}: {text}")
    for f in s.failures:
        lines.append(f"  FAILED step {f}")
    lines.append(f"source:    {settings.source_dir}{' (synthetic)' if settings.synthetic else ''}")
    lines.append(f"warehouse: {settings.warehouse}  (DuckDB; schema per asset group, e.g. ingest.patients)")
    lines.append(f"instance:  {settings.dagster_home}  (`make dev` opens the UI on it)")
    if settings.release_dir.exists():
        lines.append(f"release:   {settings.release_dir}  ("
                     + ", ".join(sorted(p.name for p in settings.release_dir.iterdir() if p.is_dir())) + ")")
    lines.append("build " + ("succeeded" if s.success else "FAILED"))
    return "\n".join(lines)
