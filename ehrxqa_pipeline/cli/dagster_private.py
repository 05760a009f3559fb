"""Every use of Dagster's private API (``dagster._*``) in the project, in this one module.

Dagster has no public call for three things `ehrxqa` needs:
- runs that the UI treats as its own while they execute in this process (``execute``): the in-process
  execution of ``execute_in_process`` (``dagster._core.execution.execute_in_process``) with the origin of the
  project's code location (``job_origin``) passed to ``create_run_for_job``, so that the runs show on the
  Overview and under their job, and "Re-execute" (all steps or from failure) works from the UI; and one run
  of a partition range, with the tags a backfill's run of a range carries (``dagster._core.storage.tags``);
- the automation cursor of `ehrxqa build --changed`, kept between builds (``load_cursor``, ``save_cursor``):
  ``AssetDaemonCursor`` written with Dagster's serdes in the instance's daemon cursor storage; and one
  evaluation of the automation conditions from a cursor (``evaluate_automation``) without the round trip of
  the cursor through serdes that ``dg.evaluate_automation_conditions``, a helper for tests, makes;
- an instance storage that keeps its SQLite connections open (``PooledSqliteStorage``, named in the
  dagster.yaml `ehrxqa` writes): Dagster's SQLite storages create, connect and dispose a SQLAlchemy engine
  for every read and every event they store, and stamp each new run's database through Alembic.

``reconstructable_job`` (the job as a run process rebuilds it) serves ``job_origin`` and `make bench` stage
ui-run, which runs a job as the UI launches it.

Dagster is pinned in pyproject.toml; tests/test_cli.py::test_the_private_dagster_api_is_as_this_module_uses_it
fails, naming the symbol, when an upgrade moves or changes one of them, and a test keeps every other module of
the project off ``dagster._``.
"""

from __future__ import annotations

import os
import tempfile
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import dagster as dg
import sqlalchemy as sa
from dagster._core.storage.base_storage import DagsterStorage
from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME, SqliteEventLogStorage
from dagster._core.storage.runs.sqlite.sqlite_run_storage import SqliteRunStorage
from dagster._core.storage.schedules.sqlite.sqlite_schedule_storage import SqliteScheduleStorage
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from dagster._core.storage.sqlite_storage import (DagsterSqliteStorage, _event_logs_directory, _runs_directory,
                                                  _schedule_directory)

from ehrxqa_pipeline.cli.instance import CURSOR_KEY
from ehrxqa_pipeline.cli.launch import ASSET_JOB, MODULE, WORKSPACE


@dataclass(frozen=True)
class Origin:
    """Where a run's job lives: the code location the UI loads (remote) and the module that rebuilds it."""

    remote: object  # RemoteJobOrigin
    python: object  # JobPythonOrigin


def job_origin(job_name: str = ASSET_JOB) -> Origin:
    """The origin of ``job_name`` in the code location of ``code_location()``."""
    from dagster._core.remote_origin import RemoteJobOrigin, RemoteRepositoryOrigin
    from dagster._core.workspace.load import location_origin_from_module_name, location_origins_from_yaml_paths
    from dagster._core.definitions.repository_definition import SINGLETON_REPOSITORY_NAME

    if WORKSPACE.is_file():
        (location,) = location_origins_from_yaml_paths([str(WORKSPACE)])
    else:
        location = location_origin_from_module_name(MODULE, None, None)
    remote = RemoteJobOrigin(RemoteRepositoryOrigin(location, SINGLETON_REPOSITORY_NAME), job_name)
    python = reconstructable_job(job_name, location.loadable_target_origin.working_directory).get_python_origin()
    return Origin(remote, python)


def reconstructable_job(job_name: str = ASSET_JOB, working_directory: str | None = None):
    """``job_name`` of the code location as a run process rebuilds it (a ``ReconstructableJob``: what
    ``dg.execute_job`` takes to run each step in a process of its own, as runs launched from the UI do)."""
    from dagster._core.definitions.reconstruct import ReconstructableRepository

    return (ReconstructableRepository.for_module(MODULE, "defs", working_directory=working_directory)
            .get_reconstructable_job(job_name))


