"""The instance storage `ehrxqa` names in dagster.yaml (``cli.dagster_private.PooledSqliteStorage``): Dagster's
SQLite files and tables, with connections kept open between uses instead of one new engine and connection per
read and per stored event."""

import os

import dagster as dg
import pytest
import sqlalchemy as sa

from ehrxqa_pipeline.cli import prepare_instance
from ehrxqa_pipeline.cli.dagster_private import PooledSqliteStorage, _Engines
from ehrxqa_pipeline.config import Settings


@dg.asset
def numbers() -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"rows": 3})


@pytest.fixture
def home(tmp_path, exported_settings):
    """A home for `ehrxqa` to prepare (what prepare_instance exports is put back afterwards)."""
    settings = Settings.resolve(str(tmp_path / "home"))
    settings.dagster_home.mkdir(parents=True)
    return settings


def _connections(run) -> int:
    """The SQLite connections opened while ``run()`` runs (SQLAlchemy's pool "connect" event)."""
    opened = []

    def count(*_):
        opened.append(1)

    sa.event.listen(sa.pool.Pool, "connect", count)
    try:
        run()
    finally:
        sa.event.remove(sa.pool.Pool, "connect", count)
    return len(opened)


def _reads(instance) -> None:
    for _ in range(10):
        instance.get_runs(limit=5)
        instance.get_latest_materialization_event(numbers.key)
        instance.get_asset_records([numbers.key])


