"""`ehrxqa build`: observe the sources, then materialize a selection (or, with --changed, what the automation
conditions request) in process on the persistent instance."""

from __future__ import annotations

import difflib
import time
import uuid
from collections.abc import Collection, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field

import dagster as dg

from assets.freshness import out_of_date
from ehrxqa_pipeline.config import Settings
from ehrxqa_pipeline.paraphrase.cache import FILE_NAME as LLM_CACHE_FILE


@dataclass
class BuildSummary:
    success: bool
    seconds: float
    materialized: dict[str, dict] = field(default_factory=dict)  # asset key -> selected metadata
    checks: list[tuple[str, str, bool, str, str]] = field(default_factory=list)  # key, check, passed, text, severity
    failures: list[str] = field(default_factory=list)
    stale: dict[str, str] = field(default_factory=dict)  # asset key -> why it is still out of date
    build_id: str = ""  # the ehrxqa/build tag of every run of this build

    def last_verdicts(self) -> list[tuple[str, str, bool, str, str]]:
        """``checks``, each check once: a check evaluated again in a later run of the build by its last verdict."""
        return list({c[:2]: c for c in self.checks}.values())


class SelectionError(ValueError):
    """A --select that is not a valid asset selection or matches no asset to materialize."""


def _closest(word: str, names: list[str]) -> list[str]:
    return difflib.get_close_matches(word, names, n=3, cutoff=0.5)


def check_selection(defs: dg.Definitions, select: str) -> list[dg.AssetKey]:
    """The assets ``select`` materializes or observes; ``SelectionError`` naming the closest keys and groups when it is
    not a selection or matches none (a typo must not build nothing and report success)."""
    graph = defs.resolve_asset_graph()
    runnable = set(graph.materializable_asset_keys) | set(graph.observable_asset_keys)  # observing is running too
    keys = sorted(k.to_user_string() for k in runnable)
    groups = sorted({graph.get(k).group_name for k in runnable if graph.get(k).group_name})
    try:
        chosen = dg.AssetSelection.from_string(select, include_sources=True).resolve(graph)
    except Exception as err:  # Dagster's parser raises several types; all mean "not a selection"
        chosen, problem = set(), f"is not an asset selection ({type(err).__name__}: {err})"
    else:
        problem = "matches no asset to materialize or observe"
    chosen = sorted(k for k in chosen if k in runnable)
    if chosen:
        return chosen
    words = [w.split(":", 1)[-1].strip("'\"+*") for w in select.split()]
    hints = [f"key:{k}" for w in words for k in _closest(w, keys)] + \
            [f"group:{g}" for w in words for g in _closest(w, groups)]
    hint = f" Did you mean {', '.join(dict.fromkeys(hints))}?" if hints else ""
    raise SelectionError(f"--select {select!r} {problem}.{hint} Groups: {', '.join(groups)}.")


def _selection(defs: dg.Definitions, select: str | None) -> tuple[list[dg.AssetKey], list[dg.AssetKey]]:
    graph = defs.resolve_asset_graph()
    keys = check_selection(defs, select) if select else graph.materializable_asset_keys
    sources = {k for k in graph.observable_asset_keys}
    return sorted(k for k in keys if k not in sources), sorted(sources)


def _root_cause(error) -> str:
    """The innermost error message: the user's problem, not Dagster's wrapper around it."""
    while getattr(error, "cause", None) is not None:
        error = error.cause
    message = error.message.strip()
    if error.cls_name == "Failure":  # raised on purpose with the file, column and fix: the text is the message
        message = message.split(": ", 1)[-1] if message.startswith("dagster.") else message
    return message


def _step_failures(result, partition: str | None = None) -> list[str]:
    """One line per failed step: step key, partition, and the root cause's message."""
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
                level = max(level, stage[parent][0] + (0 if same else 1))
        stage[key] = (level, partitioned)  # unrelated assets of one level may differ: separate stages
    return [[k for k in targets if stage[k] == s] for s in sorted(set(stage.values()))]