_EPHEMERAL: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _ephemeral(job: dg.JobDefinition) -> dg.JobDefinition:
    """``job`` as ``execute_in_process`` runs it (``as_ephemeral_job``, no selection), made once per job: each
    run's subset of it (``get_subset``, what ``as_ephemeral_job`` with a selection returns) then shares one
    parent, whose job snapshot, which the run records, Dagster works out once instead of at every run (the
    whole asset job's: about 0.3 s of CPU a run)."""
    if job not in _EPHEMERAL:
        _EPHEMERAL[job] = job.as_ephemeral_job(resource_defs={}, input_values={})
    return _EPHEMERAL[job]


def execute(job: dg.JobDefinition, instance: dg.DagsterInstance, asset_selection: Sequence[dg.AssetKey],
            partition_key: str | dg.PartitionKeyRange | None, tags: Mapping[str, str], run_config: Mapping,
            origin: Origin | None, on_run: Callable[[str], object] | None = None,
            checks: Sequence[dg.AssetCheckKey] = ()) -> dg.ExecuteInProcessResult:
    """``job.execute_in_process(asset_selection=..., partition_key=..., raise_on_error=False)``, the run
    carrying ``origin`` (None: none, for definitions no code location holds, as in tests; the same path
    otherwise); ``on_run`` is called with the run's id once the run exists, before it executes. A
    ``PartitionKeyRange``: one run of those partitions (assets with a single-run backfill policy), tagged as
    Dagster tags a backfill's run of a range (execute_in_process takes no range). The run's job is a subset of
    ``_ephemeral(job)``, as ``execute_in_process`` makes it. The run evaluates every check of the selected assets
    and ``checks`` besides (checks of other assets, as a sensor's run request names them)."""
    from dagster._core.definitions.job_base import InMemoryJob
    from dagster._core.execution.api import ExecuteRunWithPlanIterable, create_execution_plan, job_execution_iterator
    from dagster._core.execution.context_creation_job import (
        PlanOrchestrationContextManager, orchestration_context_event_generator)
    from dagster._core.execution.execute_in_process import merge_run_tags
    from dagster._core.snap import snapshot_from_execution_plan
    from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

    if isinstance(partition_key, dg.PartitionKeyRange):
        tags = {**tags, ASSET_PARTITION_RANGE_START_TAG: partition_key.start,
                ASSET_PARTITION_RANGE_END_TAG: partition_key.end}
        partition_key = None
    selection = list(asset_selection)
    if not selection and not checks:  # (Dagster's subset of no asset is the whole job)
        raise ValueError("execute: nothing selected, neither an asset nor a check")
    check_selection = None  # every check of the selected assets
    if checks:
        own = job.asset_layer.asset_graph.get_check_keys_for_assets(set(selection))
        check_selection = frozenset(own | set(checks))
    ephemeral = _ephemeral(job).get_subset(asset_selection=frozenset(selection), asset_check_selection=check_selection)
    run_tags = merge_run_tags(  # validates the partition key and adds its tags
        job_def=job, partition_key=partition_key, tags=tags, asset_selection=selection, instance=instance,
        run_config=run_config)
    wrapped = InMemoryJob(job_def=ephemeral)
    plan = create_execution_plan(wrapped, run_config=run_config,
                                 instance_ref=instance.get_ref() if instance.is_persistent else None)
    # what ``create_run_for_job`` creates from ``ephemeral`` and ``plan``, plus the check selection, which that
    # method cannot pass (it would subset the job again by its assets alone, dropping ``checks``)
    run = instance.create_run(
        job_name=ephemeral.name, run_id=None, run_config=run_config, status=None, tags={**job.run_tags, **run_tags},
        root_run_id=None, parent_run_id=None, step_keys_to_execute=plan.step_keys_to_execute,
        execution_plan_snapshot=snapshot_from_execution_plan(plan, ephemeral.get_job_snapshot_id()),
        job_snapshot=ephemeral.get_job_snapshot(), parent_job_snapshot=ephemeral.get_parent_job_snapshot(),
        asset_selection=frozenset(selection), asset_check_selection=check_selection, resolved_op_selection=None,
        op_selection=None, remote_job_origin=origin and origin.remote, job_code_origin=origin and origin.python,
        asset_graph=ephemeral.asset_layer.asset_graph)
    if on_run is not None:
        on_run(run.run_id)
    events = list(ExecuteRunWithPlanIterable(
        execution_plan=plan, iterator=job_execution_iterator,
        execution_context_manager=PlanOrchestrationContextManager(
            context_event_generator=orchestration_context_event_generator, job=wrapped, execution_plan=plan,
            dagster_run=run, instance=instance, run_config=run_config, executor_defs=None, output_capture={},
            raise_on_error=False)))
    return dg.ExecuteInProcessResult(job_def=ephemeral, event_list=events,
                                     dagster_run=instance.get_run_by_id(run.run_id), output_capture={})


