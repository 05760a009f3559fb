"""release/manifest.json on hand-made folders: hashes, order, exclusions, portability, DuckDB content digests."""

import hashlib
import json
import re
import shutil
import subprocess

import duckdb
import pytest

from ehrxqa_pipeline.cli.build import BuildSummary, format_summary
from ehrxqa_pipeline.config import Settings
from ehrxqa_pipeline.release import digest, manifest
from tests.release.helpers import make_release, make_source

ABC_SHA256 = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"  # FIPS 180-2 example


def _manifest(root, release, source, seed=5):
    return manifest.build_manifest(
        release, sources=manifest.source_section(source, manifest.source_digests(source)),
        code={"package": "p", "version": "0", "sha256": "c"}, seed=seed, config={"check_images": False},
        asset_code_versions={"b/x": "1", "a/y": None})


def test_sha256_of_a_known_byte_string(tmp_path):
    assert digest.sha256_bytes(b"abc") == ABC_SHA256
    (tmp_path / "abc.txt").write_bytes(b"abc")
    assert manifest.file_entries(tmp_path) == [{"path": "abc.txt", "digest": "bytes", "bytes": 3,
                                                "sha256": ABC_SHA256}]


def test_entries_sorted_without_manifest_or_hidden_files(tmp_path):
    for rel in ("b/x.json", "a.txt", "b/a/z.png", "manifest.json", ".manifest.json.123.tmp", "b/.x.json.9.tmp"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    assert [e["path"] for e in manifest.file_entries(tmp_path)] == ["a.txt", "b/a/z.png", "b/x.json"]
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "manifest.json").write_text("{}")  # only the top-level manifest is left out
    assert "sub/manifest.json" in [e["path"] for e in manifest.file_entries(tmp_path)]


def test_a_changed_file_changes_exactly_one_entry(tmp_path):
    release = make_release(tmp_path)
    before = manifest.file_entries(release)
    (release / "ehrxqa" / "valid.json").write_text("[]\n")
    after = manifest.file_entries(release)
    changed = [(a, b) for a, b in zip(before, after) if a != b]
    assert len(before) == len(after) and [a["path"] for a, _ in changed] == ["ehrxqa/valid.json"]
    assert manifest.verify(release, {"files": before}) == ["changed: ehrxqa/valid.json"]


def test_manifest_is_portable_and_repeatable(tmp_path):
    release, source = make_release(tmp_path / "one"), make_source(tmp_path / "one")
    text = manifest.dumps(_manifest(tmp_path, release, source))
    assert str(tmp_path) not in text and "/tmp" not in text
    assert not re.search(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}", text)  # no time stamps
    assert manifest.dumps(_manifest(tmp_path, release, source)) == text
    shutil.copytree(tmp_path / "one", tmp_path / "two")  # another place, same bytes: same manifest
    assert manifest.dumps(_manifest(tmp_path, tmp_path / "two" / "release", tmp_path / "two" / "source")) == text
    doc = json.loads(text)
    assert list(doc["asset_code_versions"]) == ["a/y", "b/x"] and doc["seed"] == 5
    assert doc["sources"]["synthetic"] and doc["sources"]["generator"]["seed"] == 3
    assert "planted" not in text  # the generator's planted-defect counts are not provenance
    assert doc["sources"]["releases"] == {"mimiciv": "2.2", "mimic-cxr-jpg": "2.0.0", "chest-imagenome": "1.0.0"}
    assert doc["sources"]["data_versions"]["patients"]["files"] == ["mimiciv/2.2/hosp/patients.csv"]


def test_written_manifest_verifies_and_reports_missing_and_unlisted(tmp_path):
    release = make_release(tmp_path)
    doc = _manifest(tmp_path, release, make_source(tmp_path))
    path = manifest.write_manifest(doc, release)
    manifest.write_sha256sums(release, doc["files"])
    assert path == release / "manifest.json" and manifest.verify(release) == []
    assert manifest.main([str(release)]) == 0
    (release / "ehrxqa" / "test.json").unlink()
    (release / "extra.txt").write_text("x")
    assert manifest.verify(release) == ["missing: ehrxqa/test.json", "not in the manifest: extra.txt"]
    assert manifest.main([str(release)]) == 1