def requested_checks(evaluation: dg.EvaluateAutomationConditionsResult, assets: Collection[dg.AssetKey]
                     ) -> list[dg.AssetCheckKey]:
    """The checks an automation evaluation requested whose own asset it did not request (``assets``): a
    standalone check with an additional dependency that will be materialized (``assets.automation``:
    ``WITH_ITS_ASSET``), e.g. labevents' foreign keys when d_labitems changed. The sensor's run evaluates
    them against the new parent, and so do `build --changed` and the tests' replays."""
    return sorted((r.key for r in evaluation.results if isinstance(r.key, dg.AssetCheckKey)
                   and r.true_subset.size and r.key.asset_key not in assets), key=lambda c: c.to_user_string())


def evaluation_scope(graph, touched: Collection[dg.AssetKey]) -> set:
    """The entities whose automation conditions a round can have changed, given the assets it ``touched``
    (requested, materialized or checked): those, their children, the descendants whose condition looks at every
    ancestor (``UpstreamCurrent``: the release assets), and the checks of all these. Any other entity sees the
    same parents, data versions, checks and cursor as when it was last evaluated (its condition reads no more
    than these, and no condition of this graph depends on the time but the sources' cron): evaluated again, it
    would request nothing and keep its memory. `build --changed` evaluates these alone after its first round;
    the tests' replays check that they request what evaluating every entity requests."""
    touched = set(touched)
    below = dg.AssetSelection.assets(*touched).downstream().resolve(graph) if touched else set()
    scope = touched | {c for k in touched for c in graph.get(k).child_keys} | {
        k for k in below if _reads_ancestors(graph.get(k).automation_condition)}
    return scope | {c for c in graph.asset_check_keys if set(graph.get(c).parent_entity_keys) & scope}


def _reads_ancestors(condition: dg.AutomationCondition | None) -> bool:
    from assets.automation import UpstreamCurrent

    return condition is not None and (isinstance(condition, UpstreamCurrent)
                                      or any(_reads_ancestors(c) for c in condition.children))


def touched_by(results: Sequence) -> set[dg.AssetKey]:
    """The assets ``results`` (runs) materialized or checked."""
    return {k for r in results for k in ({m.materialization.asset_key for m in r.get_asset_materialization_events()}
                                         | {e.asset_key for e in r.get_asset_check_evaluations()})}


def _last_stage_of(graph, check: dg.AssetCheckKey, stages: list[list[dg.AssetKey]]) -> int:
    """The index of the last of ``stages`` holding something ``check`` reads (its asset or an additional
    dependency); 0 when none does."""
    reads = set(graph.get(check).parent_entity_keys)
    return max((i for i, stage in enumerate(stages) if reads & set(stage)), default=0)


QUIET = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}  # a run's step events, not engine chatter


def _whole(graph, keys) -> set[dg.AssetKey]:
    """``keys`` with the other assets of their steps: a multi-asset that cannot be subset runs whole (a home
    built before one of its outputs existed: the missing output is repaired with its siblings)."""
    return {x for k in keys for x in graph.get(k).execution_set_asset_keys}


def _waits_on_a_worker(graph, key: dg.AssetKey) -> bool:
    """Whether ``key``'s step takes no warehouse and does its work in a worker process of the GPU pool."""
    from assets.automation import DEVICE_TAG, GPU_POOL

    assets_def = graph.get(key).assets_def
    return "warehouse" not in assets_def.required_resource_keys and assets_def.op.tags.get(DEVICE_TAG) == GPU_POOL


@dataclass
class _Beside:
    """A stage split around the assets that run beside the rest (``_Runner.split_beside``)."""

    before: list[dg.AssetKey]  # what of the stage they read
    apart: list[dg.AssetKey]  # they, in a run of their own in a second process
    rest: list[dg.AssetKey]  # meanwhile here
    after: list[dg.AssetKey]  # what of the stage reads them


def _stage_config(base: dict, op_config: dict, stage: list[dg.AssetKey]) -> dict:
    """Run config of one stage: ``base`` plus the op config of the stage's assets (a run rejects config
    for ops it does not contain). An asset's op is named after its key: ehrxqa/silver -> ehrxqa__silver."""
    ops = {k.to_python_identifier() for k in stage}
    mine = {name: cfg for name, cfg in op_config.items() if name in ops}
    return {**base, "ops": mine} if mine else base


