"""The `ehrxqa` command: deterministic demo sources, and validate-source verdicts on planted faults."""

import hashlib
import json
import os
from pathlib import Path

import pytest

from ehrxqa_pipeline.cli import main
from ehrxqa_pipeline.sources.readers import resolve
from ehrxqa_pipeline.sources.schema import DEMO_MANIFEST, IMAGENOME, SEMANTICS_UMLS, release_path
from tests.instances import instance_for_test
from tests.textfiles import edit

UMLS_FILE = release_path(IMAGENOME, SEMANTICS_UMLS)


def tree_digest(root) -> str:
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(root)):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            h.update(os.path.relpath(path, root).encode())
            with open(path, "rb") as f:
                h.update(f.read())
    return h.hexdigest()


def test_demo_source_is_deterministic(tmp_path, capsys):
    args = ["--scale", "demo", "--patients", "4"]  # with JPEGs, which are most of the time
    assert main(["demo-source", str(tmp_path / "a"), "--seed", "3", *args]) == 0
    assert main(["demo-source", str(tmp_path / "b"), "--seed", "3", *args]) == 0
    assert main(["demo-source", str(tmp_path / "c"), "--seed", "4", *args]) == 0
    a, b, c = (tree_digest(tmp_path / x) for x in "abc")
    assert a == b
    assert a != c
    images = list((tmp_path / "a").rglob("*.jpg"))
    manifest = json.loads((tmp_path / "a" / DEMO_MANIFEST).read_text())
    assert len(images) == manifest["images_written"] == manifest["rows"]["cxr_metadata"] > 0


def test_demo_source_refuses_non_empty_out(tmp_path, capsys):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "keep.txt").write_text("mine")
    assert main(["demo-source", str(tmp_path / "x"), "--patients", "8", "--no-images"]) == 2
    assert "--force" in capsys.readouterr().err


def test_validate_source_accepts_fresh_source(small_source, capsys):
    root, _ = small_source
    assert main(["validate-source", str(root)]) == 0


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _drop_column(path):  # removes the last column (patients.dod)
    edit(path, lambda text: "".join(",".join(line.split(",")[:-1]) + "\n" for line in text.splitlines()))


def _bad_type(path):  # anchor_age of the first patient becomes text
    def bad(text):
        lines = text.splitlines()
        fields = lines[1].split(",")
        fields[2] = "forty"
        lines[1] = ",".join(fields)
        return "\n".join(lines) + "\n"
    edit(path, bad)


@pytest.mark.parametrize("fault, table, expect", [
    ("missing_file", "labevents", ["labevents"]),
    ("truncated", "admissions", ["admissions", "gzip"]),
    ("missing_column", "patients", ["patients", "dod"]),
    ("bad_type", "patients", ["patients", "anchor_age", "forty"]),
])
def test_validate_source_names_each_planted_fault(source_copy, capsys, fault, table, expect):
    root, _ = source_copy
    path = resolve(root, table)
    {"missing_file": lambda p: p.unlink(), "truncated": _truncate, "missing_column": _drop_column,
     "bad_type": _bad_type}[fault](path)
    assert main(["validate-source", str(root)]) == 1
    out = capsys.readouterr().out
    for word in expect:
        assert word in out, (word, out)


def test_validate_source_reports_broken_semantics(source_copy, capsys):
    root, _ = source_copy
    (root / UMLS_FILE).write_text("{not json")
    assert main(["validate-source", str(root)]) == 1
    assert "label_to_UMLS_mapping.json" in capsys.readouterr().out


