"""Release identity (manifest, datasheet), the release README and `ehrxqa changelog` on hand-made releases."""

import copy
import json

from ehrxqa_pipeline.cli import main
from ehrxqa_pipeline.release import changelog, datasheet, identity, manifest, readme, tables
from tests.release.helpers import EHRXQA_MD, FUNNELS, REJECTED, VQA_MD, make_release, make_source

CODE = {"package": "ehrxqa-pipeline", "version": "0.1.0", "sha256": "0123456789abcdef" * 4, "files": 3,
        "dirs": ["assets"]}


def _manifest(root, release, code=CODE):
    source = make_source(root)
    return manifest.build_manifest(release, sources=manifest.source_section(source, manifest.source_digests(source)),
                                   code=code, seed=1, config={"check_images": False}, asset_code_versions={})


def test_manifest_names_the_published_releases_and_the_release_version(tmp_path):
    release = make_release(tmp_path)
    m = _manifest(tmp_path, release)
    assert m["release_version"] == "0.1.0+0123456789ab"
    assert m["identity"]["deviations"] == "docs/deviations.md"
    reproduces = m["identity"]["reproduces"]
    assert reproduces["ehrxqa"]["name"] == "EHRXQA 1.0.0"
    assert reproduces["mimic-cxr-vqa"]["name"] == "MIMIC-Ext-MIMIC-CXR-VQA 1.0.0"
    assert reproduces["mimic-cxr-vqa"]["url"] == "https://physionet.org/content/mimic-ext-mimic-cxr-vqa/1.0.0/"
    # the same code gives the same version: nothing of the clock in it
    assert manifest.dumps(_manifest(tmp_path, release)) == manifest.dumps(m)


def test_datasheet_states_the_identity_from_the_same_constants(tmp_path):
    release = make_release(tmp_path)
    gathered = tables.gather(release, FUNNELS, REJECTED)
    source = make_source(tmp_path)
    sources = manifest.source_section(source, manifest.source_digests(source))
    md = datasheet.render_datasheet(gathered, sources, CODE, 1, {})
    assert "Release version `0.1.0+0123456789ab`" in md and "| release version | 0.1.0+0123456789ab |" in md
    for p in identity.PUBLISHED.values():
        assert f"`{p.folder}/` reproduces **{p.name}** ({p.url})" in md
    assert identity.DEVIATIONS_DOC in md


def test_readme_counts_empty_answers_per_dataset_and_split(tmp_path):
    release = make_release(tmp_path)
    gathered = tables.gather(release, FUNNELS, REJECTED)
    text = readme.render_readme(gathered, CODE)
    # helpers: MIMIC-CXR-VQA valid has its one record with [], EHRXQA valid its one record with []
    assert "| MIMIC-CXR-VQA | valid | 1 | 1 | 100.0 % |" in text
    assert "| MIMIC-CXR-VQA | train | 3 | 0 | 0.0 % |" in text
    assert "| EHRXQA | valid | 1 | 1 | 100.0 % |" in text and "| EHRXQA | test | 2 | 0 | 0.0 % |" in text
    assert "EHRXQA 1.0.0" in text and "MIMIC-Ext-MIMIC-CXR-VQA 1.0.0" in text and "0.1.0+0123456789ab" in text
    for snippet in ("pd.read_json(", "pl.read_json(", 'load_dataset("json", data_files=', "duckdb.sql("):
        assert snippet in text
    assert "2100-2105" in text and "`study_id`" in text


def _contents(ehrxqa_templates, vqa_templates):
    def ds(templates):
        return {"records": {s: sum(t[s] for t in templates.values()) for s in changelog.SPLITS},
                "templates": templates}
    return {"ehrxqa": ds(ehrxqa_templates), "mimic_cxr_vqa": ds(vqa_templates)}


def _t(train, valid, test, definition):
    return {"train": train, "valid": valid, "test": test, "definition": definition}


def test_changelog_lists_an_added_template_and_a_changed_count():
    old = {"release_version": "0.1.0+aaaaaaaaaaaa", "seed": 0, "config": {"x": 1},
           "files": [{"path": "ehrxqa/train.json", "sha256": "1"}, {"path": "gone.txt", "sha256": "2"}],
           "contents": _contents({"0": _t(40, 5, 10, "what is {x}?"), "1": _t(8, 1, 10, "how many {y}?")},
                                 {"program_1": _t(533, 35, 28, "presence / verify")})}
    new = copy.deepcopy(old)
    new["release_version"] = "0.1.0+bbbbbbbbbbbb"
    new["config"] = {"x": 2}
    new["files"] = [{"path": "ehrxqa/train.json", "sha256": "3"}, {"path": "README.md", "sha256": "4"}]
    new["contents"] = _contents({"0": _t(40, 5, 10, "what is {x}?"), "1": _t(12, 1, 10, "how many {y}?"),
                                 "2": _t(3, 0, 1, "when was {z}?")},
                                {"program_1": _t(533, 35, 28, "presence / verify")})
    md = changelog.changelog(old, new)
    assert md.startswith("# Changes from 0.1.0+aaaaaaaaaaaa to 0.1.0+bbbbbbbbbbbb\n")
    assert "- configuration: `x` changed" in md
    assert "| train | 48 | 55 | +7 |" in md and "| test | 20 | 21 | +1 |" in md
    assert "Templates: 3 (was 2); 1 added, 0 removed, 0 changed, 1 with other counts." in md
    assert "| 2 | when was {z}? | 3 | 0 | 1 |" in md
    assert "| 1 | 8 -> 12 | 1 | 10 |" in md
    vqa = md.split("### MIMIC-CXR-VQA", 1)[1]
    assert "Templates: 1 (was 1); 0 added, 0 removed, 0 changed, 0 with other counts." in vqa
    assert "- added (1): `README.md`" in md and "- removed (1): `gone.txt`" in md
    assert "- changed (1): `ehrxqa/train.json`" in md