def build(settings: Settings, select: str | None = None, instance: dg.DagsterInstance | None = None,
          defs: dg.Definitions | None = None, run_config: dict | None = None, changed: bool = False,
          log=print) -> BuildSummary:
    """Run on ``instance`` (default: the one under DAGSTER_HOME, see ``prepare_instance``). ``run_config``:
    ``{"ops": {op name: {"config": ...}}}`` for configurable assets, e.g. smaller EHRXQA caps in tests.

    ``changed``: after observing the sources, materialize only what the assets' automation conditions
    request (a source or code version changed, an upstream data version changed, or missing), round after
    round until nothing is due: what the automation sensor would do, in one command. With nothing changed
    it runs nothing. A full build (no ``select``) records the point from which ``changed`` looks."""
    from ehrxqa_pipeline.cli.instance import recover_interrupted

    if defs is None:
        from ehrxqa_pipeline.definitions import defs
    start = time.perf_counter()
    targets, sources = _selection(defs, select)
    job = defs.resolve_implicit_global_asset_job_def()
    runner = _Runner(defs, job, dict((run_config or {}).get("ops", {})))
    with (nullcontext(instance) if instance is not None else dg.DagsterInstance.get()) as instance:
        recover_interrupted(instance, log=log)
        # Observing records each source file's content hash, so later changes are detected.
        observed = runner.run(instance, sources, None) if sources else None
        observed_ok = observed is None or observed.success
        stale = None  # what is out of date now, when already known
        if observed_ok and changed:
            runner.repair_written(instance, settings, log)
            if runner.ok:
                runner.run_changed(instance)
            if runner.ok:
                stale = runner.run_missing(instance, log)
            if runner.ok:  # the last look: what the first left to the rounds, or what was damaged meanwhile
                runner.repair_written(instance, settings, log, last=True)
        elif observed_ok:
            runner.run_stages(instance, targets)
            if select is None and runner.ok:
                _save_evaluation(defs, instance)
        summary = runner.summary(observed, time.perf_counter() - start)
        if observed_ok:  # what is still out of date is a failure, named with its reason
            summary.stale = stale if stale is not None else out_of_date(
                defs, instance, None if changed or select is None else targets)
            summary.success = summary.success and not summary.stale
    return summary


def materialize(keys: list[dg.AssetKey], instance: dg.DagsterInstance, defs: dg.Definitions | None = None,
                run_config: dict | None = None, checks: Sequence[dg.AssetCheckKey] = ()) -> BuildSummary:
    """Materialize ``keys`` (and their checks, and ``checks`` of other assets) in stages, without observing the
    sources first: one round of what the automation conditions requested, as the tests replay it."""
    if defs is None:
        from ehrxqa_pipeline.definitions import defs
    start = time.perf_counter()
    runner = _Runner(defs, defs.resolve_implicit_global_asset_job_def(), dict((run_config or {}).get("ops", {})))
    runner.run_stages(instance, sorted(keys), checks=checks)
    return runner.summary(None, time.perf_counter() - start)


def _save_evaluation(defs: dg.Definitions, instance: dg.DagsterInstance) -> None:
    """After a full build: the point from which `build --changed` looks for changes."""
    from ehrxqa_pipeline.cli.dagster_private import evaluate_automation, save_cursor

    save_cursor(instance, evaluate_automation(defs, instance).cursor)


