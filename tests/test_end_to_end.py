"""A whole build on a generated source WITH phantom JPEGs, on a temporary instance: funnels equal the
planted counts, every check passes, the release files exist, and every released answer is re-derived
independently from the label table. Then one JPEG is damaged and only it leaves the cohort."""

import gc
import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import dagster as dg
import duckdb
import polars as pl
import pytest

from assets.ehrxqa import CONSISTENCY_CHECKS, QUESTION_ASSETS, QUESTION_KEYS, sampling_run_config
from ehrxqa_pipeline.cxr.splits import split_images_sql
from ehrxqa_pipeline.cli.beside import NICENESS
from ehrxqa_pipeline.cli.build import build
from ehrxqa_pipeline.cli.instance import BUILD_TAG, PID_TAG
from ehrxqa_pipeline.config import Settings
from ehrxqa_pipeline.questions.neuralsql import normalise_rows, postprocess_query
from ehrxqa_pipeline.questions.neuralsql.shapes import shape_counts
from ehrxqa_pipeline.questions.mimic_cxr_vqa.templates import TEMPLATES
from ehrxqa_pipeline.release import manifest as release_manifest
from resources import default_resources
from tests.instances import instance_for_test
from tests.pipeline_graph import seed_embedding_cache
from tests.ehrxqa.test_stats import C9_ROW
from tests.build_settings import FEW_PARAPHRASES
from tests.questions import expected_answer

pytestmark = pytest.mark.slow  # whole-graph builds: not in `make test-fast`

# Small EHRXQA caps: the whole catalog is sampled and checked, just fewer questions per template.
EHRXQA_CAPS = dict(train_valid_cap=4, test_cap=2, patience=20, workers=1)
# Two epochs of the reference model (default 6): these tests check that it trains, predicts every partition and
# is scored, not how well; tests/vqa/test_train.py checks what training learns.
RUN_CONFIG = {"ops": {**sampling_run_config(**EHRXQA_CAPS)["ops"],
                      "vqa_scoring__reference_model": {"config": {"epochs": 2}}}}
# A pretrained backbone scored beside the reference model (vqa.backbone): random-init resnet18 weights in a local
# file stand in for pretrained ones; tests/vqa/test_backbone.py checks the rest without Dagster.
BACKBONE = "resnet18"
SLOTS = {"object": ("object_1", "object_2"), "attribute": ("attribute_1", "attribute_2"),
         "category": ("category_1", "category_2"), "viewpos": ("viewpos",), "gender": ("gender",)}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from ehrxqa_pipeline.demo.generate import generate_source

    tmp = tmp_path_factory.mktemp("e2e")
    manifest = generate_source(tmp / "source", seed=11, scale="demo", patients=30, log=lambda _: None)
    mp = pytest.MonkeyPatch()
    mp.setenv("EHRXQA_HOME", str(tmp / "home"))
    mp.setenv("EHRXQA_SOURCE_ROOT", str(tmp / "source"))
    mp.setenv("EHRXQA_VQA_BACKBONE", BACKBONE)
    mp.setenv("EHRXQA_VQA_BACKBONE_WEIGHTS", str(_weights(tmp / "weights" / f"{BACKBONE}.pt")))
    for name, count in FEW_PARAPHRASES.items():
        mp.setenv(name, count)
    (tmp / "dagster").mkdir()
    seed_embedding_cache(tmp / "home", tmp_path_factory)  # the session's sentence embeddings
    with instance_for_test(temp_dir=str(tmp / "dagster")) as instance:
        settings = Settings.resolve()
        # only the JPEGs of the build's download list are there (the list the build writes first, from the
        # metadata and the gold file alone: ehrxqa_pipeline.cxr.downloads; its asset is checked below)
        files = tmp / "source" / "mimic-cxr-jpg" / "2.0.0" / "files"
        needed = set(_download_list(tmp / "source", tmp / "staging")["relpath"])
        extra = [p for p in files.rglob("*.jpg") if p.relative_to(files).as_posix() not in needed]
        assert len(extra) > len(needed) / 2, (len(extra), len(needed))  # laterals, a study's other images
        for p in extra:
            p.unlink()
        summary = build(settings, instance=instance, run_config=RUN_CONFIG)
        yield settings, instance, manifest, summary
    mp.undo()


def _weights(path: Path) -> Path:
    import torch
    import torchvision

    path.parent.mkdir()
    torch.manual_seed(0)
    torch.save(getattr(torchvision.models, BACKBONE)(weights=None).state_dict(), path)
    return path