@pytest.mark.slow  # starts a code server and a run process: about 20 s
def test_build_failure_names_file_column_and_fix(source_copy, tmp_path, monkeypatch, capsys):
    """End to end through `ehrxqa build`: a source file without a required column fails its ingestion step,
    and the summary shows the library's message (file, column, fix), not Dagster's wrapper."""
    root, _ = source_copy
    original = resolve(root, "patients").read_bytes()
    _drop_column(resolve(root, "patients"))
    for name, value in (("EHRXQA_HOME", tmp_path / "home"), ("EHRXQA_SOURCE_ROOT", root),
                        ("DAGSTER_HOME", tmp_path / "home" / "dagster"), ("EHRXQA_SEED", "0")):
        monkeypatch.setenv(name, str(value))  # restored afterwards: the command exports them for its steps
    from ehrxqa_pipeline.cli import build as build_module
    from ehrxqa_pipeline.threads import cores, step_threads

    seen, real = [], build_module.build
    monkeypatch.setattr(build_module, "build", lambda *a, **k: seen.append(step_threads()) or real(*a, **k))
    assert main(["build", "--select", "key:ingest/patients"]) == 1
    assert seen == [cores()] and step_threads() == 1  # one step at a time: thread-count-free work uses every core
    out = capsys.readouterr().out
    failed = [line for line in out.splitlines() if "FAILED step ingest__patients" in line]
    assert failed, out[-2000:]
    assert "patients.csv" in failed[0] and "'dod'" in failed[0] and "Fix:" in failed[0], failed[0]
    assert "dagster._core" not in failed[0]
    assert out.rstrip().endswith("build FAILED")
    # The failed run belongs to the project's code location, so the UI can re-execute it: once the file is
    # fixed, "re-execute from failure" (as the UI does it, through the instance) ingests the patients.
    resolve(root, "patients").write_bytes(original)
    import dagster as dg

    with dg.DagsterInstance.get() as instance:
        run = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]), limit=1)[0]
        assert run.remote_job_origin.location_name == "ehrxqa" and run.asset_selection == {
            dg.AssetKey(["ingest", "patients"])}
        again = _reexecute_from_failure(instance, run)
        assert again.status == dg.DagsterRunStatus.SUCCESS and again.parent_run_id == run.run_id
        assert instance.get_latest_materialization_event(dg.AssetKey(["ingest", "patients"])).run_id == again.run_id


def _reexecute_from_failure(instance, run, timeout: float = 120.0):
    """What the UI's "Re-execute from failure" does: load the run's code location (workspace.yaml, a code
    server process), create the child run, launch it (a run process) and wait for it."""
    import time

    from dagster._core.execution.plan.resume_retry import ReexecutionStrategy
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import WorkspaceFileTarget

    from ehrxqa_pipeline.cli.launch import WORKSPACE

    with WorkspaceProcessContext(instance, WorkspaceFileTarget([str(WORKSPACE)])) as process:
        context = process.create_request_context()
        origin = run.remote_job_origin
        location = context.get_code_location(origin.location_name)
        job = location.get_repository(origin.repository_origin.repository_name).get_full_job(origin.job_name)
        child = instance.create_reexecuted_run(request_context=context, parent_run=run, code_location=location,
                                               remote_job=job, strategy=ReexecutionStrategy.FROM_FAILURE)
        instance.launch_run(child.run_id, context)
        deadline = time.monotonic() + timeout
        while not instance.get_run_by_id(child.run_id).is_finished and time.monotonic() < deadline:
            time.sleep(0.5)
        return instance.get_run_by_id(child.run_id)


def test_instance_pools_have_explicit_limits(tmp_path):
    import dagster as dg
    import yaml

    from ehrxqa_pipeline.cli import DAGSTER_YAML
    from ehrxqa_pipeline.cli.instance import POOL_LIMITS, configure_pools

    assert yaml.safe_load(DAGSTER_YAML)["concurrency"]["pools"]["default_limit"] == 1
    assert POOL_LIMITS == {"duckdb": 1, "gpu": 1, "llm": 1}
    with instance_for_test(temp_dir=str(tmp_path)) as instance:
        configure_pools(instance)
        configure_pools(instance)  # idempotent
        for pool, limit in POOL_LIMITS.items():
            assert instance.event_log_storage.get_concurrency_info(pool).slot_count == limit


