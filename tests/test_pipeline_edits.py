"""Data edits on a built home, on a real (temporary) instance: a MIMIC-IV table edit rebuilt with `ehrxqa build
--changed`, then a Chest ImaGenome gold label edit replayed tick by tick with the automation conditions. Each
re-runs only what reads the edited file; the sensor's runs hold every check of what they materialize; the
release the home ends with equals, file for file, that of a fresh build of the edited source elsewhere."""

import dagster as dg

from ehrxqa_pipeline.cli.build import build
from ehrxqa_pipeline.sources.readers import resolve
from tests.pipeline_graph import (GRAPH, SMALL_EHRXQA, TEST_DEFS, K, built, cascade, descendants,  # noqa: F401
                                  fresh_release, observe, release_files, requested)
from tests.textfiles import edit


def test_source_table_edit_rebuilds_its_downstream(built):
    """`build --changed` after editing d_labitems: its ingestion, the two databases, and what follows them."""
    settings, instance, root, *_ = built
    edit(resolve(root, "d_labitems"), lambda text: text.replace("Glucose", "Glucose (edited)", 1))
    summary = build(settings, instance=instance, defs=TEST_DEFS, changed=True, run_config=SMALL_EHRXQA)
    assert summary.success, summary.failures
    done = {k.split("[")[0] for k in summary.materialized}  # without the partition
    assert {"ingest/d_labitems", "ehr_db/silver", "ehr_db/gold"} <= done
    assert done <= descendants(K(["sources", "d_labitems"])), done - descendants(K(["sources", "d_labitems"]))
    assert build(settings, instance=instance, defs=TEST_DEFS, changed=True).materialized == {}
    # every run of that build carries its id and command line (the UI's Runs page filters by the tag)
    from ehrxqa_pipeline.cli.instance import BUILD_TAG, COMMAND_TAG

    runs = instance.get_runs(filters=dg.RunsFilter(tags={BUILD_TAG: summary.build_id}))
    assert len(runs) >= 4 and all(r.tags.get(COMMAND_TAG) for r in runs)


def test_gold_label_edit_rebuilds_only_gold_dependents(built, tmp_path_factory):
    settings, instance, root, *_ = built
    import duckdb

    baseline = dg.evaluate_automation_conditions(defs=TEST_DEFS, instance=instance)
    assert requested(baseline) == set()
    # A new affirmed, last-sentence relation for one gold image and a possible pair it does not have yet.
    with duckdb.connect(str(settings.warehouse), read_only=True) as con:
        row = con.execute("""
            SELECT r.patient_id, r.study_id, r.image_id, p.object, p.attribute, p.category
            FROM (SELECT DISTINCT patient_id, study_id, image_id FROM ingest.gold_relations) r
            JOIN cxr_labels.gold_images g ON g.image_id = replace(r.image_id, '.dcm', '')
            CROSS JOIN cxr_labels.pairs p
            WHERE NOT EXISTS (SELECT 1 FROM cxr_labels.gold l WHERE l.image_id = g.image_id
                              AND l.object = p.object AND l.attribute = p.attribute)
            ORDER BY r.image_id, p.object, p.attribute LIMIT 1""").fetchone()
    patient, study, image, obj, attr, category = row
    line = "\t".join(map(str, (patient, study, image, f"{image[:-4]}|99", "99.0", obj, 1, attr, category,
                               f"{study}|{obj}|1|{attr}")))
    edit(resolve(root, "gold_relations"), lambda text: text.rstrip("\n") + "\n" + line + "\n")
    observe(settings, instance)
    ticks, changed, _ = cascade(instance, settings, baseline.cursor)
    assert ticks[0] == {"ingest/gold_relations"}
    rerun = set().union(*ticks)
    gold = descendants(K(["sources", "gold_relations"]))
    assert rerun <= gold, rerun - gold
    assert {"cxr_labels/gold", "mimic_cxr_vqa/questions", "release/mimic_cxr_vqa"} <= changed
    # the silver labels never re-ran: the cascade stopped where a data version did not change (the cohort
    # table, re-materialized with the gold one by the same step, kept its content)
    assert "cxr_labels/silver" in gold and "cxr_labels/silver" not in rerun
    assert not changed & {"cxr_cohort/image_rules", "cxr_cohort/silver"}
    # every check of what re-ran was evaluated on its latest materialization and passed, and the release the
    # cascade left is byte for byte the one a fresh build makes from the edited source
    latest = {c: instance.get_latest_asset_check_evaluation_record(c) for c in GRAPH.get_check_keys_for_assets(
        {K.from_user_string(k) for k in rerun})}
    assert all(r is not None and r.status.value == "SUCCEEDED" for r in latest.values()), \
        {str(c): r and r.status for c, r in latest.items() if r is None or r.status.value != "SUCCEEDED"}
    assert release_files(settings.release_dir, read_from_zip=True) == fresh_release(tmp_path_factory)
