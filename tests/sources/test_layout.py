"""Where the datasets are found and which release they are: PhysioNet folder names, wget mirrors, the
unpacked ZIP downloads, releases other than the paper's (refused unless named), renamed folders."""

import shutil

import polars as pl
import pytest

from ehrxqa_pipeline.config import Settings
from ehrxqa_pipeline.release import datasheet, manifest
from ehrxqa_pipeline.sources.errors import SourceError
from ehrxqa_pipeline.sources.layout import SourceLayout, parse_versions
from ehrxqa_pipeline.sources.readers import read_table, resolve
from ehrxqa_pipeline.sources.validate import validate_source


def _errors(report) -> list:
    return [p for p in report.problems if p.severity == "error"]


def _zip_style(root):
    """The three datasets as PhysioNet's ZIP downloads and a plain ``wget -r`` leave them."""
    (root / "mimiciv" / "2.2").rename(root / "mimic-iv-2.2")
    (root / "chest-imagenome" / "1.0.0").rename(root / "chest-imagenome-dataset-1.0.0")
    (root / "physionet.org" / "files" / "mimic-cxr-jpg").mkdir(parents=True)
    (root / "mimic-cxr-jpg" / "2.0.0").rename(root / "physionet.org" / "files" / "mimic-cxr-jpg" / "2.0.0")
    for empty in ("mimiciv", "chest-imagenome", "mimic-cxr-jpg"):
        (root / empty).rmdir()


def test_zip_and_wget_folder_names_read_like_the_physionet_layout(source):
    before = validate_source(source.root)
    patients = read_table(source.root, "patients")
    _zip_style(source.root)
    report = validate_source(source.root)
    assert report.ok and report.problems == before.problems
    assert report.stats["rows"] == before.stats["rows"] and report.stats["images_found"] == 4
    assert {k: r["folder"] for k, r in report.stats["releases"].items()} == {
        "mimiciv": "mimic-iv-2.2", "mimic-cxr-jpg": "physionet.org/files/mimic-cxr-jpg/2.0.0",
        "chest-imagenome": "chest-imagenome-dataset-1.0.0"}
    assert read_table(source.root, "patients").equals(patients)
    assert resolve(source.root, "gold_bbox").parent.name == "gold_dataset"
    # what was read is recorded under the PhysioNet names, whatever the folders are called on disk
    files = manifest.source_digests(source.root)["patients"]["files"]
    assert files == ["mimiciv/2.2/hosp/patients.csv.gz"]


def test_a_later_release_is_refused_with_the_setting_that_accepts_it(source):
    (source.root / "mimiciv" / "2.2").rename(source.root / "mimiciv" / "3.1")
    report = validate_source(source.root)
    (err,) = _errors(report)
    assert err.file == "mimiciv/3.1"
    assert err.message == "this is MIMIC-IV 3.1; the EHRXQA paper used 2.2, which is not below the root"
    assert "EHRXQA_SOURCE_VERSIONS=mimiciv=3.1" in err.fix and "--source-version mimiciv=3.1" in err.fix
    with pytest.raises(SourceError, match="this is MIMIC-IV 3.1"):
        resolve(source.root, "patients")

    layout = SourceLayout(source.root, {"mimiciv": "3.1"})
    report = validate_source(layout)
    assert report.ok, report.format()
    (warning,) = [p for p in report.warnings if p.file == "mimiciv/3.1"]
    assert warning.message.startswith("MIMIC-IV 3.1 is read (opted in); the EHRXQA paper used 2.2")
    assert "MIMIC-IV 3.1 in mimiciv/3.1/ (the paper used 2.2)" in report.format()
    assert read_table(layout, "patients").height == len(source.rows["patients"])
    # the manifest and the datasheet state the release read, beside the paper's
    section = manifest.source_section(layout, manifest.source_digests(layout))
    assert section["releases"] == {"mimiciv": "3.1", "mimic-cxr-jpg": "2.0.0", "chest-imagenome": "1.0.0"}
    assert section["paper_releases"]["mimiciv"] == "2.2"
    assert section["data_versions"]["patients"]["files"] == ["mimiciv/3.1/hosp/patients.csv.gz"]
    lines = datasheet.source_lines(section).splitlines()
    assert [x for x in lines if "not the paper's release" in x] == [
        next(x for x in lines if x.startswith("- MIMIC-IV 3.1"))]


def test_a_folder_named_after_the_paper_release_with_later_content_is_refused(source):
    rows = source.rows["patients"] + [{**source.rows["patients"][0], "subject_id": 19999999,
                                       "anchor_year_group": "2020 - 2022"}]
    source.write("patients", rows)
    (err,) = _errors(validate_source(source.root))
    assert err.file == "mimiciv/2.2"
    assert err.message == ("is named MIMIC-IV 2.2 but holds MIMIC-IV 3.0 or later content (patients in "
                           "anchor_year_group '2020 - 2022', which 2.2 does not have)")
    assert "EHRXQA_SOURCE_VERSIONS=mimiciv=3.1" in err.fix


