"""Outputs changed on disk after they were written: `ehrxqa build --changed` writes again what a user deleted or
edited under EHRXQA_HOME (a release file saved by hand, a folder removed, warehouse tables dropped), and never
reports success over a release that ``sha256sum -c SHA256SUMS.txt`` rejects. The automation and the freshness
pass read the instance only: before, such a release passed for up to date ("0 assets materialized ... build
succeeded"); ``assets.freshness.damaged_outputs`` reads the disk.

On a copy of the small synthetic source's full build (tests/pipeline_graph.py: ``built``), in this order; each
scenario but the last leaves the home as the build left it."""

import shutil

import dagster as dg
import pytest

from assets.freshness import damaged_outputs
from ehrxqa_pipeline.cli.build import build
from ehrxqa_pipeline.hashing import sha256_file
from ehrxqa_pipeline.release.manifest import SUMS_NAME, verify, verify_sums
from tests.pipeline_graph import (GRAPH, SMALL_EHRXQA, TEST_DEFS, built, release_files,  # noqa: F401
                                  with_code_versions)

pytestmark = pytest.mark.slow  # whole-graph builds: not in `make test-fast`


def _changed(settings, instance):
    summary = build(settings, instance=instance, defs=TEST_DEFS, changed=True, run_config=SMALL_EHRXQA,
                    log=lambda _: None)
    assert summary.success, summary.failures
    return set(summary.materialized)


def test_a_built_home_has_no_damage_and_every_release_file_has_one_writer(built):
    from assets.freshness import _writers, written_by

    settings, instance, *_ = built
    assert not damaged_outputs(GRAPH, instance, settings.home, settings.release_dir, settings.source_dir)
    release = settings.release_dir
    # (this home is a copy of the build's: its materializations name the files in the home they were written in)
    written = written_by(GRAPH, instance, settings.home, release, settings.source_dir)
    listed = [line.split("  ", 1)[1] for line in (release / SUMS_NAME).read_text().splitlines()]
    owners = {rel: [k.to_user_string() for k in _writers(release / rel, written)] for rel in listed}
    assert {rel: w for rel, w in owners.items() if len(w) != 1} == {}
    # the files of the statistics assets beside their dataset's records are theirs, not the records' writer's
    assert owners["mimic-cxr-vqa/statistics.json"] == ["mimic_cxr_vqa/statistics"]
    assert owners["ehrxqa/statistics.md"] == ["ehrxqa/statistics"]
    assert owners["CHANGELOG.md"] == owners["manifest.json"] == ["release/manifest"]
    assert _writers(release / SUMS_NAME, written) == [dg.AssetKey(["release", "manifest"])]


def test_a_deleted_and_an_edited_release_file_are_written_again_by_their_assets_alone(built):
    settings, instance, *_ = built
    release = settings.release_dir
    before = release_files(release)
    test_split, plot = release / "ehrxqa" / "test.json", release / "plots" / "funnel.png"
    test_split.unlink()
    plot.write_bytes(plot.read_bytes() + b"edited by hand")
    mine = release / "notes.txt"  # a file of the user's: not the build's, left as it is and unlisted
    mine.write_text("mine")
    found = damaged_outputs(GRAPH, instance, settings.home, release, settings.source_dir)
    assert {k.to_user_string(): why for k, why in found.assets.items()} == {
        "release/ehrxqa/gold": ["release/ehrxqa/test.json is missing",
                                "release/ehrxqa/test.json missing since the manifest listed it"],
        "release/plots": ["release/plots/funnel.png changed since the manifest listed it"]}
    # the files come back byte for byte: SHA256SUMS.txt holds them already, the manifest is not written again
    assert _changed(settings, instance) == {"release/ehrxqa/gold", "release/plots"}
    mine.unlink()
    assert release_files(release) == before and verify_sums(release) == [] and verify(release) == []
    assert _changed(settings, instance) == set()


def test_deleted_databases_are_written_again_and_the_manifest_lists_their_new_bytes(built):
    settings, instance, *_ = built
    release = settings.release_dir
    before, manifest = release_files(release), sha256_file(release / "manifest.json")
    (release / "ehrxqa" / "databases" / "gold" / "mimic_iv_cxr.duckdb").unlink()
    (settings.home / "answer_sheets" / "gold" / "tb_cxr_plus.db").unlink()  # outside the release: by its path
    assert _changed(settings, instance) == {"ehr_db/gold", "ehr_db/gold_answers", "release/manifest"}
    # a DuckDB file written again holds the same tables in other bytes (release.digest): the manifest, the same,
    # and SHA256SUMS.txt with that file's new line
    assert sha256_file(release / "manifest.json") == manifest
    assert release_files(release) == before and verify_sums(release) == []
    assert (settings.home / "answer_sheets" / "gold" / "tb_cxr_plus.db").is_file()


