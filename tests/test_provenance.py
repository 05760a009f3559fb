"""The manifest and the datasheet record the source versions that ingestion read (issue 22 point 7): each
file is hashed as ingestion reads it and the version lands in the materialization metadata; a file that
changes while it is read fails the step; the hash cache sees an in-place edit that keeps size and mtime.
One ingestion asset on the small source: a few seconds."""

import os
from pathlib import Path

import dagster as dg
import pytest

from ehrxqa_pipeline.hashing import FileChangedError, HashCache, combine, file_digest
from tests.instances import instance_for_test

TABLE = "patients"


def _flip(path: Path) -> None:
    """Change bytes in place, keeping the size and the mtime (as `cp -p` or `touch -r` would)."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    i = data.rindex(b"F") if b"F" in data else len(data) - 2
    data[i:i + 1] = b"M" if data[i:i + 1] == b"F" else b"F"
    with open(path, "r+b") as fh:  # same inode: an edit, not a replacement
        fh.write(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def test_hash_cache_sees_an_edit_that_keeps_size_and_mtime(tmp_path):
    f = tmp_path / "labels.csv"
    f.write_text("image_id,label\n" + "".join(f"{i},F\n" for i in range(100)))
    cache = HashCache(tmp_path / "cache" / "hashes.json")
    first = cache.digest(f)
    assert HashCache(tmp_path / "cache" / "hashes.json").digest(f) == first  # remembered across processes
    _flip(f)
    second = HashCache(tmp_path / "cache" / "hashes.json").digest(f)
    assert second != first and second == file_digest(f)


def test_hash_cache_refuses_a_file_that_changes_while_it_is_hashed(tmp_path, monkeypatch):
    import ehrxqa_pipeline.hashing as hashing

    f = tmp_path / "labels.csv"
    f.write_text("a,b\n1,2\n")
    real = hashing.file_digest

    def digest_while_written(path):
        out = real(path)
        with open(path, "a") as fh:
            fh.write("3,4\n")
        return out

    monkeypatch.setattr(hashing, "file_digest", digest_while_written)
    with pytest.raises(FileChangedError, match="changed while it was read"):
        HashCache(tmp_path / "hashes.json").digest(f)
    assert not (tmp_path / "hashes.json").exists()  # nothing cached for a version nobody read whole


def test_file_digests_are_remembered_while_the_file_is_the_one_hashed(tmp_path, monkeypatch):
    """A digest is read back, not recomputed, while the file's stat key holds, also in the next build (the
    ``remembering`` store); an edit that keeps size and mtime is hashed again; a deleted file is forgotten."""
    import json

    import ehrxqa_pipeline.hashing as hashing

    monkeypatch.setattr(hashing, "_DIGESTS", {})
    f, gone = tmp_path / "test.json", tmp_path / "gone.json"
    f.write_text("[1, 2, 3]\n")
    gone.write_text("[]\n")
    store = tmp_path / "cache" / hashing.DIGESTS_FILE
    with hashing.remembering(store):
        first, sha = hashing.file_digest(f), hashing.sha256_file(f)
        hashing.file_digest(gone)
        gone.unlink()
    assert sha == __import__("hashlib").sha256(f.read_bytes()).hexdigest()
    assert set(json.loads(store.read_text())) == {f"blake2b:{f}", f"sha256:{f}"}  # the deleted one forgotten

    def no_reading(*args, **kwargs):
        raise AssertionError("read again")

    monkeypatch.setattr(hashing, "_DIGESTS", {})  # the next build's process
    with hashing.remembering(store):
        monkeypatch.setattr(hashing, "open", no_reading, raising=False)
        assert (hashing.file_digest(f), hashing.sha256_file(f)) == (first, sha)
        monkeypatch.delattr(hashing, "open")
        _flip(f)
        assert hashing.file_digest(f) not in (first, None)
        assert hashing.file_digest(f) == hashing.bytes_digest(f.read_bytes())


def test_a_file_that_changes_while_it_is_hashed_is_not_remembered(tmp_path, monkeypatch):
    import ehrxqa_pipeline.hashing as hashing

    monkeypatch.setattr(hashing, "_DIGESTS", {})
    f = tmp_path / "part.json"
    f.write_text("[1]\n")
    real = open

    def open_and_append(path, mode="r", *args, **kwargs):
        with real(path, "a") as fh:
            fh.write("2\n")
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(hashing, "open", open_and_append, raising=False)
    hashing.file_digest(f)
    assert hashing._DIGESTS == {}


def _defs(source: Path, home: Path):
    from assets.ingest import INGEST_ASSETS, ingest_key
    from assets.sources import observe_sources
    from resources import LLMResource, PipelineConfig, VqaDevice, Warehouse

    config = PipelineConfig(home=str(home), source_root=str(source))
    asset = next(a for a in INGEST_ASSETS if a.key == ingest_key(TABLE))
    return dg.Definitions(assets=[observe_sources, asset], resources={
        "pipeline_config": config, "warehouse": Warehouse(config=config), "llm": LLMResource(),
        "vqa_device": VqaDevice()}), asset


@pytest.mark.slow  # runs Dagster steps (instance_for_test, execute_in_process / materialize): not in `make test-fast`
def test_manifest_names_the_version_ingestion_read(source_copy, tmp_path):
    from assets.release import read_source_versions
    from assets.sources import HASH_CACHE, SOURCE_KEYS, SOURCE_VERSION_FIELD
    from ehrxqa_pipeline.config import Settings
    from ehrxqa_pipeline.release import manifest
    from ehrxqa_pipeline.sources.files import origin

    source, _ = source_copy
    home = tmp_path / "home"
    settings = Settings.resolve(home=str(home), source_root=str(source))
    layout = settings.layout()
    path = origin(layout, TABLE)
    read = combine(file_digest(path))
    defs, asset = _defs(source, home)
    with instance_for_test() as instance:
        job = defs.resolve_implicit_global_asset_job_def()
        assert job.execute_in_process(instance=instance, asset_selection=[SOURCE_KEYS[TABLE], asset.key]).success
        event = instance.get_latest_materialization_event(asset.key).asset_materialization
        assert event.metadata[SOURCE_VERSION_FIELD].value == read
        assert event.metadata["source_file"].value == layout.canonical(path)

        _flip(path)  # the gold label file is edited after ingestion read it, before the release step
        rehash = combine(file_digest(path))
        assert rehash != read
        recorded = read_source_versions(instance)
        assert recorded[TABLE] == read
        section = manifest.source_section(layout, manifest.source_digests(
            layout, HashCache(settings.cache_dir / HASH_CACHE), recorded))
        assert section["data_versions"][TABLE]["data_version"] == read  # not the re-hash
        # a source no ingestion read here: the observation that drove the build (none: hashed now)
        assert recorded["admissions"] is None
        assert section["data_versions"]["admissions"]["data_version"] == combine(
            file_digest(origin(layout, "admissions")))

        # the observation behind `build --changed` sees the same-size, same-mtime edit
        assert job.execute_in_process(instance=instance, asset_selection=[SOURCE_KEYS[TABLE]]).success
        observed = instance.get_latest_data_version_record(SOURCE_KEYS[TABLE], is_source=True)
        assert observed.asset_observation.tags["dagster/data_version"] == rehash


@pytest.mark.slow  # runs Dagster steps (instance_for_test, execute_in_process / materialize): not in `make test-fast`
def test_a_source_file_that_changes_while_it_is_ingested_fails_the_step(source_copy, tmp_path, monkeypatch):
    import assets.ingest as ingest_module
    from ehrxqa_pipeline.config import Settings
    from ehrxqa_pipeline.sources.files import origin

    source, _ = source_copy
    home = tmp_path / "home"
    path = origin(Settings.resolve(home=str(home), source_root=str(source)).layout(), TABLE)
    real = ingest_module.ingest_table

    def ingest_while_copied(*args, **kwargs):
        out = real(*args, **kwargs)
        with open(path, "ab") as fh:
            fh.write(b"")
            os.utime(path)  # a copy still under way: the file moves on after the read
        with open(path, "r+b") as fh:
            fh.seek(0, 2)
            fh.write(b"\n")
        return out

    monkeypatch.setattr(ingest_module, "ingest_table", ingest_while_copied)
    defs, asset = _defs(source, home)
    with instance_for_test() as instance:
        result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
            instance=instance, asset_selection=[asset.key], raise_on_error=False)
        assert not result.success
        (failure,) = [e for e in result.all_events if e.is_step_failure]
        message = failure.event_specific_data.error.message
        assert "changed while it was read (size, mtime, ctime or inode differ after the read); nothing was " \
            "ingested: it is being written or copied" in message and path.name in message
        assert instance.get_latest_materialization_event(asset.key) is None


@pytest.mark.slow  # runs Dagster steps (instance_for_test, execute_in_process / materialize): not in `make test-fast`
def test_the_semantics_version_is_the_one_the_ontology_read(source_copy, tmp_path):
    from assets.cxr_labels import ontology
    from assets.release import read_source_versions
    from assets.sources import SOURCE_VERSION_FIELD
    from ehrxqa_pipeline import names
    from ehrxqa_pipeline.config import Settings
    from ehrxqa_pipeline.sources.semantics import semantics_paths
    from resources import PipelineConfig, Warehouse

    source, _ = source_copy
    home = tmp_path / "home"
    paths = list(semantics_paths(Settings.resolve(home=str(home), source_root=str(source)).layout()))
    read = combine(*(file_digest(p) for p in paths))
    config = PipelineConfig(home=str(home), source_root=str(source))
    with instance_for_test() as instance:
        assert dg.materialize([ontology], instance=instance, resources={
            "pipeline_config": config, "warehouse": Warehouse(config=config)}).success
        meta = instance.get_latest_materialization_event(ontology.key).asset_materialization.metadata
        assert meta[SOURCE_VERSION_FIELD].value == read
        paths[0].write_text(paths[0].read_text() + "\n")  # edited after the ontology read it
        assert read_source_versions(instance)[names.SEMANTICS] == read