class _Runner:
    """Executes stages of asset keys in process, one run per stage (and partition), stopping at a failure."""

    MAX_ROUNDS = 100  # automation requests one level of the graph per round; the graph is ~15 deep

    def __init__(self, defs: dg.Definitions, job, op_config: dict):
        from ehrxqa_pipeline import definitions
        from ehrxqa_pipeline.cli.dagster_private import job_origin

        self.defs, self.job, self.op_config = defs, job, op_config
        # runs of the project's own definitions carry their code location (the UI can re-execute them)
        self.origin = job_origin() if defs is definitions.defs else None
        self.graph = defs.resolve_asset_graph()
        self.results: list = []  # one per stage run (and partition), in order
        self.build_id = uuid.uuid4().hex[:12]
        self.partitions: list[str | None] = []
        self.errors: list[str] = []  # what failed outside any run (a run beside that never began)

    @property
    def ok(self) -> bool:
        return all(r.success for r in self.results) and not self.errors

    def summary(self, observed, seconds: float) -> BuildSummary:
        runs = ([(observed, None)] if observed is not None else []) + list(zip(self.results, self.partitions))
        summary = BuildSummary(success=all(r.success for r, _ in runs) and not self.errors, seconds=seconds,
                               failures=[f for r, p in runs for f in _step_failures(r, p)] + self.errors,
                               build_id=self.build_id)
        for result in self.results:
            for m in result.get_asset_materialization_events():
                mat = m.materialization
                key = mat.asset_key.to_user_string() + (f"[{mat.partition}]" if mat.partition else "")
                summary.materialized[key] = {
                    k: getattr(v, "value", v) for k, v in mat.metadata.items()
                    if k in ("dagster/row_count", "rejected_rows", "cache_hits", "requests")}
            for ev in result.get_asset_check_evaluations():
                summary.checks.append((ev.asset_key.to_user_string(), ev.check_name, ev.passed,
                                       ev.description or "", ev.severity.value))
        summary.success = summary.success and not any(not c[2] and c[4] == "ERROR" for c in summary.last_verdicts())
        return summary

    def run(self, instance, stage: list[dg.AssetKey], partition: str | None, checks: Sequence[dg.AssetCheckKey] = ()):
        from ehrxqa_pipeline.cli.instance import run_tags
        from ehrxqa_pipeline.cli.dagster_private import execute
        from resources.warehouse import kept_open

        with kept_open():  # the run's steps, one after another in this process, share one open warehouse
            return execute(self.job, instance, stage, partition, run_tags(self.build_id),
                           _stage_config(QUIET, self.op_config, stage), self.origin, checks=checks)

    def _record(self, result, partition=None) -> None:
        self.results.append(result)
        self.partitions.append(partition if not isinstance(partition, dg.PartitionKeyRange)
                               else f"{partition.start}...{partition.end}")

    def split_beside(self, instance, stage: list[dg.AssetKey]) -> _Beside | None:
        """An unpartitioned ``stage`` split around the assets that run beside the rest, in a run of their own in a
        second process (``cli.beside``): those whose step takes no warehouse and waits on a worker process of its
        own (the GPU pool: VQA training). None (the stage runs as one run here) unless the definitions are the
        code location's own (the second process loads them), the instance is one a second process can open, and
        something else of the stage runs beside them."""
        if self.origin is None or self.graph.get(stage[0]).partitions_def is not None:
            return None
        apart = [k for k in stage if _waits_on_a_worker(self.graph, k)]
        if not apart:
            return None
        graph = self.graph
        above = _whole(graph, set().union(*(graph.get_ancestor_asset_keys(k) for k in apart)) & set(stage))
        below = _whole(graph, dg.AssetSelection.assets(*apart).downstream(include_self=False).resolve(graph)
                       & set(stage))
        split = _Beside(before=[k for k in stage if k in above], apart=apart,
                        rest=[k for k in stage if k not in above | below | set(apart)],
                        after=[k for k in stage if k in below])
        if not split.rest or above & below:
            return None  # nothing would run beside them, or one step both reads and is read by them: one run here
        try:
            instance.get_ref()
        except Exception:  # an ephemeral (in-memory) instance
            return None
        return split

    def run_beside(self, instance, split: _Beside) -> None:
        """First what of the stage ``split.apart`` reads (each asset with the others of its step: a multi-asset
        runs whole), then they in the second process while the rest runs here, then what of the stage reads
        them."""
        from ehrxqa_pipeline.cli.beside import Beside
        from ehrxqa_pipeline.cli.instance import run_tags

        if split.before:
            self._record(self.run(instance, split.before, None))
            if not self.ok:
                return
        with Beside(self.job, instance, split.apart, run_tags(self.build_id),
                    _stage_config(QUIET, self.op_config, split.apart)) as other:
            self._record(self.run(instance, split.rest, None))
        if other.result is not None:
            self._record(other.result)
        if other.error:
            self.errors.append(f"{', '.join(k.to_user_string() for k in split.apart)}: {other.error}")
        if split.after and self.ok:
            self._record(self.run(instance, split.after, None))

    def run_stages(self, instance, targets: list[dg.AssetKey], partitions: dict | None = None,
                   checks: Sequence[dg.AssetCheckKey] = ()) -> None:
        """Every stage of ``targets`` in dependency order; partitioned stages per partition (those in
        ``partitions`` when given, else all); an asset with the other assets of its step (``_whole``).
        ``checks``: checks of assets not among ``targets`` that are to run too (``requested_checks``), each in the
        first unpartitioned stage's run after every target it depends on; one left over is an error, never
        skipped in silence."""
        targets = sorted(_whole(self.graph, targets))
        stages = _stages(self.defs, targets)
        wanted = set(targets)  # a check whose asset is a target runs with it, after it
        after = {c: _last_stage_of(self.graph, c, stages) for c in checks if c.asset_key not in wanted}
        for i, stage in enumerate(stages):
            pdef = self.graph.get(stage[0]).partitions_def
            if split := self.split_beside(instance, stage):
                self.run_beside(instance, split)
                if not self.ok:
                    return
                continue
            if pdef is None:
                keys = [None]
                due = [c for c, last in after.items() if last <= i]  # (a run's check selection is a set)
                after = {c: last for c, last in after.items() if last > i}
            elif partitions is not None:
                keys, due = sorted({p for k in stage for p in partitions.get(k, ()) if p is not None}), []
            else:
                keys, due = pdef.get_partition_keys(dynamic_partitions_store=instance), []
            for partition in self._runs(stage, pdef, keys, instance):
                self._record(self.run(instance, stage, partition, due), partition)
            if not self.ok:
                return  # later stages depend on this one
        if after:
            self.errors.append("requested checks not run (no unpartitioned stage after what they read): "
                               + ", ".join(sorted(c.to_user_string() for c in after)))

    def _runs(self, stage: list[dg.AssetKey], pdef, keys: list, instance) -> list:
        """The runs of a stage's partition ``keys``: one per key, or, when every asset of the stage has a
        single-run backfill policy (it handles a range in one step), one per range of consecutive keys, as
        Dagster's backfills and automation launch them."""
        if pdef is None or not all(self.graph.get(k).backfill_policy == dg.BackfillPolicy.single_run()
                                   for k in stage):
            return keys
        order = {k: i for i, k in enumerate(pdef.get_partition_keys(dynamic_partitions_store=instance))}
        ranges: list[list[str]] = []
        for key in sorted(keys, key=order.__getitem__):
            if ranges and order[key] == order[ranges[-1][-1]] + 1:
                ranges[-1].append(key)
            else:
                ranges.append([key])
        return [dg.PartitionKeyRange(r[0], r[-1]) for r in ranges]

    def repair_written(self, instance, settings: Settings, log=print, last: bool = False) -> None:
        """``--changed``, first and ``last``: the assets whose files under EHRXQA_HOME, or tables, are gone or
        changed since they wrote them (``freshness.damaged_outputs``: a release file deleted or saved by hand,
        `rm -rf release/`, the warehouse file deleted) are materialized again, with their checks: the automation
        and the freshness pass see the instance only, and took these for up to date. First, before what changed
        upstream runs; last, for a changed file the first look left to the rounds (its asset was to run) and what
        was damaged meanwhile. Their memos keep nothing whose file no longer holds it, so each writes
        its files again; an unchanged output keeps its data version and stops there. The release files must
        then hold what SHA256SUMS.txt or the manifest lists (else the build failed, naming them: the manifest
        never lists a file its writer did not write again); the manifest runs last when its own files were
        damaged, or a DuckDB database came back with other bytes. ``last``: what is damaged after that fails the
        build, named."""
        from ehrxqa_pipeline.release.manifest import not_restored, sums_problems

        damage = self._damage(instance, settings)
        if damage.unnamed:  # nothing here writes them again: the manifest must not list the release without them
            self.errors += damage.unnamed_lines()
            return
        if not damage.assets:
            return
        log(f"--changed: {len(damage.assets)} asset(s) whose files changed or were removed since they were written: "
            "materializing them again: " + "; ".join(f"{k.to_user_string()} ({', '.join(why)})"
                                                      for k, why in damage.assets.items()))
        writers = [k for k in damage.assets if k != damage.manifest]
        if writers:
            self.run_stages(instance, writers)
        if not self.ok:
            return
        bad = not_restored(settings.release_dir, damage.files, damage.manifest_sha256)
        if bad:
            self.errors += [f"release/{rel}: materialized again, it still differs from what the manifest lists; "
                            "`ehrxqa build` (every asset) writes the release again" for rel in bad]
            return
        if damage.manifest is not None and not damage.manifest_due and (damage.manifest in damage.assets or any(
                why != "unlisted" for why in sums_problems(settings.release_dir).values())):
            self.run_stages(instance, [damage.manifest])  # (one out of date runs when what it reads is done)
        if last and self.ok:
            self.errors += [f"after the build, {line}" for line in self._damage(instance, settings).lines()]

    def _damage(self, instance, settings: Settings):
        """``freshness.damaged_outputs`` of this home, with the tables of the warehouse (the definitions' own
        resource, opened as a step opens it: a missing file is created empty, and all its tables are missing)."""
        from assets.freshness import damaged_outputs

        tables = None
        if (warehouse := (self.defs.resources or {}).get("warehouse")) is not None:
            with warehouse.connect() as con:
                tables = {f"{s}.{t}" for s, t in con.execute(
                    "SELECT schema_name, table_name FROM duckdb_tables() WHERE NOT temporary").fetchall()}
        return damaged_outputs(self.graph, instance, settings.home, settings.release_dir, settings.source_dir,
                               tables)

    def run_missing(self, instance, log=print) -> dict[str, str] | None:
        """After the automation rounds of ``--changed``: what is still out of date though no condition requests
        it -- above all assets never materialized because a build was killed before it reached them (the
        conditions react to changes, and "missing" is not one once evaluated), and the children of an asset whose
        blocking check the kill left unevaluated -- is materialized now, pass after pass, as far as what each reads
        changes (``_repairable``: an asset out of date only because a parent is waits for that parent, and is left
        as it is when the parent's output comes out unchanged); then the automation is evaluated again, so its
        cursor knows these runs. Returns what is out of date when it ran nothing (None otherwise)."""
        from assets.freshness import out_of_date

        stale = out_of_date(self.defs, instance)
        repair = _repairable(self.graph, instance, stale)
        if not repair:
            return stale  # nothing ran: what is out of date is still this
        missing = [k for k, why in stale.items() if "never materialized" in why]
        log(f"--changed: {len(stale)} asset(s) out of date that no change requests"
            + (f" ({len(missing)} never materialized: {', '.join(missing[:6])}{', ...' if len(missing) > 6 else ''};"
               " an interrupted build?)" if missing else "")
            + ": materializing them top down, each only if what it reads changed")
        for _ in range(self.MAX_ROUNDS):
            if repair.checks:  # evaluated on what their assets hold, which a kill left before them
                log(f"--changed: evaluating {', '.join(c.to_user_string() for c in repair.checks)}, which the "
                    "interrupted build did not")
                self._record(self.run(instance, [], None, repair.checks))
            else:
                self.run_stages(instance, repair.assets)
            if not self.ok:
                return None
            repair, done = _repairable(self.graph, instance, out_of_date(self.defs, instance)), repair
            if not repair or repair == done:  # (the same again: no pass would end it; the summary names it)
                break
        self.run_changed(instance)
        return None

    def run_changed(self, instance) -> None:
        """Evaluate the automation conditions and materialize what they request until nothing is due. The
        cursor is saved after each round that succeeded, so a failed or killed round is requested again."""
        from ehrxqa_pipeline.cli.dagster_private import evaluate_automation, load_cursor, save_cursor

        cursor, scope = load_cursor(instance), None  # the first round evaluates every entity
        for _ in range(self.MAX_ROUNDS):
            evaluation = evaluate_automation(self.defs, instance, cursor, only=scope)
            requested = {k: evaluation.get_requested_partitions(k) for k in self.graph.materializable_asset_keys
                         if evaluation.get_num_requested(k)}
            ran = len(self.results)
            if requested:
                self.run_stages(instance, sorted(set(requested) | self.release_tail(instance, set(requested))),
                                requested, requested_checks(evaluation, requested))
            if not self.ok:
                return
            cursor = evaluation.cursor
            save_cursor(instance, cursor)
            if not requested:
                return
            scope = evaluation_scope(self.graph, set(requested) | touched_by(self.results[ran:]))


    def release_tail(self, instance, targets: set[dg.AssetKey]) -> set[dg.AssetKey]:
        """The release assets below ``targets`` (condition ``RELEASE_ON_CHANGE``, unpartitioned) whose every
        out-of-date ancestor is a target or another of them. The automation would request them in the rounds
        that follow, one dependency level a round, once nothing above them is out of date: at the end of a
        cascade, release/statistics, then plots and datasheet, then croissant, then the manifest. Run in the
        round's run instead, after their parents (a failed blocking check still stops them there), they save
        those rounds: an automation evaluation and a run start each, about 2.5 s at demo scale. What would not
        change is run anyway; release assets are cheap, and a full build runs them all."""
        from assets.automation import RELEASE_ON_CHANGE
        from assets.freshness import stale_assets

        graph = self.graph
        below = dg.AssetSelection.assets(*targets).downstream(include_self=False).resolve(graph) - targets
        candidates = [k for k in graph.toposorted_asset_keys if k in below and graph.get(k).partitions_def is None
                      and graph.get(k).automation_condition == RELEASE_ON_CHANGE]
        if not candidates:
            return set()
        stale = {dg.AssetKey.from_user_string(k) for k in stale_assets(graph, instance)}
        tail: set[dg.AssetKey] = set()
        for key in candidates:  # parents first
            if graph.get_ancestor_asset_keys(key) & stale <= targets | tail:
                tail.add(key)
        return tail