def test_a_changed_file_of_an_asset_that_runs_anyway_is_not_damage(built):
    """An asset whose own inputs changed (here: its code version) runs anyway, and a file of it that differs from
    its line may be the new one a build, killed before that materialization was recorded, wrote: not damage. A
    file gone is damage whatever the asset's state (writes are atomic: no kill leaves one missing)."""
    settings, instance, *_ = built
    key = dg.AssetKey(["release", "ehrxqa", "gold"])
    bumped = with_code_versions(lambda k, cv: cv + "-bumped" if k == key else cv).resolve_asset_graph()

    def found(graph) -> list[str]:
        return damaged_outputs(graph, instance, settings.home, settings.release_dir, settings.source_dir).lines()

    split = settings.release_dir / "ehrxqa" / "test.json"
    kept = split.read_bytes()
    split.write_bytes(kept.replace(b'"answer"', b'"answer" ', 1))  # as a killed build's writer left it
    assert found(bumped) == []
    assert found(GRAPH) == ["release/ehrxqa/gold: release/ehrxqa/test.json changed since the manifest listed it"]
    split.unlink()
    assert found(bumped) == ["release/ehrxqa/gold: release/ehrxqa/test.json is missing; release/ehrxqa/test.json "
                             "missing since the manifest listed it"]
    split.write_bytes(kept)
    assert found(GRAPH) == [] and _changed(settings, instance) == set()


def test_a_deleted_release_folder_comes_back_as_it_was(built):
    settings, instance, *_ = built
    before = release_files(settings.release_dir)
    shutil.rmtree(settings.release_dir)
    rerun = _changed(settings, instance)
    assert release_files(settings.release_dir) == before and verify_sums(settings.release_dir) == []
    # what writes into the release, and nothing else: no data step, no check of the warehouse's tables
    assert all(k.startswith(("release/", "ehr_db/", "ehrxqa/", "mimic_cxr_vqa/", "paraphrase/", "cxr_cohort/",
                             "vqa_scoring/scores")) for k in rerun), rerun
    assert not {k for k in rerun if k.startswith("ehrxqa/") and k not in ("ehrxqa/catalog", "ehrxqa/statistics")}
    assert {k for k in rerun if k.startswith("ehr_db/")} == {"ehr_db/silver", "ehr_db/gold"}


def test_dropped_warehouse_tables_are_written_again_by_their_assets_alone(built):
    """An asset whose contracted table is gone from the warehouse (dropped by hand; after `warehouse.duckdb` was
    deleted, every one: README) is materialized again; its content comes back the same, so nothing below it runs."""
    import duckdb

    settings, instance, *_ = built
    before = release_files(settings.release_dir)
    with duckdb.connect(str(settings.warehouse)) as con:
        rows = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("ingest.d_labitems", "splits.gold")}
        for table in rows:
            con.execute(f"DROP TABLE {table}")
    found = damaged_outputs(GRAPH, instance, settings.home, settings.release_dir, settings.source_dir,
                            tables=_tables(settings))
    assert {k.to_user_string(): why for k, why in found.assets.items()} == {
        "ingest/d_labitems": ["table ingest.d_labitems is missing from the warehouse"],
        "splits/gold": ["table splits.gold is missing from the warehouse"]}
    assert _changed(settings, instance) == {"ingest/d_labitems", "splits/gold"}
    with duckdb.connect(str(settings.warehouse), read_only=True) as con:
        assert {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in rows} == rows
    assert release_files(settings.release_dir) == before and _changed(settings, instance) == set()


def _tables(settings) -> set[str]:
    import duckdb

    with duckdb.connect(str(settings.warehouse), read_only=True) as con:
        return {f"{s}.{t}" for s, t in con.execute("SELECT schema_name, table_name FROM duckdb_tables()").fetchall()}


def test_a_file_nothing_writes_again_fails_the_build_by_name(built, monkeypatch):
    """A writer that leaves a file as it is (here: release/plots, its writing stubbed) cannot restore it: the
    build fails naming the file, and the manifest does not list the edited bytes."""
    import assets.release as release_assets

    settings, instance, *_ = built
    plot = settings.release_dir / "plots" / "funnel.png"
    original = plot.read_bytes()
    plot.write_bytes(original + b"edited by hand")
    sums = (settings.release_dir / SUMS_NAME).read_text()
    monkeypatch.setattr(release_assets.plots, "write_plots", lambda *a, **k: {})
    summary = build(settings, instance=instance, defs=TEST_DEFS, changed=True, run_config=SMALL_EHRXQA,
                    log=lambda _: None)
    assert not summary.success
    assert any(f.startswith("release/plots/funnel.png: materialized again, it still differs") for f in summary.failures)
    assert (settings.release_dir / SUMS_NAME).read_text() == sums
    monkeypatch.undo()
    plot.write_bytes(original)
    assert verify_sums(settings.release_dir) == [] and _changed(settings, instance) == set()