@pytest.mark.parametrize("select, expected", [
    ("key:ingest/patient", "Did you mean key:ingest/patients"),
    ("group:ingst", "group:ingest"),
    ("group:nosuchgroup", "matches no asset to materialize or observe"),
    ("((", "is not an asset selection"),
])
def test_build_select_that_matches_nothing_is_an_error(tmp_path, monkeypatch, capsys, select, expected):
    """A typo in --select fails at once (rc 2, nothing generated or built) and names the closest keys / groups."""
    for name, value in (("EHRXQA_HOME", tmp_path / "home"), ("DAGSTER_HOME", tmp_path / "home" / "dagster")):
        monkeypatch.setenv(name, str(value))
    assert main(["build", "--select", select]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Groups: cxr_cohort, cxr_labels" in err, err
    assert not (tmp_path / "home" / "source").exists()


def test_dev_works_from_any_directory(tmp_path, monkeypatch):
    """`ehrxqa dev` names its code location by absolute path, so it starts from any working directory."""
    import ehrxqa_pipeline.cli as cli

    for name, value in (("EHRXQA_HOME", tmp_path / "home"), ("DAGSTER_HOME", tmp_path / "home" / "dagster")):
        monkeypatch.setenv(name, str(value))
    monkeypatch.setattr(cli, "ensure_source", lambda settings: None)
    launched = []
    monkeypatch.setattr(cli.os, "execv", lambda exe, argv: launched.append(argv))
    monkeypatch.chdir(tmp_path)
    assert main(["dev"]) == 0
    argv = launched[0]
    workspace = Path(argv[argv.index("-w") + 1])
    assert workspace.is_absolute() and workspace.is_file() and "ehrxqa_pipeline.definitions" in workspace.read_text()


def test_instance_has_no_first_visit_modal(tmp_path, exported_settings):
    """The instance `ehrxqa` writes turns Dagster's first-visit (newsletter) modal off, also in an older one."""
    import dagster as dg

    from ehrxqa_pipeline.cli import prepare_instance
    from ehrxqa_pipeline.config import Settings

    old = Settings.resolve(str(tmp_path / "old"))
    old.dagster_home.mkdir(parents=True)
    (old.dagster_home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    for home in ("new", "old"):
        settings = Settings.resolve(str(tmp_path / home))
        prepare_instance(settings)
        with dg.DagsterInstance.from_config(str(settings.dagster_home)) as instance:
            assert instance.nux_enabled is False, home


# What ehrxqa_pipeline/cli/dagster_private.py takes from Dagster's private API: "module:name" -> the keyword
# arguments it passes (checked against the installed Dagster's signatures).
PRIVATE_USES = {
    "dagster._core.definitions.reconstruct:ReconstructableRepository": (),
    "dagster._core.remote_origin:RemoteJobOrigin": (),
    "dagster._core.remote_origin:RemoteRepositoryOrigin": (),
    "dagster._core.workspace.load:location_origin_from_module_name": (),
    "dagster._core.workspace.load:location_origins_from_yaml_paths": (),
    "dagster._core.definitions.repository_definition:SINGLETON_REPOSITORY_NAME": (),
    "dagster._core.definitions.job_base:InMemoryJob": ("job_def",),
    "dagster._core.execution.api:ExecuteRunWithPlanIterable": ("execution_plan", "iterator",
                                                               "execution_context_manager"),
    "dagster._core.execution.api:create_execution_plan": ("run_config", "instance_ref"),
    "dagster._core.execution.api:job_execution_iterator": (),
    "dagster._core.execution.context_creation_job:PlanOrchestrationContextManager": (
        "context_event_generator", "job", "execution_plan", "dagster_run", "instance", "run_config",
        "executor_defs", "output_capture", "raise_on_error"),
    "dagster._core.execution.context_creation_job:orchestration_context_event_generator": (),
    "dagster._core.execution.execute_in_process:merge_run_tags": ("job_def", "partition_key", "tags",
                                                                  "asset_selection", "instance", "run_config"),
    "dagster._core.snap:snapshot_from_execution_plan": ("execution_plan", "pipeline_snapshot_id"),
    "dagster._core.storage.tags:ASSET_PARTITION_RANGE_START_TAG": (),
    "dagster._core.storage.tags:ASSET_PARTITION_RANGE_END_TAG": (),
    "dagster._core.definitions.asset_daemon_cursor:AssetDaemonCursor": (),
    "dagster._core.definitions.asset_daemon_cursor:AssetDaemonCursor.with_updates": (
        "evaluation_timestamp", "newly_observe_requested_asset_keys", "evaluation_id", "condition_cursors",
        "asset_graph"),
    "dagster._core.definitions.declarative_automation.automation_condition_evaluator:AutomationConditionEvaluator": (
        "asset_graph", "instance", "entity_keys", "evaluation_time", "emit_backfills", "logger", "cursor",
        "evaluation_id"),
    "dagster._core.definitions.partitions.context:partition_loading_context": ("effective_dt",
                                                                               "dynamic_partitions_store"),
    "dagster._serdes:deserialize_value": (),
    "dagster._serdes:serialize_value": (),
    "dagster._core.storage.base_storage:DagsterStorage": (),
    "dagster._core.storage.event_log.sqlite.sqlite_event_log:SqliteEventLogStorage": ("base_dir", "inst_data"),
    "dagster._core.storage.event_log.sqlite.sqlite_event_log:SqliteEventLogStorage._connect": ("shard",),
    "dagster._core.storage.event_log.sqlite.sqlite_event_log:SqliteEventLogStorage._initdb": ("engine",),
    "dagster._core.storage.event_log.sqlite.sqlite_event_log:SqliteEventLogStorage.path_for_shard": ("run_id",),
    "dagster._core.storage.event_log.sqlite.sqlite_event_log:SqliteEventLogStorage.has_table": ("table_name",),
    "dagster._core.storage.event_log.sqlite.sqlite_event_log:SqliteEventLogStorage.has_secondary_index": ("name",),
    "dagster._core.storage.event_log.sqlite.sqlite_event_log:SqliteEventLogStorage.has_asset_key_col": ("column_name",),
    "dagster._core.storage.event_log.sqlite.sqlite_event_log:SqliteEventLogStorage._has_asset_key_col_on_connection":
        ("conn", "column_name"),
    "dagster._core.storage.event_log.sqlite.sqlite_event_log:INDEX_SHARD_NAME": (),
    "dagster._core.storage.event_log.sqlite.sqlite_event_log:SqliteEventLogStorage.conn_string_for_shard": (
        "shard_name",),
    "dagster._core.storage.runs.sqlite.sqlite_run_storage:SqliteRunStorage": ("conn_string", "inst_data"),
    "dagster._core.storage.runs.sqlite.sqlite_run_storage:SqliteRunStorage.connect": (),
    "dagster._core.storage.schedules.sqlite.sqlite_schedule_storage:SqliteScheduleStorage": ("conn_string",
                                                                                              "inst_data"),
    "dagster._core.storage.schedules.sqlite.sqlite_schedule_storage:SqliteScheduleStorage.connect": (),
    "dagster._core.storage.sqlite:SQLITE_BUSY_TIMEOUT_SECONDS": (),
    "dagster._core.storage.sqlite_storage:DagsterSqliteStorage": ("base_dir", "inst_data"),
    "dagster._core.storage.sqlite_storage:_event_logs_directory": (),
    "dagster._core.storage.sqlite_storage:_runs_directory": (),
    "dagster._core.storage.sqlite_storage:_schedule_directory": (),
}


def _private_imports(path: Path) -> set[str]:
    import ast

    return {f"{node.module}:{alias.name}" for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dagster._")
            for alias in node.names}


def test_the_private_dagster_api_is_as_this_module_uses_it():
    """Issue 16 point 7: a Dagster upgrade that moves or changes a private symbol the CLI uses fails here, naming
    it, rather than in a user's build. The list above is the module's own imports (so it cannot go stale), and
    the one method it calls with private keywords, ``DagsterInstance.create_run``, is checked too."""
    import importlib
    import inspect

    import dagster as dg

    from ehrxqa_pipeline.cli import dagster_private

    imported = {module + ":" + name.split(".")[0] for module, name in (u.split(":") for u in PRIVATE_USES)}
    assert _private_imports(Path(dagster_private.__file__)) == imported
    for use, keywords in [*PRIVATE_USES.items(), ("dagster:DagsterInstance.create_run", (
            "job_name", "run_id", "run_config", "status", "tags", "root_run_id", "parent_run_id",
            "step_keys_to_execute", "execution_plan_snapshot", "job_snapshot", "parent_job_snapshot",
            "asset_selection", "asset_check_selection", "resolved_op_selection", "op_selection", "remote_job_origin",
            "job_code_origin", "asset_graph")), ("dagster:EvaluateAutomationConditionsResult", (
            "cursor", "results", "requested_subsets", "partition_loading_context"))]:
        module, name = use.split(":")
        obj = importlib.import_module(module)
        for part in name.split("."):
            obj = getattr(obj, part, None)
            assert obj is not None, f"{use}: gone in dagster {dg.__version__}; update cli/dagster_private.py"
        if keywords:
            params = inspect.signature(obj).parameters
            missing = [k for k in keywords if k not in params]
            assert not missing, f"{use} no longer takes {missing} in dagster {dg.__version__}"


def test_each_run_is_the_job_execute_in_process_would_run_and_shares_its_parents_snapshot():
    """``dagster_private.execute`` runs a subset of the asset job made once per job (``_ephemeral``): the same
    job snapshot as ``as_ephemeral_job`` with the selection (what ``execute_in_process`` runs), and the whole
    job's snapshot, the parent every run records, worked out once, not at each run."""
    import dagster as dg

    from ehrxqa_pipeline.cli.dagster_private import _ephemeral
    from ehrxqa_pipeline.definitions import defs

    job = defs.resolve_implicit_global_asset_job_def()
    selection = frozenset([dg.AssetKey(["cxr_cohort", "image_rules"])])
    theirs = job.as_ephemeral_job(resource_defs={}, input_values={}, asset_selection=selection)
    ours, again = (_ephemeral(job).get_subset(asset_selection=selection) for _ in range(2))
    assert ours.get_job_snapshot_id() == theirs.get_job_snapshot_id() == again.get_job_snapshot_id()
    assert ours.get_parent_job_snapshot() == theirs.get_parent_job_snapshot()
    assert ours.get_parent_job_snapshot() is again.get_parent_job_snapshot()  # one parent, its snapshot made once


def test_the_automation_is_evaluated_as_dagsters_helper_evaluates_it():
    """``dagster_private.evaluate_automation`` (`build --changed`'s rounds, the tests' replays) and
    ``dg.evaluate_automation_conditions`` request the same from the same cursor, and each continues from the
    other's cursor: a changed parent requests its child once, a second evaluation nothing; a partitioned child
    only the partition whose parent partition changed."""
    import dagster as dg

    from ehrxqa_pipeline.cli.dagster_private import evaluate_automation

    parts = dg.StaticPartitionsDefinition(["a", "b"])

    @dg.asset
    def up() -> None: ...

    @dg.asset(deps=[up], automation_condition=dg.AutomationCondition.eager())
    def down() -> None: ...

    @dg.asset(partitions_def=parts)
    def up_parts() -> None: ...

    @dg.asset(deps=[up_parts], partitions_def=parts, automation_condition=dg.AutomationCondition.eager())
    def down_parts() -> None: ...

    defs = dg.Definitions(assets=[up, down, up_parts, down_parts])

    def requested(result):
        return {(k.to_user_string(), p) for k in (dg.AssetKey("down"), dg.AssetKey("down_parts"))
                for p in result.get_requested_partitions(k)}

    helpers = {"ours": lambda c: evaluate_automation(defs, instance, c),
               "dagster's": lambda c: dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=c)}
    with dg.instance_for_test() as instance:
        first = {name: evaluate(None) for name, evaluate in helpers.items()}
        assert {name: requested(r) for name, r in first.items()} == {"ours": set(), "dagster's": set()}
        dg.materialize([up], instance=instance)
        dg.materialize([up_parts], instance=instance, partition_key="b")
        crossed = {name: evaluate(first["dagster's" if name == "ours" else "ours"].cursor)
                   for name, evaluate in helpers.items()}
        assert {name: requested(r) for name, r in crossed.items()} == {
            "ours": {("down", None), ("down_parts", "b")}, "dagster's": {("down", None), ("down_parts", "b")}}
        assert crossed["ours"].cursor.evaluation_id == crossed["dagster's"].cursor.evaluation_id == 2
        again = {name: evaluate(crossed[name].cursor) for name, evaluate in helpers.items()}
        assert {name: requested(r) for name, r in again.items()} == {"ours": set(), "dagster's": set()}
        # and it leaves the cursor it was given as it was (the evaluator caches on the cursor it reads)
        written = dg.serialize_value(again["ours"].cursor)
        evaluate_automation(defs, instance, again["ours"].cursor)
        assert dg.serialize_value(again["ours"].cursor) == written
        # evaluating some entities alone (`build --changed`'s later rounds) keeps every other's cursor as it was,
        # where Dagster's update drops the cursor of an asset it did not evaluate
        before = {c.key: c for c in again["ours"].cursor.previous_condition_cursors}
        alone = evaluate_automation(defs, instance, again["ours"].cursor, only={dg.AssetKey("down")})
        after = {c.key: c for c in alone.cursor.previous_condition_cursors}
        assert after.keys() == before.keys() == {dg.AssetKey("down"), dg.AssetKey("down_parts")}
        assert [k.to_user_string() for k in before if after[k] != before[k]] == ["down"]


def test_changed_evaluates_a_check_whose_additional_dependency_changed(tmp_path):
    """A blocking check of ``child`` that also reads ``b`` is requested when only ``b`` changes (the check's
    condition: a dependency will be materialized); the sensor's run evaluates it against the new ``b``, and so
    does `build --changed` (``_Runner.run_changed``): passed, then failed, which fails the command. Before, the
    round ran ``b`` alone and reported success."""
    import dagster as dg

    from assets.automation import ON_CHANGE, WITH_ITS_ASSET
    from ehrxqa_pipeline.cli.build import _Runner, _save_evaluation

    verdict = tmp_path / "b.txt"

    def definitions(b_version: str) -> dg.Definitions:
        @dg.asset(automation_condition=ON_CHANGE, code_version=b_version)
        def b() -> dg.MaterializeResult:
            return dg.MaterializeResult(data_version=dg.DataVersion(verdict.read_text()))

        @dg.asset(automation_condition=ON_CHANGE)
        def a() -> dg.MaterializeResult:
            return dg.MaterializeResult(data_version=dg.DataVersion("a"))

        @dg.asset(deps=[a], automation_condition=ON_CHANGE)
        def child() -> dg.MaterializeResult:
            return dg.MaterializeResult(data_version=dg.DataVersion("child"))

        @dg.asset(deps=[child], automation_condition=ON_CHANGE)
        def below() -> None: ...

        @dg.asset_check(asset=child, additional_deps=[b], blocking=True, automation_condition=WITH_ITS_ASSET)
        def agrees_with_b() -> dg.AssetCheckResult:
            return dg.AssetCheckResult(passed=verdict.read_text() != "bad")

        return dg.Definitions(assets=[a, b, child, below], asset_checks=[agrees_with_b])

    def changed(defs, instance) -> _Runner:
        runner = _Runner(defs, defs.resolve_implicit_global_asset_job_def(), {})
        runner.run_changed(instance)
        return runner

    def evaluated(runner) -> list[tuple[str, bool]]:
        return [(e.check_name, e.passed) for r in runner.results for e in r.get_asset_check_evaluations()]

    def materialized(runner) -> set[str]:
        return {e.materialization.asset_key.to_user_string() for r in runner.results
                for e in r.get_asset_materialization_events()}

    with dg.instance_for_test() as instance:
        verdict.write_text("good")
        first = definitions("1")
        built = _Runner(first, first.resolve_implicit_global_asset_job_def(), {})
        built.run_stages(instance, sorted(first.resolve_asset_graph().materializable_asset_keys))
        assert built.ok and evaluated(built) == [("agrees_with_b", True)]
        _save_evaluation(first, instance)

        verdict.write_text("still good")
        runner = changed(definitions("2"), instance)
        assert runner.ok and materialized(runner) == {"b"} and evaluated(runner) == [("agrees_with_b", True)]

        verdict.write_text("bad")
        runner = changed(definitions("3"), instance)
        assert not runner.ok
        assert materialized(runner) == {"b"} and evaluated(runner) == [("agrees_with_b", False)]


def test_no_other_module_uses_the_private_dagster_api():
    root = Path(__file__).resolve().parents[1]
    users = sorted(str(p.relative_to(root)) for folder in ("ehrxqa_pipeline", "assets", "resources")
                   for p in (root / folder).rglob("*.py") if _private_imports(p))
    assert users == ["ehrxqa_pipeline/cli/dagster_private.py"], users


def test_dagster_preview_and_beta_notices_are_not_shown_other_warnings_are(monkeypatch):
    """Dagster warns on every load or use of its beta and preview APIs (its Pipes reader, on every VQA step: ten
    lines a build); `ehrxqa` users cannot act on these, so the command filters them, and only them."""
    import warnings

    from dagster import PreviewWarning

    monkeypatch.setattr(warnings, "filters", list(warnings.filters))  # the command's filter is undone afterwards
    with pytest.raises(SystemExit):
        main(["--help"])
    with warnings.catch_warnings(record=True) as seen:
        warnings.warn("Function `PipesMessageReader.expected_writer_count` is currently in preview, and may have "
                      "breaking changes in patch version releases.", PreviewWarning)
        warnings.warn("`x` is currently in beta, and may have breaking changes", PreviewWarning)
        warnings.warn("a warning users can act on", UserWarning)
    assert [str(w.message) for w in seen] == ["a warning users can act on"]


def test_the_summary_shows_a_check_evaluated_twice_by_its_last_verdict(tmp_path):
    """A check that failed in one run of a build and passed when it ran again later in the same build (a repair
    ran the manifest before the rounds did) is counted and shown by its last verdict, as the exit code is."""
    from ehrxqa_pipeline.cli.build import BuildSummary, format_summary
    from ehrxqa_pipeline.config import Settings

    checks = [("release/manifest", "consistent", False, "15 upstream assets out of date", "ERROR"),
              ("release/manifest", "portable", True, "", "ERROR"),
              ("release/manifest", "consistent", True, "0 upstream assets out of date", "ERROR"),
              ("release/hf", "matches_json", False, "2 records differ", "WARN")]
    text = format_summary(BuildSummary(success=True, seconds=1.0, checks=checks), Settings.resolve(home=str(tmp_path)))
    assert "2/3 checks passed" in text and "consistent" not in text
    assert "  WARNING check release/hf:matches_json: 2 records differ" in text.splitlines()