def load_cursor(instance: dg.DagsterInstance):
    """The automation cursor saved by the last `build --changed` (or full build); None before the first."""
    from dagster._core.definitions.asset_daemon_cursor import AssetDaemonCursor
    from dagster._serdes import deserialize_value

    raw = instance.daemon_cursor_storage.get_cursor_values({CURSOR_KEY}).get(CURSOR_KEY)
    return deserialize_value(raw, AssetDaemonCursor) if raw else None


def save_cursor(instance: dg.DagsterInstance, cursor) -> None:
    from dagster._serdes import serialize_value

    instance.daemon_cursor_storage.set_cursor_values({CURSOR_KEY: serialize_value(cursor)})


def evaluate_automation(defs: dg.Definitions, instance: dg.DagsterInstance, cursor=None,
                        only: Collection | None = None) -> dg.EvaluateAutomationConditionsResult:
    """What ``dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor)`` returns: the same
    evaluator, entities, logger and cursor update, without that helper's round trip of ``cursor`` through serdes
    ("to simulate actual usage"; the daemon writes its cursor once a tick, as ``save_cursor`` does). The cursor of
    the project's graph is about 1.2 MB of JSON: writing and reading it back took 0.13-0.4 s of each 0.5-0.85 s
    evaluation on 2 cores (a round of `ehrxqa build --changed`, a tick of the tests' replays).
    tests/test_cli.py::test_the_automation_is_evaluated_as_dagsters_helper_evaluates_it compares the two.

    ``only``: evaluate these entities (asset and check keys) alone; every other keeps its cursor as it was, as
    though it had not been evaluated since (``cli.build.evaluation_scope`` says which a round can have changed).
    Dagster's own update would drop the cursor of an asset it did not evaluate."""
    import dataclasses
    import datetime
    import logging

    from dagster._core.definitions.asset_daemon_cursor import AssetDaemonCursor
    from dagster._core.definitions.declarative_automation.automation_condition_evaluator import (
        AutomationConditionEvaluator)
    from dagster._core.definitions.partitions.context import partition_loading_context

    graph = defs.resolve_asset_graph()
    # a copy: the evaluator caches a dict on the cursor it reads, which serdes would then write (and cannot sort)
    cursor = dataclasses.replace(cursor) if cursor is not None else AssetDaemonCursor.empty()
    every = dg.AssetSelection.all(include_sources=True) | dg.AssetSelection.all_asset_checks()
    entities = {k for k in every.resolve(graph) | every.resolve_checks(graph)
                if graph.get(k).automation_condition is not None} | graph.automatable_asset_job_keys
    if only is not None:
        entities &= set(only)
    evaluator = AutomationConditionEvaluator(
        asset_graph=graph, instance=instance, entity_keys=entities, evaluation_time=None, emit_backfills=False,
        logger=logging.getLogger("dagster.automation_condition_tester"), cursor=cursor,
        evaluation_id=cursor.evaluation_id)
    results, requested = evaluator.evaluate()
    kept = [c for c in cursor.previous_condition_cursors if c.key not in entities] if only is not None else []
    with partition_loading_context(effective_dt=None, dynamic_partitions_store=instance) as context:
        new = cursor.with_updates(evaluation_timestamp=datetime.datetime.now().timestamp(),
                                  newly_observe_requested_asset_keys=[], evaluation_id=cursor.evaluation_id + 1,
                                  condition_cursors=[*kept, *(r.get_new_cursor() for r in results)],
                                  asset_graph=graph)
        return dg.EvaluateAutomationConditionsResult(cursor=new, results=results, requested_subsets=requested,
                                                     partition_loading_context=context)