def _download_list(source, staging):
    from ehrxqa_pipeline.contracts import load_contract
    from ehrxqa_pipeline.cxr import downloads, selection
    from ehrxqa_pipeline.ingest import ingest_table

    con = duckdb.connect()
    for table in ("cxr_metadata", "silver_bbox", "gold_relations"):
        ingest_table(con, source, load_contract(f"ingest/{table}"), staging)
    selection.build_gold_studies(con)
    selection.build_image_rules(con)
    return downloads.build_images(con)


def test_the_download_list_is_what_the_build_read(built):
    settings, _, _, _ = built
    written = pl.read_csv(settings.release_dir / "images" / "build.csv", schema_overrides={"dicom_id": pl.String})
    assert written.equals(_download_list(settings.source_dir, settings.staging_dir))


def _metadata_event(instance, *path):
    return instance.get_latest_materialization_event(dg.AssetKey(list(path)))


def _metadata(instance, *path):
    return _metadata_event(instance, *path).asset_materialization.metadata


def test_build_succeeds_with_every_check(built):
    _, _, _, summary = built
    assert summary.success, summary.failures
    failed = [c for c in summary.checks if not c[2]]
    assert not failed, failed
    assert {"cxr_cohort/silver", "cxr_labels/silver", "splits/silver", "splits/gold", "mimic_cxr_vqa/silver",
            "mimic_cxr_vqa/gold", "release/mimic_cxr_vqa"} <= set(summary.materialized)


def test_funnels_equal_planted_counts(built):
    _, instance, manifest, _ = built
    planted = manifest["planted"]["imagenome"]["funnel"]
    silver = _metadata(instance, "cxr_cohort", "silver")["funnel_json"].value
    assert [n for _, n in silver][:-1] == [n for _, n in planted["silver"]]
    assert silver[-1] == ["sound_jpeg", planted["silver"][-1][1]]  # every phantom JPEG is sound
    assert _metadata(instance, "cxr_cohort", "gold")["funnel_json"].value[-1][1] == planted["gold"][-1][1]


def test_release_manifest_lists_every_file_with_its_hash(built):
    settings, _, _, summary = built
    assert {"release/statistics", "release/plots", "release/datasheet", "release/manifest"} <= set(summary.materialized)
    text = (settings.release_dir / "manifest.json").read_text()
    doc = json.loads(text)
    assert release_manifest.verify(settings.release_dir, doc) == []  # every listed hash matches its file
    paths = [f["path"] for f in doc["files"]]
    assert paths == sorted(paths) and "manifest.json" not in paths
    assert {"datasheet.md", "plots/funnel.png", "statistics/tables.md", "ehrxqa/train.json",
            "mimic-cxr-vqa/test.json", "ehrxqa/databases/gold/mimic_iv_cxr.db"} <= set(paths)
    assert [f["path"] for f in doc["files"] if f["digest"] == "content"] == [
        "ehrxqa/databases/gold/mimic_iv_cxr.duckdb", "ehrxqa/databases/silver/mimic_iv_cxr.duckdb"]
    assert doc["sources"]["synthetic"] and doc["sources"]["generator"]["seed"] == 11
    assert doc["config"]["ehrxqa_sampling"]["train_valid"] == EHRXQA_CAPS["train_valid_cap"]
    para = doc["config"]["paraphraser"]  # no endpoint: every template offline or kept its wording (#22)
    assert para["llm_endpoint"] is False and para["model"] is None
    for d in para["datasets"].values():
        assert d["templates"]["llm"] == 0 and d["templates"]["offline"] > 0 and d["llm_failures"] == {}
    assert "by the offline rule-based paraphraser" in (settings.release_dir / "datasheet.md").read_text()
    assert doc["asset_code_versions"]["release/manifest"] is not None
    for leak in (settings.home, settings.source_dir):
        assert str(leak) not in text and str(leak) not in (settings.release_dir / "datasheet.md").read_text()
    assert {"LICENSE.txt", "ehrxqa/databases/silver/tables.json", "ehrxqa/databases/gold/tables.json"} <= set(paths)
    assert "PhysioNet Credentialed Health Data License 1.5.0" in (settings.release_dir / "LICENSE.txt").read_text()
    assert "SHA256SUMS.txt" not in paths  # it lists the manifest, so the manifest does not list it
    assert {f"predictions/{d}/test/{m}.json" for d in ("ehrxqa", "mimic-cxr-vqa")
            for m in ("reference", f"pretrained_{BACKBONE}", "oracle", "yes", "prior_most", "prior_question")
            } <= set(paths)
    # the pretrained backbone that was scored: its weights' file name (no folder) and SHA-256, and the leakage risk
    weights = Path(os.environ["EHRXQA_VQA_BACKBONE_WEIGHTS"])
    assert doc["config"]["vqa_backbone"] == {
        "module": f"pretrained_{BACKBONE}", "architecture": BACKBONE, "weights_file": weights.name,
        "weights_sha256": hashlib.sha256(weights.read_bytes()).hexdigest(), "leakage_risk": "unknown"}
    assert str(weights.parent) not in text
    # CHANGELOG.md: one build in this home, so one section; the snapshot it was written from is kept outside
    version = doc["release_version"]
    assert "CHANGELOG.md" in paths and f"## {version}\n\nThe first release version built in this home" in (
        settings.release_dir / "CHANGELOG.md").read_text()
    kept = json.loads((settings.release_history_dir / f"{version}.json").read_text())
    assert kept["contents"]["ehrxqa"]["records"] == json.loads(
        (settings.release_dir / "statistics" / "tables.json").read_text())["ehrxqa"]["records"]
    assert "CHANGELOG.md" not in {f["path"] for f in kept["files"]}