def test_source_data_version_changes_with_one_file(tmp_path):
    source = make_source(tmp_path)
    before = manifest.source_section(source, manifest.source_digests(source))
    (source / "mimiciv/2.2/hosp/patients.csv").write_text("changed\n")
    after = manifest.source_section(source, manifest.source_digests(source))
    changed = [k for k in before["data_versions"] if before["data_versions"][k] != after["data_versions"][k]]
    assert changed == ["patients"] and before["digest"] != after["digest"]


def _duckdb(path, order: str) -> None:
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, s VARCHAR NOT NULL, x DOUBLE)")
    con.execute(f"INSERT INTO t SELECT range, 'v' || (range % 13), range / 7 FROM range(5000) ORDER BY range {order}")
    con.close()


def test_duckdb_files_get_a_content_digest(tmp_path):
    _duckdb(tmp_path / "a.duckdb", "ASC")
    _duckdb(tmp_path / "b.duckdb", "DESC")  # other insert order, other bytes, same content
    a, b = manifest.file_entries(tmp_path)
    assert a["digest"] == b["digest"] == "content" and a["rows"] == b["rows"] == 5000
    assert a["sha256"] == b["sha256"] and "bytes" not in a
    con = duckdb.connect(str(tmp_path / "b.duckdb"))
    con.execute("UPDATE t SET s = 'w' WHERE id = 17")
    con.close()
    assert manifest.file_entries(tmp_path)[1]["sha256"] != a["sha256"]