class _Engines:
    """One SQLAlchemy engine per database file, each keeping one idle connection open between uses (more at once
    when threads overlap; those close on return). At most ``keep`` files (the event log has one per run), least
    recently used dropped first. A forked child starts afresh and never touches its parent's connections."""

    def __init__(self, keep: int = 16, **connect_args):
        self.keep, self.connect_args = keep, connect_args
        self._lock = threading.Lock()
        self._engines: OrderedDict = OrderedDict()
        self._pid = os.getpid()

    def get(self, url: str) -> sa.Engine:
        with self._lock:
            if self._pid != os.getpid():
                for engine in self._engines.values():
                    engine.dispose(close=False)
                self._engines, self._pid = OrderedDict(), os.getpid()
            engine = self._engines.pop(url, None)
            if engine is None:
                engine = sa.create_engine(url, poolclass=sa.QueuePool, pool_size=1, max_overflow=-1,
                                          connect_args=self.connect_args)
                sa.event.listen(engine, "connect", _commit_without_fsync)
            self._engines[url] = engine
            while len(self._engines) > self.keep:
                self._engines.popitem(last=False)[1].dispose()
            return engine

    def dispose(self) -> None:
        with self._lock:
            while self._engines:
                self._engines.popitem()[1].dispose()


def _commit_without_fsync(dbapi_connection, _record) -> None:
    """``synchronous = NORMAL`` on a connection to one of the instance's databases, all of which Dagster makes in
    WAL mode (runs.db, schedules.db, the event log's index and one per run): a commit appends to the write-ahead
    log without waiting for the disk (fsync), which happens at each checkpoint instead. SQLite's recommended
    setting for WAL: the database stays consistent after a crash of any process or of the machine; a power cut
    may lose the last commits (the events of a build that then did not finish either). SQLite's default, FULL,
    waits for the disk at each commit: 0.4 ms on the reference machine's disk against 0.04 ms, and several
    thousand commits a build (about 5,800 in the small test build)."""
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA synchronous = NORMAL")
    finally:
        cursor.close()


@contextmanager
def _transaction(engine) -> Iterator:
    with engine.connect() as conn, conn.begin():
        yield conn