def test_mimic_cxr_jpg_2_1_0_is_recognised_by_its_labelled_test_set(source):
    (source.root / "mimic-cxr-jpg" / "2.0.0" / "mimic-cxr-2.1.0-test-set-labeled.csv").write_text("x\n")
    (err,) = _errors(validate_source(source.root))
    assert err.file == "mimic-cxr-jpg/2.0.0" and "holds MIMIC-CXR-JPG 2.1.0 content" in err.message
    shutil.move(source.root / "mimic-cxr-jpg" / "2.0.0", source.root / "mimic-cxr-jpg" / "2.1.0")
    report = validate_source(SourceLayout(source.root, {"mimic-cxr-jpg": "2.1.0"}))
    assert report.ok and report.stats["images_found"] == 4


def test_a_named_release_that_is_absent_says_what_is_there(source):
    with pytest.raises(SourceError) as info:
        resolve(SourceLayout(source.root, {"mimiciv": "3.1"}), "patients")
    err = info.value
    assert err.file == "mimiciv/3.1" and "found mimiciv/2.2 (MIMIC-IV 2.2)" in err.problem
    assert "drop mimiciv from EHRXQA_SOURCE_VERSIONS" in err.fix


def test_unknown_release_folders_are_named(source):
    (source.root / "mimiciv" / "2.2").rename(source.root / "mimiciv" / "2.0")
    (err,) = _errors(validate_source(source.root))
    assert err.file == "mimiciv/2.2"
    assert err.message.endswith("found unsupported release folder(s) mimiciv/2.0")


def test_version_setting_is_parsed_strictly():
    assert parse_versions("mimiciv=3.1, mimic-cxr-jpg=2.1.0") == {"mimiciv": "3.1", "mimic-cxr-jpg": "2.1.0"}
    assert parse_versions(["mimiciv=3.0"]) == {"mimiciv": "3.0"} and parse_versions(None) == {}
    for bad in ("mimiciv=4.0", "mimic-iv=3.1", "mimiciv", "chest-imagenome=1.1.0"):
        with pytest.raises(ValueError, match="is not one of: mimiciv=2.2|3.0|3.1"):
            parse_versions(bad)
    env = {"EHRXQA_SOURCE_VERSIONS": "mimiciv=3.1"}
    assert Settings.resolve(env=env).source_versions == (("mimiciv", "3.1"),)
    # an explicit value wins over the environment, never widened by it
    explicit = Settings.resolve(env=env, source_versions="mimic-cxr-jpg=2.1.0")
    assert explicit.source_versions == (("mimic-cxr-jpg", "2.1.0"),)
    assert explicit.layout().wanted == {"mimic-cxr-jpg": "2.1.0"}


def test_missing_dataset_blocks_only_its_own_files(source):
    shutil.rmtree(source.root / "chest-imagenome")
    assert isinstance(read_table(source.root, "patients"), pl.DataFrame)
    with pytest.raises(SourceError, match="dataset folder is missing"):
        resolve(source.root, "gold_bbox")


def test_the_build_reads_a_named_release_and_refuses_it_unnamed(source, tmp_path):
    """The setting reaches the assets through the pipeline_config resource: ingest reads MIMIC-IV 3.1 when
    it is named and fails with the layout's message when it is not."""
    import dagster as dg

    from assets.ingest import INGEST_ASSETS, ingest_key
    from resources import PipelineConfig, Warehouse

    (source.root / "mimiciv" / "2.2").rename(source.root / "mimiciv" / "3.1")
    asset = next(a for a in INGEST_ASSETS if ingest_key("patients") in a.keys)

    def run(versions):
        config = PipelineConfig(home=str(tmp_path / "home"), source_root=str(source.root), source_versions=versions)
        return dg.materialize([asset], resources={"pipeline_config": config, "warehouse": Warehouse(config=config)},
                              raise_on_error=False)

    failed = run(None)
    assert not failed.success
    (event,) = [e for e in failed.all_events if e.event_type_value == "STEP_FAILURE"]
    assert "mimiciv/3.1: this is MIMIC-IV 3.1" in event.event_specific_data.error_display_string
    done = run("mimiciv=3.1")
    assert done.success
    (mat,) = done.asset_materializations_for_node(asset.node_def.name)
    assert mat.metadata["source_rows"].value == len(source.rows["patients"])


def test_validate_source_command_takes_the_release_setting(source, capsys):
    from ehrxqa_pipeline.cli import main

    (source.root / "mimiciv" / "2.2").rename(source.root / "mimiciv" / "3.1")
    assert main(["validate-source", str(source.root)]) == 1
    assert "this is MIMIC-IV 3.1" in capsys.readouterr().out
    assert main(["validate-source", str(source.root), "--source-version", "mimiciv=3.1"]) == 0
    assert "MIMIC-IV 3.1 in mimiciv/3.1/ (the paper used 2.2)" in capsys.readouterr().out
    assert main(["validate-source", str(source.root), "--source-version", "mimiciv=9"]) == 2
    assert "is not one of" in capsys.readouterr().err