def test_changelog_reports_a_removed_and_a_redefined_template():
    old = {"contents": _contents({"0": _t(1, 1, 1, "a?"), "1": _t(1, 1, 1, "b?")}, {})}
    new = {"contents": _contents({"0": _t(1, 1, 1, "a, changed?")}, {})}
    md = changelog.changelog(old, new)
    assert "1 removed, 1 changed, 0 with other counts" in md
    assert "| 1 | b? | 1 | 1 | 1 |" in md and "| 0 | a? | a, changed? |" in md


def test_changelog_command_reads_two_release_folders(tmp_path, capsys):
    old_dir = make_release(tmp_path / "old")
    manifest.write_manifest(_manifest(tmp_path / "old", old_dir), old_dir)
    gathered = tables.gather(old_dir, FUNNELS, REJECTED)
    tables.write_tables(old_dir, gathered, tables.render_markdown(gathered, VQA_MD, EHRXQA_MD))
    new_dir = make_release(tmp_path / "new")
    stats = json.loads((new_dir / "ehrxqa" / "statistics.json").read_text())
    stats["per_template"][0]["train"] += 2  # no statistics/tables.json here: read from ehrxqa/statistics.json
    (new_dir / "ehrxqa" / "statistics.json").write_text(json.dumps(stats))
    manifest.write_manifest(_manifest(tmp_path / "new", new_dir, {**CODE, "sha256": "f" * 64}), new_dir)
    assert main(["changelog", str(old_dir), str(new_dir)]) == 0
    out = capsys.readouterr().out
    assert "# Changes from 0.1.0+0123456789ab to 0.1.0+ffffffffffff" in out
    assert "| 7 | 2 -> 4 | 0 | 1 |" in out and "| train | 5 | 7 | +2 |" in out
    assert main(["changelog", str(tmp_path), str(new_dir)]) == 2


def _built(tmp_path, name, code, bump=0):
    """A release folder built by ``code`` (its statistics: per-template train counts raised by ``bump``) and the
    snapshot the manifest's asset keeps of it, with a stale CHANGELOG.md already in the folder."""
    release = make_release(tmp_path / name)
    if bump:
        stats = json.loads((release / "ehrxqa" / "statistics.json").read_text())
        stats["per_template"][0]["train"] += bump
        (release / "ehrxqa" / "statistics.json").write_text(json.dumps(stats))
    (release / changelog.CHANGELOG_FILE).write_text("an earlier build's changelog\n")
    doc = _manifest(tmp_path / name, release, code)
    assert changelog.CHANGELOG_FILE in {f["path"] for f in doc["files"]}
    return changelog.snapshot(release, doc)


def test_release_changelog_has_a_section_per_version_built_newest_first(tmp_path):
    history_dir = tmp_path / "release_history"
    code_b = {**CODE, "sha256": "f" * 64}
    first = changelog.record(history_dir, _built(tmp_path, "a", CODE))
    md = changelog.render_changelog(first)
    assert md.count("\n## ") == 1 and "## 0.1.0+0123456789ab\n\nThe first release version built in this home" in md
    second = changelog.record(history_dir, _built(tmp_path, "b", code_b, bump=2))
    assert [changelog._version(s) for s in second] == ["0.1.0+0123456789ab", "0.1.0+ffffffffffff"]
    md = changelog.render_changelog(second)
    newest = md.index("## Changes from 0.1.0+0123456789ab to 0.1.0+ffffffffffff")
    assert newest < md.index("## 0.1.0+0123456789ab\n") and "### Build" in md and "#### EHRXQA" in md
    assert "| 7 | 2 -> 4 | 0 | 1 |" in md and "| train | 5 | 7 | +2 |" in md
    assert "CHANGELOG.md" not in md  # the snapshots leave the changelog's own entry out
    # the same version built again (other counts) replaces its snapshot; the order stays
    again = changelog.record(history_dir, _built(tmp_path, "b2", code_b, bump=5))
    assert "| 7 | 2 -> 7 | 0 | 1 |" in changelog.render_changelog(again)
    assert json.loads((history_dir / changelog.ORDER_FILE).read_text()) == ["0.1.0+0123456789ab", "0.1.0+ffffffffffff"]
    # an older checkout built again sees the history as it stood at its version
    assert changelog.render_changelog(changelog.record(history_dir, _built(tmp_path, "a2", CODE))) == \
        changelog.render_changelog(first)


def test_a_file_written_after_the_manifest_is_added_to_it_without_hashing_the_others(tmp_path):
    release = make_release(tmp_path)
    doc = _manifest(tmp_path, release)
    doc["files"][0]["sha256"] = "not hashed again"
    (release / "CHANGELOG.md").write_text("# Changelog\n")
    out = manifest.with_file(doc, release, release / "CHANGELOG.md")
    paths = [f["path"] for f in out["files"]]
    assert paths == sorted(paths) and "CHANGELOG.md" in paths and out["files"][paths.index(
        doc["files"][0]["path"])]["sha256"] == "not hashed again"
    assert manifest.verify(release, manifest.with_file(_manifest(tmp_path, release), release,
                                                       release / "CHANGELOG.md")) == []