def test_code_digest_covers_source_files_only(tmp_path):
    for rel in ("pkg/a.py", "pkg/sub/b.yaml", "pkg/__pycache__/a.cpython-311.pyc", "pkg/.hidden", "pkg/c.pyc",
                "other/d.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    files = digest.code_files(tmp_path, ("pkg", "missing"))
    assert files == ["pkg/a.py", "pkg/sub/b.yaml"]
    before = digest.tree_digest(tmp_path, files)
    (tmp_path / "pkg/__pycache__/a.cpython-311.pyc").write_text("changed")
    assert digest.tree_digest(tmp_path, digest.code_files(tmp_path, ("pkg",))) == before
    (tmp_path / "pkg/a.py").write_text("changed")
    assert digest.tree_digest(tmp_path, files) != before
    code = manifest.code_section()  # this repository
    assert code["files"] > 50 and code["dirs"][0] == "ehrxqa_pipeline" and len(code["sha256"]) == 64


def test_build_summary_points_at_manifest_and_datasheet(tmp_path):
    settings = Settings.resolve(str(tmp_path), env={})
    (settings.release_dir / "ehrxqa").mkdir(parents=True)
    for name in ("manifest.json", "datasheet.md", "CHANGELOG.md"):
        (settings.release_dir / name).write_text("x")
    text = format_summary(BuildSummary(success=True, seconds=1.0), settings)
    assert str(settings.release_dir / "manifest.json") in text and str(settings.release_dir / "datasheet.md") in text
    assert str(settings.release_dir / "CHANGELOG.md") in text
    assert "croissant.json" not in text  # only the files that are there
    assert hashlib.sha256(b"").hexdigest() == digest.sha256_bytes(b"")


def test_build_summary_says_when_llm_answers_came_from_the_cache(tmp_path):
    settings = Settings.resolve(str(tmp_path), env={})
    cached = BuildSummary(success=True, seconds=1.0)
    cached.materialized["paraphrase/candidates"] = {"dagster/row_count": 9, "cache_hits": 7, "requests": 2}
    line = next(x for x in format_summary(cached, settings).splitlines() if "LLM answers" in x)
    assert line == (f"  paraphrase/candidates: 7 LLM answers reused from {settings.cache_dir / 'llm_cache.duckdb'} "
                    "(2 requests sent); `ehrxqa cache clear llm` asks the endpoint again")
    fresh = BuildSummary(success=True, seconds=1.0)
    fresh.materialized["paraphrase/candidates"] = {"cache_hits": 0, "requests": 9}
    assert "LLM answers" not in format_summary(fresh, settings)


def _sha256sum_check(folder) -> subprocess.CompletedProcess:
    return subprocess.run(["sha256sum", "-c", "--strict", "SHA256SUMS.txt"], cwd=folder, capture_output=True,
                          text=True)


def test_sha256sums_lists_every_file_and_passes_sha256sum_check(tmp_path):
    release = make_release(tmp_path)
    (release / "databases").mkdir()
    _duckdb(release / "databases" / "x.duckdb", "ASC")
    (release / "SHA256SUMS.txt").write_text("stale\n")  # a previous build's: neither listed nor a listing
    doc = _manifest(tmp_path, release, make_source(tmp_path))
    assert "SHA256SUMS.txt" not in [e["path"] for e in doc["files"]]
    manifest.write_manifest(doc, release)
    path = manifest.write_sha256sums(release, doc["files"])
    lines = path.read_text().splitlines()
    paths = [line.split("  ", 1)[1] for line in lines]
    assert paths == sorted([e["path"] for e in doc["files"]] + ["manifest.json"])  # every file but itself
    sums = dict(reversed(line.split("  ", 1)) for line in lines)
    for e in doc["files"]:  # the manifest's byte digests, stated again; DuckDB files by their bytes
        want = e["sha256"] if e["digest"] == "bytes" else digest.sha256_file(release / e["path"])
        assert sums[e["path"]] == want
    assert sums["manifest.json"] == digest.sha256_file(release / "manifest.json")
    done = _sha256sum_check(release)
    assert done.returncode == 0 and "FAILED" not in done.stdout, done.stdout + done.stderr
    assert manifest.verify_sums(release) == [] and manifest.main([str(release)]) == 0
    # one changed byte: sha256sum -c (and verify_sums) name that file only
    target = release / "ehrxqa" / "valid.json"
    data = bytearray(target.read_bytes())
    data[0] ^= 1
    target.write_bytes(bytes(data))
    done = _sha256sum_check(release)
    assert done.returncode == 1 and [x for x in done.stdout.splitlines() if "FAILED" in x] == [
        "ehrxqa/valid.json: FAILED"], done.stdout
    assert manifest.verify_sums(release) == ["SHA256SUMS.txt: changed: ehrxqa/valid.json"]
    (release / "extra.txt").write_text("x")
    assert manifest.verify_sums(release)[0] == "not in SHA256SUMS.txt: extra.txt"
    assert manifest.main([str(release)]) == 1


def test_sha256sums_refuses_names_sha256sum_would_escape(tmp_path):
    (tmp_path / "a\\b.txt").write_text("x")
    (tmp_path / "manifest.json").write_text("{}")
    with pytest.raises(ValueError, match="newline or backslash"):
        manifest.sha256sums(tmp_path, manifest.file_entries(tmp_path))


def test_a_file_comes_back_when_it_holds_its_bytes_or_a_database_its_content(tmp_path):
    """``not_restored``: a file is restored when it holds the bytes SHA256SUMS.txt lists; a DuckDB database, whose
    bytes differ from write to write, when it holds the content the manifest lists (the manifest as its step
    wrote it); ``sums_problems``: SHA256SUMS.txt itself gone or edited, by a line it was not written with."""
    release = make_release(tmp_path)
    (release / "databases").mkdir()
    db = release / "databases" / "x.duckdb"
    _duckdb(db, "ASC")
    doc = _manifest(tmp_path, release, make_source(tmp_path))
    manifest.write_manifest(doc, release)
    manifest.write_sha256sums(release, doc["files"])
    written = digest.sha256_file(release / "manifest.json")
    target = release / "ehrxqa" / "valid.json"
    original = target.read_bytes()
    target.write_bytes(original + b" ")
    db.unlink()
    _duckdb(db, "DESC")  # the same table, written in the other order: other bytes
    assert manifest.sums_problems(release) == {"databases/x.duckdb": "changed", "ehrxqa/valid.json": "changed"}
    rels = ["databases/x.duckdb", "ehrxqa/valid.json"]
    assert manifest.not_restored(release, rels, written) == ["ehrxqa/valid.json"]
    target.write_bytes(original)
    assert manifest.not_restored(release, rels, written) == []
    # the manifest not as its step wrote it: the database's content cannot be vouched for
    assert manifest.not_restored(release, rels, "0" * 64) == ["databases/x.duckdb"]
    db.unlink()
    assert manifest.not_restored(release, rels, written) == ["databases/x.duckdb"]
    sums = release / "SHA256SUMS.txt"
    sums.write_text(sums.read_text() + "not a line of sha256sum\n")
    assert manifest.sums_problems(release) == {"SHA256SUMS.txt": "changed"}
    assert manifest.verify_sums(release) == ["changed: SHA256SUMS.txt"]
    sums.unlink()
    assert manifest.sums_problems(release) == {"SHA256SUMS.txt": "missing"}
    assert manifest.verify_sums(release) == ["missing: SHA256SUMS.txt"]