def test_an_older_home_keeps_its_history_and_then_reads_without_new_connections(home):
    """A dagster.yaml from before this storage (Dagster's default): its runs stay readable once prepare_instance
    adds the storage block, and reads after the first open no new connection, where Dagster's opens 30."""
    (home.dagster_home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    with dg.DagsterInstance.from_config(str(home.dagster_home)) as before:
        assert not isinstance(before.get_ref().storage, PooledSqliteStorage)
        assert dg.materialize([numbers], instance=before).success
        assert _connections(lambda: _reads(before)) >= 30  # what the storage is for

    prepare_instance(home)
    assert "class: PooledSqliteStorage" in (home.dagster_home / "dagster.yaml").read_text()
    with dg.DagsterInstance.get() as instance:
        assert isinstance(instance.get_ref().storage, PooledSqliteStorage)
        assert instance.get_latest_materialization_event(numbers.key).asset_materialization.metadata["rows"].value == 3
        assert dg.materialize([numbers], instance=instance).success
        assert len(instance.get_runs()) == 2
        assert _connections(lambda: _reads(instance)) == 0


def test_a_users_own_storage_block_is_left_alone(home):
    own = "telemetry:\n  enabled: false\nrun_storage:\n  module: dagster._core.storage.runs\n"
    (home.dagster_home / "dagster.yaml").write_text(own)
    prepare_instance(home)
    text = (home.dagster_home / "dagster.yaml").read_text()
    assert text.startswith(own) and "\nstorage:" not in text and "\nnux:" in text


def test_wipe_drops_the_connections_to_the_run_databases_it_deletes(home):
    prepare_instance(home)
    with dg.DagsterInstance.get() as instance:
        assert dg.materialize([numbers], instance=instance).success
        instance.wipe()
        assert instance.get_runs() == [] and instance.get_latest_materialization_event(numbers.key) is None
        assert dg.materialize([numbers], instance=instance).success
        assert len(instance.get_runs()) == 1 and instance.get_latest_materialization_event(numbers.key) is not None


def test_engines_are_kept_per_file_bounded_and_not_shared_with_a_forked_child(tmp_path, monkeypatch):
    engines = _Engines(keep=2)
    urls = [f"sqlite:///{tmp_path / name}.db" for name in "abc"]
    a = engines.get(urls[0])
    assert engines.get(urls[0]) is a
    engines.get(urls[1]), engines.get(urls[2])  # a is the least recently used: dropped
    assert engines.get(urls[0]) is not a
    kept = engines.get(urls[2])
    monkeypatch.setattr(os, "getpid", lambda: -1)  # as in a child after fork
    assert engines.get(urls[2]) is not kept
    engines.dispose()


def test_the_instance_databases_are_in_wal_mode_and_commit_without_waiting_for_the_disk(tmp_path):
    """Every database of the instance (runs.db, schedules.db, the event log's index and each run's) is in WAL
    mode, where synchronous = NORMAL (1) keeps it consistent after a crash; our connections use it, not FULL (2)."""
    from ehrxqa_pipeline.cli.dagster_private import PooledSqliteStorage

    storage = PooledSqliteStorage(str(tmp_path))
    connections = [storage.event_log_storage._connect("index"), storage.event_log_storage._connect("run-a"),
                   storage.run_storage.connect(), storage.schedule_storage.connect()]
    for connection in connections:
        with connection as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1
    storage.dispose()


def test_the_event_logs_schema_answers_are_kept_once_yes_asked_again_while_no_and_forgotten_by_a_wipe(tmp_path):
    """Dagster's questions about the index database's schema (a table, an asset key column, a completed data
    migration): a yes is kept (no database is opened to answer it again), a no is asked again each time, so a
    table made meanwhile is seen; a wipe, which empties the migration table, forgets what was kept."""
    import sqlite3

    from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

    from ehrxqa_pipeline.cli.dagster_private import PooledSqliteEventLogStorage

    ours, theirs = PooledSqliteEventLogStorage(str(tmp_path / "ours")), SqliteEventLogStorage(str(tmp_path / "x"))
    questions = [("has_table", "asset_check_executions"), ("has_table", "no_such_table"),
                 ("has_asset_key_col", "cached_status_data"), ("has_asset_key_col", "no_such_column"),
                 ("has_secondary_index", "asset_key_index_columns"), ("has_secondary_index", "no_such_index")]
    answers = [getattr(ours, method)(name) for method, name in questions]
    assert answers == [getattr(theirs, method)(name) for method, name in questions] == [True, False] * 3

    opened = []
    real_get = ours._engines.get
    ours._engines.get = lambda url: opened.append(url) or real_get(url)
    assert ours.has_table("asset_check_executions") and ours.has_asset_key_col("cached_status_data")
    assert ours.has_secondary_index("asset_key_index_columns")
    assert opened == []  # the yeses kept
    with sqlite3.connect(tmp_path / "ours" / "index.db") as con:
        con.execute("CREATE TABLE no_such_table (x)")
    assert ours.has_table("no_such_table") and len(opened) == 1  # the no asked again: now a yes

    ours.wipe()
    theirs.wipe()
    assert {question for question, _ in ours._schema_has} == {"table"}  # only what the wipe itself asked again
    assert [getattr(ours, method)(name) for method, name in questions[2:]] == \
        [getattr(theirs, method)(name) for method, name in questions[2:]]
    ours.dispose()
    theirs.dispose()


def test_a_new_run_database_equals_the_one_dagster_makes_and_an_existing_one_is_kept(tmp_path):
    """A run's database is a copy of an empty one made by Dagster's own initialisation: the same tables, indexes,
    journal mode and Alembic revision as Dagster's storage writes for a new run; a file already there (another
    process made it first) is checked and kept, never replaced."""
    import sqlite3

    from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

    from ehrxqa_pipeline.cli.dagster_private import PooledSqliteEventLogStorage

    def shape(path):
        with sqlite3.connect(path) as con:
            return (sorted(con.execute("SELECT type, name, sql FROM sqlite_master").fetchall()),
                    con.execute("PRAGMA journal_mode").fetchall(), con.execute("SELECT * FROM alembic_version").fetchall())

    theirs, ours = SqliteEventLogStorage(str(tmp_path / "theirs")), PooledSqliteEventLogStorage(str(tmp_path / "ours"))
    for storage in (theirs, ours):
        for run in ("run-a", "run-b"):
            with storage._connect(run):
                pass
    assert shape(tmp_path / "ours" / "run-b.db") == shape(tmp_path / "theirs" / "run-b.db")
    assert shape(tmp_path / "ours" / "run-a.db")[2] != []
    with sqlite3.connect(tmp_path / "ours" / "run-c.db") as con:  # made by someone else, with a row in it
        con.execute("CREATE TABLE kept (x)")
    with ours._connect("run-c"):
        pass
    with sqlite3.connect(tmp_path / "ours" / "run-c.db") as con:
        assert ("kept",) in con.execute("SELECT name FROM sqlite_master").fetchall()
    assert sorted(p.name for p in (tmp_path / "ours").iterdir() if p.suffix == ".part") == []
    ours.dispose()
    theirs.dispose()


def test_without_hard_links_a_run_database_is_made_by_dagsters_own_initialisation(tmp_path, monkeypatch):
    """A file system that refuses hard links (os.link raises): the run's database is still made, by Dagster's own
    initialisation, and no temporary file is left."""
    import sqlite3

    from ehrxqa_pipeline.cli.dagster_private import PooledSqliteEventLogStorage

    def refuse(*_):
        raise PermissionError(1, "Operation not permitted")

    storage = PooledSqliteEventLogStorage(str(tmp_path))
    monkeypatch.setattr(os, "link", refuse)
    with storage._connect("run-a"):
        pass
    with sqlite3.connect(tmp_path / "run-a.db") as con:
        assert con.execute("SELECT count(*) FROM alembic_version").fetchone() == (1,)
    assert not [p for p in tmp_path.iterdir() if p.suffix == ".part"]
    storage.dispose()