@dataclass
class _Repair:
    """One pass of ``run_missing``: checks to evaluate alone, or else assets to materialize (with their checks)."""

    checks: list[dg.AssetCheckKey]
    assets: list[dg.AssetKey]

    def __bool__(self) -> bool:
        return bool(self.checks or self.assets)


def _repairable(graph, instance: dg.DagsterInstance, stale: dict[str, str]) -> _Repair:
    """What ``run_missing`` does in its next pass. When a parent of an out-of-date asset has a blocking check that
    was never evaluated on its latest materialization (a kill came between them) and the check runs without it
    (an ``asset_check`` of its own): those checks alone, before anything reads the parent. Otherwise, in
    dependency order, the out-of-date assets that the automation conditions do not request after an interrupted
    build, whose own inputs are out of date (never materialized, a code version or a parent's data version
    changed), with what of these lies below them; a parent whose unevaluated blocking check is part of its own
    step is materialized again with it. Not an asset out of date only because a parent is
    (``freshness.UPSTREAM``): it waits for a later pass, in which it is out of date only if that parent's new output
    differs from the one it read (a gold edit killed in its first round rebuilds the gold side, not all below it).
    Not those held back by a blocking check of a parent that failed (that hold is deliberate) nor anything
    below."""
    from assets.freshness import NOT_EVALUATED, UPSTREAM, _Latest, blocking_problems

    latest = _Latest(instance, graph)
    # (an out-of-date parent is materialized before what reads it, and its checks with it: none is asked about)
    stale_keys = {dg.AssetKey.from_user_string(name) for name in stale}
    held: set[dg.AssetKey] = set()
    waiting: set[dg.AssetKey] = set()
    checks: set[dg.AssetCheckKey] = set()
    out = []
    for name, why in stale.items():  # stale is in dependency order
        key = dg.AssetKey.from_user_string(name)
        parents = [p for p in graph.get(key).parent_keys if p in graph.materializable_asset_keys]
        problems = {p: blocking_problems(instance, graph, latest, p) for p in parents if p not in stale_keys}
        unevaluated = {p: [c for c, _ in found] for p, found in problems.items()
                       if found and all(NOT_EVALUATED in r for _, r in found)}  # the kill came before the check
        alone = {c for p, found in unevaluated.items() for c in found
                 if p not in graph.get_execution_set_asset_and_check_keys(c)}
        if ("failed" in why and "blocking check" in why) or any(p in held for p in parents) or any(
                found and p not in unevaluated for p, found in problems.items()):
            held.add(key)
        elif why.startswith(UPSTREAM) or any(p in waiting for p in parents) or alone:
            checks |= alone
            waiting.add(key)
        else:
            out.extend(p for p in unevaluated if p not in out)  # again, with its checks
            out.append(key)
    return _Repair(sorted(checks, key=lambda c: c.to_user_string()), [] if checks else out)