def test_hf_export_loads_with_datasets_and_has_the_json_files_records(built, tmp_path, monkeypatch):
    """release/hf of the build: its check passed, and each dataset loads with Hugging Face datasets (offline) with
    the JSON files' record counts; the manifest lists its files."""
    from ehrxqa_pipeline.release import hf
    from tests.release.helpers import offline_datasets

    settings, instance, _, summary = built
    assert ("release/hf", "matches_json", True) in {c[:3] for c in summary.checks}
    datasets = offline_datasets(tmp_path, monkeypatch)
    listed = {f["path"] for f in json.loads((settings.release_dir / "manifest.json").read_text())["files"]}
    for folder in hf.EXPORTS:
        counts = {s: len(json.loads((settings.release_dir / folder / f"{s}.json").read_text())) for s in hf.SPLITS}
        ds = datasets.load_dataset(str(settings.release_dir / hf.OUT_DIR / folder))
        assert {s: ds[s].num_rows for s in ds} == {s: n for s, n in counts.items() if n}  # an empty split: no config
        assert ds["train"].num_rows and ds["test"].num_rows
        assert _metadata(instance, "release", "hf")["rows_per_split"].value[folder] == counts
        assert {f"hf/{folder}/{s}.parquet" for s in hf.SPLITS} | {f"hf/{folder}/README.md"} <= listed


def test_release_readme_and_identity_describe_this_build(built, capsys):
    """release/README.md counts the empty answers of this build's files; the manifest names what it reproduces;
    `ehrxqa changelog` of the release against itself reports no change."""
    from ehrxqa_pipeline.cli import main

    settings, *_ = built
    release = settings.release_dir
    doc = json.loads((release / "manifest.json").read_text())
    assert doc["release_version"] == f"{doc['code']['version']}+{doc['code']['sha256'][:12]}"
    assert {k: v["name"] for k, v in doc["identity"]["reproduces"].items()} == {
        "ehrxqa": "EHRXQA 1.0.0", "mimic-cxr-vqa": "MIMIC-Ext-MIMIC-CXR-VQA 1.0.0"}
    assert "README.md" in {f["path"] for f in doc["files"]}
    text = (release / "README.md").read_text()
    assert doc["release_version"] in text and "docs/deviations.md" in text
    for folder, title in (("mimic-cxr-vqa", "MIMIC-CXR-VQA"), ("ehrxqa", "EHRXQA")):
        for split in ("train", "valid", "test"):
            records = json.loads((release / folder / f"{split}.json").read_text())
            empty = sum(1 for r in records if r["answer"] == [])
            assert f"| {title} | {split} | {len(records):,} | {empty:,} |" in text
    assert main(["changelog", str(release), str(release)]) == 0
    out = capsys.readouterr().out
    assert "0 added, 0 removed, 0 changed, 0 with other counts" in out and "- changed (0): none" in out