class PooledSqliteEventLogStorage(SqliteEventLogStorage):
    """``SqliteEventLogStorage`` (the index and one database per run) on kept-open connections. A new run's
    database is a copy of an empty one that Dagster's own ``_initdb`` made once in this process: ``_initdb``
    loads every Alembic migration script to stamp each new file (about 75 ms a run, most of a small step).

    Dagster asks the index database about its own schema before many reads and writes: whether a table exists
    (a new engine and connection each time), whether the asset key table has a column, whether a data
    migration (secondary index) has completed; about 1,850 questions in the small test build, 3 s of its CPU.
    A yes is kept: a migration only adds tables, columns and completed migrations, and a wipe, which empties
    the migration table, forgets the kept answers. A no is asked again each time (a migration may run
    meanwhile, from another process)."""

    def __init__(self, base_dir: str, inst_data=None):
        self._engines = _Engines(timeout=SQLITE_BUSY_TIMEOUT_SECONDS)  # Dagster's __init__ connects already
        self._empty_run_db: bytes | None = None
        self._schema_has: set[tuple[str, str]] = set()  # (what was asked, name) answered yes
        super().__init__(base_dir, inst_data)

    def _kept_yes(self, question: str, name: str, ask: Callable[[], bool]) -> bool:
        if (question, name) in self._schema_has:
            return True
        answer = bool(ask())
        if answer:
            self._schema_has.add((question, name))
        return answer

    def has_table(self, table_name: str) -> bool:
        def ask() -> bool:  # not through _connect: Dagster asks this inside a transaction on the index, too
            with self._engines.get(self.conn_string_for_shard(INDEX_SHARD_NAME)).connect() as conn:
                return conn.dialect.has_table(conn, table_name)
        return self._kept_yes("table", table_name, ask)

    def has_asset_key_col(self, column_name: str) -> bool:  # Dagster's opens a connection first
        return self._kept_yes("asset key column", column_name,
                              lambda: super(PooledSqliteEventLogStorage, self).has_asset_key_col(column_name))

    def _has_asset_key_col_on_connection(self, conn, column_name: str) -> bool:
        return self._kept_yes("asset key column", column_name,
                              lambda: super(PooledSqliteEventLogStorage, self)._has_asset_key_col_on_connection(
                                  conn, column_name))

    def has_secondary_index(self, name: str) -> bool:
        return self._kept_yes("secondary index", name, lambda: super(PooledSqliteEventLogStorage, self)
                              .has_secondary_index(name))

    @contextmanager
    def _connect(self, shard: str) -> Iterator:
        with self._db_lock:
            engine = self._engines.get(self.conn_string_for_shard(shard))  # connects on first use only
            if shard not in self._initialized_dbs:
                if shard == INDEX_SHARD_NAME or not self._create_run_db(self.path_for_shard(shard)):
                    self._initdb(engine)  # checks an existing one
                self._initialized_dbs.add(shard)
            with _transaction(engine) as conn:
                yield conn

    def _create_run_db(self, path: str) -> bool:
        """Write the empty run database at ``path`` unless a file is there (False: another process made it)."""
        if os.path.exists(path):
            return False
        if self._empty_run_db is None:
            with tempfile.TemporaryDirectory() as tmp:
                engine = sa.create_engine(f"sqlite:///{os.path.join(tmp, 'empty.db')}", poolclass=sa.NullPool)
                self._initdb(engine)
                engine.dispose()  # closed: the WAL is checkpointed into the file (which stays in WAL mode)
                with open(os.path.join(tmp, "empty.db"), "rb") as f:
                    self._empty_run_db = f.read()
        part = f"{path}.{os.getpid()}.{threading.get_ident()}.part"
        with open(part, "wb") as f:
            f.write(self._empty_run_db)
        try:
            os.link(part, path)  # never replaces a database another process created meanwhile
        except OSError:  # that one (FileExistsError), or a file system without hard links: Dagster's own init
            return False
        finally:
            os.unlink(part)
        return True

    def wipe(self) -> None:
        self._engines.dispose()  # it deletes the run databases: no connection may outlive its file
        self._schema_has.clear()
        super().wipe()

    def dispose(self) -> None:
        super().dispose()
        self._engines.dispose()


class _PooledConnect:
    """``connect()`` of Dagster's SQLite storages of one database file (runs.db, schedules.db) on a kept-open
    connection."""

    def __init__(self, conn_string: str, inst_data=None):
        self._engines = _Engines()
        super().__init__(conn_string, inst_data)

    @contextmanager
    def connect(self) -> Iterator:
        with _transaction(self._engines.get(self._conn_string)) as conn:
            yield conn

    def dispose(self) -> None:
        super().dispose()
        self._engines.dispose()


class PooledSqliteRunStorage(_PooledConnect, SqliteRunStorage):
    """``SqliteRunStorage`` (runs.db) on a kept-open connection."""


class PooledSqliteScheduleStorage(_PooledConnect, SqliteScheduleStorage):
    """``SqliteScheduleStorage`` (schedules.db) on a kept-open connection."""


class PooledSqliteStorage(DagsterSqliteStorage):
    """Dagster's default instance storage (``storage: sqlite``: the same files under ``base_dir``, the same
    tables and migrations) whose SQLite connections stay open between uses. Dagster's own opens a new engine and
    connection for each read and each stored event: a third of the CPU time of `ehrxqa build --changed`'s
    automation ticks and about 0.2 s a step. Named in the dagster.yaml that `ehrxqa` writes."""

    def __init__(self, base_dir: str, inst_data=None):  # Dagster's __init__ builds its own three storages
        self.base_dir = base_dir
        self._run_storage = PooledSqliteRunStorage.from_local(_runs_directory(base_dir))
        self._event_log_storage = PooledSqliteEventLogStorage(_event_logs_directory(base_dir))
        self._schedule_storage = PooledSqliteScheduleStorage.from_local(_schedule_directory(base_dir))
        self._inst_data = inst_data
        DagsterStorage.__init__(self)

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> PooledSqliteStorage:
        return cls.from_local(inst_data=inst_data, **config_value)