def format_summary(s: BuildSummary, settings: Settings) -> str:
    lines = [f"{'asset':<40} {'rows':>12} {'quarantined':>12}"]
    for key, meta in sorted(s.materialized.items()):
        lines.append(f"{key:<40} {meta.get('dagster/row_count', ''):>12} {meta.get('rejected_rows', ''):>12}")
    latest = s.last_verdicts()  # as the build's success counts them
    failed = [c for c in latest if not c[2]]
    lines.append(f"\n{len(s.materialized)} assets materialized, {len(latest) - len(failed)}/{len(latest)} "
                 f"checks passed, {s.seconds:.1f}s")
    for key, name, _, text, severity in failed:
        lines.append(f"  {'FAILED' if severity == 'ERROR' else 'WARNING'} check {key}:{name}: {text}")
    for f in s.failures:
        lines.append(f"  FAILED step {f}")
    for key, why in s.stale.items():
        lines.append(f"  OUT OF DATE {key}: {why}")
    llm = s.materialized.get("paraphrase/candidates", {})
    if llm.get("cache_hits"):
        lines.append(f"  paraphrase/candidates: {llm['cache_hits']} LLM answers reused from "
                     f"{settings.cache_dir / LLM_CACHE_FILE} ({llm.get('requests', 0)} requests sent); "
                     "`ehrxqa cache clear llm` asks the endpoint again")
    lines.append(f"source:    {settings.source_dir}{' (synthetic)' if settings.synthetic else ''}")
    if settings.source_versions:
        from ehrxqa_pipeline.sources.datasets import DATASETS

        paper = ", ".join(f"{d.title} {d.paper}" for d in DATASETS.values())
        lines.append(f"           read at {settings.source_versions_text} (opted in; the EHRXQA paper used {paper})")
    lines.append(f"warehouse: {settings.warehouse}  (DuckDB; schema per asset group, e.g. ingest.patients)")
    lines.append(f"instance:  {settings.dagster_home}  (`make dev` opens the UI on it; this build's runs carry "
                 f"the tag ehrxqa/build={s.build_id})")
    if settings.release_dir.exists():
        lines.append(f"release:   {settings.release_dir}  ("
                     + ", ".join(sorted(p.name for p in settings.release_dir.iterdir() if p.is_dir())) + ")")
        for name, what in (("manifest.json", "SHA-256 of every release file, source and code versions, seed"),
                           ("datasheet.md", "the paper's datasheet answered for this build"),
                           ("croissant.json", "the release in Croissant 1.1 with RAI fields, checked by mlcroissant"),
                           ("CHANGELOG.md", "what changed from each release version built in this home to the next"),
                           ("hf", "parquet with dataset cards for Hugging Face datasets, local use only: "
                                  f"load_dataset(\"{settings.release_dir / 'hf' / 'ehrxqa'}\")")):
            if (settings.release_dir / name).exists():
                lines.append(f"           {settings.release_dir / name}  ({what})")
    lines.append("build " + ("succeeded" if s.success else "FAILED"))
    return "\n".join(lines)