def test_release_croissant_validates_and_its_check_passed(built):
    """croissant.json is in the built release and its manifest, mlcroissant validates it offline with no error
    and the blocking check release/croissant:valid passed."""
    from ehrxqa_pipeline.release import croissant

    settings, _, _, summary = built
    assert ("release/croissant", "valid", True) in {c[:3] for c in summary.checks}
    problems = croissant.validate(settings.release_dir)
    assert [p for p in problems if p.startswith("error:")] == [], problems
    doc = json.loads((settings.release_dir / croissant.CROISSANT_FILE).read_text())
    assert {f["contentUrl"] for f in doc["distribution"]} == {rel for rel, _, _ in croissant.DISTRIBUTION}
    listed = {f["path"] for f in json.loads((settings.release_dir / "manifest.json").read_text())["files"]}
    assert croissant.CROISSANT_FILE in listed


def test_sha256sums_checks_the_release_folder_with_sha256sum(built, tmp_path):
    settings, _, _, _ = built
    release = tmp_path / "release"
    shutil.copytree(settings.release_dir, release)  # a copy: the built release stays as it is for the others
    listed = [line.split("  ", 1)[1] for line in (release / "SHA256SUMS.txt").read_text().splitlines()]
    files = sorted(p.relative_to(release).as_posix() for p in release.rglob("*") if p.is_file())
    assert listed == [f for f in files if f != "SHA256SUMS.txt"]  # every file, the manifest too, sorted
    check = subprocess.run(["sha256sum", "-c", "--strict", "SHA256SUMS.txt"], cwd=release, capture_output=True,
                           text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.count(": OK\n") == len(listed)
    planted = release / "ehrxqa" / "databases" / "gold" / "tables.json"
    data = bytearray(planted.read_bytes())
    data[len(data) // 2] ^= 1  # one byte changed
    planted.write_bytes(bytes(data))
    check = subprocess.run(["sha256sum", "-c", "--strict", "SHA256SUMS.txt"], cwd=release, capture_output=True,
                           text=True)
    assert check.returncode == 1
    assert [line for line in check.stdout.splitlines() if not line.endswith(": OK")] == [
        "ehrxqa/databases/gold/tables.json: FAILED"]
    assert release_manifest.verify_sums(release) == ["SHA256SUMS.txt: changed: ehrxqa/databases/gold/tables.json"]


def test_release_answers_rederived_from_label_table(built):
    settings, _, _, _ = built
    con = duckdb.connect(str(settings.warehouse), read_only=True)
    category = dict(con.execute("SELECT DISTINCT attribute, category FROM cxr_labels.pairs").fetchall())
    positives: dict[str, set] = {}
    for table, splits in (("silver", "('train', 'valid')"), ("gold", "('test')")):
        for image, obj, attr in con.execute(
                f"SELECT l.image_id, l.object, l.attribute FROM cxr_labels.{table} l JOIN splits.{table} i "
                f"USING (image_id) WHERE i.split IN {splits}").fetchall():
            positives.setdefault(image, set()).add((obj, attr))
    images = {r[0]: dict(zip(("view_position", "gender", "ctr", "mtr"), r[1:])) for r in con.execute(
        f"SELECT image_id, view_position, gender, ctr, mtr FROM ({split_images_sql()})").fetchall()}
    vocabulary = set(json.loads((settings.release_dir / "mimic-cxr-vqa" / "answer_vocabulary.json").read_text()))
    total = 0
    for split in ("train", "valid", "test"):
        records = json.loads((settings.release_dir / "mimic-cxr-vqa" / f"{split}.json").read_text())
        assert records and all(r["split"] == split for r in records)
        seen = set()
        for r in records:
            args = {SLOTS[kind][int(i)]: v for kind, vals in r["template_arguments"].items()
                    for i, v in vals.items()}
            assert (r["image_id"], r["template"]) not in seen  # each template at most once per image
            seen.add((r["image_id"], r["template"]))
            assert set(r["answer"]) <= vocabulary
            template_key = TEMPLATES[int(r["template_program"].split("_")[1]) - 1].key
            assert r["answer"] == expected_answer(template_key, positives.get(r["image_id"], set()),
                                                  images[r["image_id"]], args, category), r
            total += 1
    assert total > 1000


def test_damaged_jpeg_leaves_only_its_image(built):
    settings, instance, _, _ = built
    con = duckdb.connect(str(settings.warehouse), read_only=True)
    before = con.execute("SELECT count(*) FROM cxr_cohort.silver").fetchone()[0]
    image, path = con.execute("""SELECT s.image_id, i.relpath FROM cxr_cohort.silver s
                                 JOIN cxr_cohort.image_integrity i ON i.dicom_id = s.image_id
                                 ORDER BY s.image_id LIMIT 1""").fetchone()
    con.close()
    jpeg = settings.source_dir / "mimic-cxr-jpg/2.0.0/files" / path
    jpeg.write_bytes(jpeg.read_bytes()[:200])
    assert build(settings, select="group:cxr_cohort", instance=instance).success  # quarantine, not failure
    con = duckdb.connect(str(settings.warehouse), read_only=True)
    assert con.execute("SELECT count(*) FROM cxr_cohort.silver").fetchone()[0] == before - 1
    assert con.execute("SELECT reason FROM cxr_cohort.silver_rejected WHERE image_id = ?",
                       [image]).fetchone() == ("undecodable_jpeg",)


def test_databases_exported_and_neuralsql_oracle_agrees_with_answer_sheet(built):
    import sqlite3

    from ehrxqa_pipeline.questions.neuralsql import NeuralSqlExecutor, OracleModule

    settings, _, _, summary = built
    assert {"ehr_db/silver", "ehr_db/gold"} <= set(summary.materialized)
    db = settings.release_dir / "ehrxqa" / "databases" / "gold" / "mimic_iv_cxr.db"
    sheet = settings.home / "answer_sheets" / "gold" / "tb_cxr_plus.db"
    assert (db.with_suffix(".duckdb")).is_file()
    executor = NeuralSqlExecutor(db, OracleModule(sheet, database=db))
    answers = sqlite3.connect(sheet)
    studies = [r[0] for r in sqlite3.connect(db).execute("SELECT study_id FROM tb_cxr ORDER BY study_id")]
    assert studies
    for study in studies:  # single-study verify questions: NeuralSQL(oracle) == SQL over the answer sheet
        got = executor.execute(
            f'select func_vqa("is the left lung abnormal?", t1.study_id) from '
            f'(select tb_cxr.study_id from tb_cxr where study_id = {study}) as t1').answer
        want = answers.execute(
            "SELECT max(relation) FROM tb_cxr_plus WHERE study_id = ? AND object = 'left lung' AND category IN "
            "('anatomicalfinding', 'disease', 'device', 'tubesandlines')", [study]).fetchone()[0]
        assert list(got) == [want], study
    group = executor.execute(
        'select count(distinct t1.subject_id) from (select tb_cxr.subject_id, tb_cxr.study_id from tb_cxr) as t1 '
        'where func_vqa("is the cardiac silhouette abnormal?", t1.study_id) = true')
    want = answers.execute(
        "SELECT count(DISTINCT subject_id) FROM tb_cxr_plus WHERE object = 'cardiac silhouette' AND relation = 1 "
        "AND category IN ('anatomicalfinding', 'disease', 'device', 'tubesandlines')").fetchone()[0]
    assert list(group.answer) == [want]
    assert group.module_calls < len(studies)  # batched, not one call per study


def test_every_item_parses_from_its_template_shape_as_from_its_own_text(built):
    """The consistency check and the scores parse each NeuralSQL query from the shape its template's items share
    (neuralsql.parser._Skeleton), and the release's shape check names its published shape from it: for every
    item this build sampled, exactly what the query whole gives."""
    from ehrxqa_pipeline.questions.neuralsql import parser, shapes

    settings = built[0]
    with duckdb.connect(str(settings.warehouse), read_only=True) as con:
        queries = [r[0] for r in con.execute(
            "SELECT DISTINCT neural_sql FROM (SELECT neural_sql FROM ehrxqa.silver UNION ALL "
            "SELECT neural_sql FROM ehrxqa.gold) WHERE neural_sql <> 'null' ORDER BY 1").fetchall()]
    hidden = frozenset({"tb_cxr_plus"})
    shaped = [q for q in queries if parser._Skeleton.of(parser.postprocess_query(q))]
    assert len(shaped) > 0.99 * len(queries) > 1000
    for query in queries:
        own = parser._parse_source(parser.postprocess_query(query), None, None, hidden)
        assert parser._parse.__wrapped__(query, None, None, hidden, True) == own, query
        if own.has_vqa:  # the release's shape check likewise works out each template's shape once
            assert shapes.template_shape(query) == shapes.shape(query), query


# -- EHRXQA ---------------------------------------------------------------------------------------------
LEFTOVER = re.compile(r"\$\{|\{(patient_id|study_id\d?|gender|\w+_name)\}|\[(time_filter_\w+|unit_count|age_group)\]")
PUBLISHED_TEMPLATES = Path(__file__).parents[1] / "resources/published/template_idx_to_template_info.json"
EHRXQA_FIELDS = ("db_id", "split", "id", "question", "template", "query", "value", "q_tag", "t_tag", "o_tag",
                 "v_tag", "tag", "para_type", "is_impossible", "answer", "resolved_value")


def test_ehrxqa_release_files_checked_and_counted(built):
    settings, instance, _, summary = built
    assert {"ehrxqa/catalog", "ehrxqa/silver", "ehrxqa/gold", "ehrxqa/statistics", "release/ehrxqa/silver",
            "release/ehrxqa/gold"} <= \
        set(summary.materialized)
    assert {(f"ehrxqa/{which}", "neuralsql_consistency", True) for which in ("silver", "gold")} <= \
        {c[:3] for c in summary.checks}
    assert {(f"release/ehrxqa/{side}", check, True) for side in ("silver", "gold")
            for check in ("resolved_studies", "neuralsql_shapes")} <= {c[:3] for c in summary.checks}
    assert ("release/manifest", "consistent", True) in {c[:3] for c in summary.checks}
    out = settings.release_dir / "ehrxqa"
    catalog = json.loads((out / "template_catalog.json").read_text())
    scope_of = {v["question_template"]: v["scope"] for v in catalog.values()}
    records = {s: json.loads((out / f"{s}.json").read_text()) for s in ("train", "valid", "test")}
    per_template: dict[tuple[str, str], int] = {}
    paraphrased: dict[bool, int] = {}
    for split, recs in records.items():
        assert recs and [r["id"] for r in recs] == list(range(len(recs)))
        for r in recs:
            assert tuple(r) == EHRXQA_FIELDS and r["split"] == split and r["db_id"] == "mimic_iv_cxr"
            assert len(r["t_tag"]) == 5 and isinstance(r["answer"], list)
            assert r["question"] == r["question"].lower() and not LEFTOVER.search(r["question"]), r
            assert r["para_type"] in ("llm", "rule-based", "reviewer", "original")
            paraphrased[r["para_type"] != "original"] = paraphrased.get(r["para_type"] != "original", 0) + 1
            key = (r["q_tag"], "test" if split == "test" else "train+valid")
            per_template[key] = per_template.get(key, 0) + 1
    assert paraphrased[True] and paraphrased[False]  # image templates phrased, table templates as filled
    assert max(n for (_, part), n in per_template.items() if part == "test") <= EHRXQA_CAPS["test_cap"]
    assert max(n for (_, part), n in per_template.items() if part != "test") <= EHRXQA_CAPS["train_valid_cap"]
    # Table C9 in statistics.json == counts of the released files (scope by q_tag, rows by hand)
    c9 = json.loads((out / "statistics.json").read_text())["c9"]
    got = {(r["modality"], r["patient"], s): r[s] for r in c9[:-1] for s in ("train", "valid", "test") if r[s]}
    want: dict[tuple, int] = {}
    for split, recs in records.items():
        for r in recs:
            key = (*C9_ROW[scope_of[r["q_tag"]]], split)
            want[key] = want.get(key, 0) + 1
    assert got == want
    assert "cf. paper Table C9" in (out / "statistics.md").read_text()
    # as published: every q_tag is a question_template of the published list; every query that reaches an image
    # parses as one of the published NeuralSQL shapes, and the image ones use all four
    published = {v["question_template"] for v in json.loads(PUBLISHED_TEMPLATES.read_text()).values()}
    assert {r["q_tag"] for recs in records.values() for r in recs} <= published
    counts, refused = shape_counts(records)
    assert not refused and set(counts) == {"table", "P1", "P2", "P3", "P4"}, (counts, refused[:3])
    meta = {which: _metadata(instance, "ehrxqa", which) for which in ("silver", "gold")}
    assert sum(m["dagster/row_count"].value for m in meta.values()) == sum(len(v) for v in records.values())
    assert {**meta["silver"]["questions_per_split"].value, **meta["gold"]["questions_per_split"].value} == \
        {s: len(v) for s, v in records.items()}


def test_released_table_queries_give_the_released_answers_as_documented(built):
    """README "Running a released query": every released query without func_vqa, post-processed
    (current_time, %Y, %J) and run on its split's SQLite file, gives the stored answer once single-column
    rows are flattened and floats rounded to 6 places, in the stored order."""
    settings, _, _, _ = built
    out = settings.release_dir / "ehrxqa"
    checked = 0
    for split, which in (("train", "silver"), ("valid", "silver"), ("test", "gold")):
        con = sqlite3.connect(f"file:{out / 'databases' / which / 'mimic_iv_cxr.db'}?mode=ro", uri=True)
        for r in json.loads((out / f"{split}.json").read_text()):
            if r["query"] is None or "func_vqa" in r["query"]:
                continue
            got = normalise_rows(con.execute(postprocess_query(r["query"])).fetchall())
            assert got == r["answer"], (split, r["id"], r["query"], got, r["answer"])
            checked += 1
        con.close()
    assert checked > 500


def test_ehrxqa_check_fails_on_a_tampered_answer(built):
    settings, instance, _, _ = built
    gc.collect()  # read-only connections of earlier tests must be gone before a read-write one opens
    con = duckdb.connect(str(settings.warehouse))
    split, id_, answer, question = con.execute(
        "SELECT split, id, answer, question FROM ehrxqa.silver WHERE answer IN ('[0]', '[1]') "
        "ORDER BY split, id LIMIT 1").fetchone()
    flipped = "[1]" if answer == "[0]" else "[0]"
    con.execute("UPDATE ehrxqa.silver SET answer = ? WHERE split = ? AND id = ?", [flipped, split, id_])
    con.close()
    try:
        silver, check = QUESTION_ASSETS[0], CONSISTENCY_CHECKS[0]
        result = dg.materialize([silver, check], instance=instance, resources=default_resources(),
                                selection=dg.AssetSelection.checks_for_assets(QUESTION_KEYS["silver"]),
                                raise_on_error=False)
        (evaluation,) = result.get_asset_check_evaluations()
        assert evaluation.check_name == "neuralsql_consistency" and evaluation.passed is False
        assert evaluation.metadata["mismatches"].value == 1
        assert evaluation.metadata["first_mismatches"].value[0]["question"] == question
        assert next(iter(check.check_specs)).blocking
    finally:
        con = duckdb.connect(str(settings.warehouse))
        con.execute("UPDATE ehrxqa.silver SET answer = ? WHERE split = ? AND id = ?", [answer, split, id_])
        con.close()


def test_vqa_scores_for_every_module(built):
    """The reference model trained on the phantom JPEGs, predicted the test and gold-database images of every
    top folder, and the leaderboard scores each module; the oracle is exact on both datasets."""
    settings, instance, _, summary = built
    assert {"vqa_scoring/reference_model", "vqa_scoring/scores"} <= set(summary.materialized)
    assert sum(1 for k in summary.materialized if k.startswith("vqa_scoring/predictions[")) == 10
    model = _metadata(instance, "vqa_scoring", "reference_model")
    assert model["trained"].value is True and model["training_curves"].value.startswith("![training curves]")
    # trained and predicted in their own processes (vqa.worker): what they reported through Dagster Pipes arrived
    assert model["timings"].value["epochs_run"] == 2 and model["config"].value["epochs"] == 2
    # ... in a run of its own, in a second process, while this one ran the EHRXQA side (ehrxqa_pipeline.cli.beside)
    trained, sampled = (instance.get_run_record_by_id(_metadata_event(instance, *key).run_id)
                        for key in (("vqa_scoring", "reference_model"), ("ehrxqa", "silver")))
    assert trained.dagster_run.run_id != sampled.dagster_run.run_id
    assert trained.dagster_run.tags[BUILD_TAG] == sampled.dagster_run.tags[BUILD_TAG]
    assert trained.dagster_run.tags[PID_TAG] != str(os.getpid()) == sampled.dagster_run.tags[PID_TAG]
    # ... at a lower CPU priority than this process, whose steps are the longer side of that stage
    assert model["timings"].value["niceness"] == min(19, os.nice(0) + NICENESS)
    assert trained.start_time < sampled.end_time and sampled.start_time < trained.end_time
    learned = instance.get_latest_asset_check_evaluation_record(
        dg.AssetCheckKey(dg.AssetKey(["vqa_scoring", "reference_model"]), "learned"))
    check = learned.event.dagster_event.event_specific_data.metadata
    assert learned.status.value == "SUCCEEDED" and check["best_epoch"].value == model["best_epoch"].value
    parts = instance.fetch_materializations(dg.AssetKey(["vqa_scoring", "predictions"]), limit=100).records
    reported = [r.asset_materialization.metadata["timings"].value for r in parts
                if "timings" in r.asset_materialization.metadata]  # partitions with images to predict
    assert reported and all(t["images"] > 0 and t["device"] == "cpu" for t in reported)
    assert all((t["decoder"], t["cpu_share"], t["decode_workers"]) == ("cpu", 1.0, 2) for t in reported)
    assert len({r.run_id for r in parts}) == 1  # the ten partitions in one run: one worker launch (single-run policy)
    scores = json.loads((settings.release_dir / "scores.json").read_text())
    assert {"reference", "oracle", "yes", "prior_most", "prior_question", "prior_question_text"} <= set(scores)
    assert scores["oracle"]["mimic_cxr_vqa/accuracy"] == 1.0 and scores["oracle"]["ehrxqa/accuracy"] == 1.0
    n = scores["oracle"]["mimic_cxr_vqa/n"]
    assert n > 0 and all(scores[m]["mimic_cxr_vqa/n"] == n for m in ("reference", "yes", "prior_question"))
    assert scores["yes"]["mimic_cxr_vqa/accuracy"] < scores["oracle"]["mimic_cxr_vqa/accuracy"]
    meta = _metadata(instance, "vqa_scoring", "scores")
    board = meta["leaderboard"].value
    assert board.startswith("| module |") and "| reference |" in board
    # the pretrained backbone's probe: trained in the same worker task, predicted every partition, scored
    module = f"pretrained_{BACKBONE}"
    assert scores[module]["mimic_cxr_vqa/n"] == n and scores[module]["ehrxqa/n"] == scores["reference"]["ehrxqa/n"]
    weights = Path(os.environ["EHRXQA_VQA_BACKBONE_WEIGHTS"])
    sha = hashlib.sha256(weights.read_bytes()).hexdigest()
    used = meta["pretrained_backbone"].value
    assert (used["module"], used["weights_sha256"], used["leakage_risk"]) == (module, sha, "unknown")
    assert model["pretrained"].value["weights_sha256"] == sha and model["pretrained"].value["curves"]
    assert all(r.asset_materialization.metadata["pretrained"].value["weights_sha256"] == sha for r in parts
               if "timings" in r.asset_materialization.metadata)
    with duckdb.connect(str(settings.warehouse), read_only=True) as con:
        images = con.execute("SELECT count(DISTINCT image_id) FROM vqa_scoring.predicted_images").fetchone()[0]
        assert con.execute("""SELECT count(*) FROM vqa_scoring.predicted_relations
                              FULL JOIN vqa_scoring.pretrained_relations USING (image_id, object, attribute)
                              WHERE predicted_relations.prob IS NULL OR pretrained_relations.prob IS NULL
                              """).fetchone()[0] == 0
        test = con.execute("SELECT count(*) FROM splits.gold WHERE split = 'test'").fetchone()[0]
    assert images >= test > 0


def test_score_command_reproduces_the_scores_asset(built, capsys):
    """`ehrxqa score` on each module's released per-item predictions (release/predictions/<dataset>/test/) gives
    that module's numbers of release/scores.json (4 places, as written there): accuracy, micro F1 and the per
    content type accuracy (MIMIC-CXR-VQA), Acc_EX overall and per modality x patient scope (EHRXQA), item counts;
    a failed query is an abstention in the file (its answer is null), so abstentions + errors agree."""
    from ehrxqa_pipeline.cli import main
    from ehrxqa_pipeline.vqa.leaderboard import scores_json

    settings, *_ = built
    release = settings.release_dir
    board = json.loads((release / "scores.json").read_text())
    files = sorted((release / "predictions").rglob("*.json"))
    assert len(files) == 12, files  # 6 modules (the pretrained backbone's among them) x 2 datasets (no vision)
    for path in files:
        dataset, module = path.parent.parent.name, path.stem
        assert main(["score", str(path), "--dataset", dataset, "--release", str(release), "--json"]) == 0
        got = json.loads(scores_json({module: json.loads(capsys.readouterr().out)["scores"]}))[module]
        prefix = dataset.replace("-", "_") + "/"
        want = {k: v for k, v in board[module].items() if k.startswith(prefix)}
        assert set(got) == set(want) and len(want) >= 4, (dataset, module)
        for k in want:
            if k not in (prefix + "abstentions", prefix + "errors"):
                assert got[k] == want[k], (dataset, module, k, got[k], want[k])
        failed = want.get(prefix + "errors", 0)
        assert got[prefix + "abstentions"] == want[prefix + "abstentions"] + failed, (dataset, module)
    assert board["oracle"]["ehrxqa/accuracy"] == 1.0 and board["yes"]["ehrxqa/accuracy"] < 1.0