def test_a_file_deleted_while_the_build_runs_is_written_again_by_its_last_look(built, monkeypatch):
    """After its rounds, `build --changed` looks again: a file removed meanwhile (after the first look) is written
    again, its asset alone."""
    from ehrxqa_pipeline.cli import build as cli_build

    settings, instance, *_ = built
    split = settings.release_dir / "mimic-cxr-vqa" / "valid.json"
    kept = split.read_bytes()
    real = cli_build._Runner.run_changed

    def run_changed(self, instance):
        split.unlink()  # as though by hand, during the build
        return real(self, instance)

    monkeypatch.setattr(cli_build._Runner, "run_changed", run_changed)
    assert _changed(settings, instance) == {"release/mimic_cxr_vqa"}
    assert split.read_bytes() == kept and verify_sums(settings.release_dir) == []


def test_what_the_last_look_leaves_damaged_fails_the_build_by_name(built, monkeypatch):
    """A file outside the release that its asset, materialized again, does not write (here: the review queue,
    its writing stubbed) fails the build after both looks, named."""
    from pathlib import Path

    from ehrxqa_pipeline import atomic

    settings, instance, *_ = built
    queue = settings.home / "paraphrase" / "review_queue.csv"
    kept = queue.read_bytes()
    queue.unlink()
    real = atomic.write_text
    monkeypatch.setattr(atomic, "write_text", lambda path, text, *a, **k: None if Path(path) == queue
                        else real(path, text, *a, **k))
    summary = build(settings, instance=instance, defs=TEST_DEFS, changed=True, run_config=SMALL_EHRXQA,
                    log=lambda _: None)
    assert not summary.success and set(summary.materialized) == {"paraphrase/review"}
    assert summary.failures == ["after the build, paraphrase/review: paraphrase/review_queue.csv is missing"]
    monkeypatch.undo()
    assert _changed(settings, instance) == {"paraphrase/review"} and queue.read_bytes() == kept


def test_a_listed_file_no_asset_names_fails_the_build_and_stays_listed(built):
    """A release file SHA256SUMS.txt lists that no materialization names (a home built before every file was named)
    cannot be written again here: the build fails at once, naming it, and the manifest does not list the release
    without it (which `sha256sum -c` would then pass)."""
    settings, instance, *_ = built
    theirs = settings.release_dir / "paraphrases" / "older.txt"
    theirs.write_text("written by an older build")
    assert build(settings, select="key:release/manifest", instance=instance, defs=TEST_DEFS).success  # listed
    sums = (settings.release_dir / SUMS_NAME).read_text()
    assert "paraphrases/older.txt" in sums
    theirs.unlink()
    summary = build(settings, instance=instance, defs=TEST_DEFS, changed=True, run_config=SMALL_EHRXQA,
                    log=lambda _: None)
    assert not summary.success and summary.materialized == {}
    assert summary.failures == ["release/paraphrases/older.txt is gone or changed, and no asset's latest "
                                "materialization names it: `ehrxqa build` (every asset) writes the release again"]
    assert (settings.release_dir / SUMS_NAME).read_text() == sums
    assert build(settings, select="key:release/manifest", instance=instance, defs=TEST_DEFS).success
    assert verify_sums(settings.release_dir) == [] and _changed(settings, instance) == set()


def test_an_unevaluated_home_is_not_damaged(tmp_path):
    """No materialization names anything on an empty instance: nothing to write again."""
    with dg.instance_for_test() as instance:
        found = damaged_outputs(GRAPH, instance, tmp_path, tmp_path / "release")
    assert not found and found.lines() == []


def test_a_gold_edit_with_its_database_deleted_builds(built):
    """A source change and a file gone at once: the gold database, which nothing of a gold label edit writes again
    (its inputs do not change), is written again first, then the edit's rounds read it. (Last in this module: it
    leaves the home built from the edited source.)"""
    from benchmarks import edits

    settings, instance, *_ = built
    edit = edits.gold_label(settings.source_dir, settings.warehouse)
    edit.apply()
    (settings.release_dir / "ehrxqa" / "databases" / "gold" / "mimic_iv_cxr.db").unlink()
    try:
        rerun = _changed(settings, instance)
    finally:
        edit.undo()
    assert {"ehr_db/gold", "ingest/gold_relations", "release/manifest"} <= rerun and "ehr_db/silver" not in rerun
    assert verify_sums(settings.release_dir) == []
