"""The Dagster layer end to end on a small synthetic source, on a real (temporary) instance: one full build,
all checks green, quarantine counts equal the planted ones; then, on that same instance and in this order,
change-driven re-runs over the whole graph, each replayed tick by tick with the automation conditions:
a source table edit, a gold label edit, a prompt version edit, a code version bump, a no-change rebuild,
and a failed blocking check that stops everything downstream."""

import dagster as dg
import pytest

from assets.automation import ON_CHANGE, RELEASE_ON_CHANGE
from assets.freshness import out_of_date
from assets.ehrxqa import sampling_run_config
from ehrxqa_pipeline.cli.build import build, materialize
from ehrxqa_pipeline.config import Settings
from ehrxqa_pipeline import definitions
from ehrxqa_pipeline.definitions import defs
from ehrxqa_pipeline.sources.readers import resolve
from tests.build_settings import FEW_PARAPHRASES
from tests.test_definitions import checks_left_out
from tests.textfiles import edit

# EHRXQA sampling at full caps takes minutes; these tests are about the graph, not the dataset size.
SMALL_EHRXQA = sampling_run_config(train_valid_cap=2, test_cap=1, patience=10, workers=1)
K = dg.AssetKey


@dg.asset(key=["downstream", "of_patients"], deps=[K(["ingest", "patients"])], automation_condition=ON_CHANGE,
          code_version="1", owners=["team:ehrxqa"], kinds={"python"},
          description="Grain: nothing; a test asset. Source: ingest.patients.")
def of_patients() -> None:
    return None


TEST_DEFS = dg.Definitions.merge(defs, dg.Definitions(assets=[of_patients]))
GRAPH = TEST_DEFS.resolve_asset_graph()


def names(keys) -> set[str]:
    return {k.to_user_string() for k in keys}


def descendants(key: dg.AssetKey) -> set[str]:
    out, todo = set(), [key]
    while todo:
        for child in GRAPH.get(todo.pop()).child_keys:
            if child not in out:
                out.add(child)
                todo.append(child)
    return names(out)


def children(changed: set[str], done: set[str] = frozenset()) -> set[str]:
    """What the automation conditions must request after ``changed`` got new data versions in a tick that
    materialized ``done``: their children, except those that tick already materialized after them (runs go in
    dependency order), with the assets each is materialized together with (one multi-asset step)."""
    kids = {c for k in changed for c in GRAPH.get(K.from_user_string(k)).child_keys
            if c in GRAPH.materializable_asset_keys and c.to_user_string() not in done}
    return names(x for c in kids for x in GRAPH.get(c).execution_set_asset_keys)


def requested(result, graph=GRAPH) -> set[str]:
    return {k.to_user_string() for k in graph.materializable_asset_keys if result.get_num_requested(k)}


def data_versions(instance) -> dict[str, str | None]:
    out = {}
    for key in GRAPH.materializable_asset_keys:
        event = instance.get_latest_materialization_event(key)
        out[key.to_user_string()] = event.asset_materialization.tags.get("dagster/data_version") if event else None
    return out


# The release assets wait until nothing upstream of them is out of date (assets.automation.UpstreamCurrent).
WAITERS = names(k for k in GRAPH.materializable_asset_keys if GRAPH.get(k).automation_condition == RELEASE_ON_CHANGE)


def cascade(instance, settings, cursor, graph_defs=TEST_DEFS) -> tuple[list[set[str]], set[str], object]:
    """Tick by tick: evaluate the automation conditions, materialize exactly what they request, until nothing
    is due. Returns the requested set of every tick, the assets whose data version changed, the cursor. Each
    tick after the first must request exactly the children of what changed in the previous one, except release
    assets, which wait (then run) until their ancestors are up to date; at the end nothing is out of date."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(definitions, "defs", graph_defs)  # what the assets read of the code location (edited versions)
        return _ticks(instance, cursor, graph_defs)


def _ticks(instance, cursor, graph_defs):
    ticks, changed_all, changed, waiting = [], set(), None, set()
    for _ in range(30):
        result = dg.evaluate_automation_conditions(defs=graph_defs, instance=instance, cursor=cursor)
        cursor, due = result.cursor, requested(result)
        assert checks_left_out(result, graph_defs.resolve_asset_graph()) == set()  # the sensor runs every check
        if changed is not None:
            expected = children(changed, ticks[-1]) | waiting
            assert due <= expected and expected - due <= WAITERS, (ticks, changed, due, expected)
            waiting = expected - due
        if not due:
            assert not waiting and out_of_date(graph_defs, instance) == {}, (waiting, out_of_date(graph_defs, instance))
            return ticks, changed_all, cursor
        ticks.append(due)
        before = data_versions(instance)
        summary = materialize([K.from_user_string(k) for k in due], instance, defs=graph_defs, run_config=SMALL_EHRXQA)
        assert summary.success, summary.failures
        after = data_versions(instance)
        changed = {k for k in after if after[k] != before[k]}
        changed_all |= changed
    raise AssertionError(f"no fixed point after 30 ticks: {ticks}")


@pytest.fixture(scope="module")
def built(small_source, tmp_path_factory):
    import shutil

    tmp = tmp_path_factory.mktemp("pipeline")
    root, manifest = small_source
    shutil.copytree(root, tmp / "source")
    mp = pytest.MonkeyPatch()
    mp.setenv("EHRXQA_HOME", str(tmp / "home"))
    mp.setenv("EHRXQA_SOURCE_ROOT", str(tmp / "source"))
    mp.setenv("EHRXQA_CHECK_IMAGES", "0")  # this source has no JPEGs
    for name, count in FEW_PARAPHRASES.items():
        mp.setenv(name, count)
    (tmp / "dagster").mkdir()
    with dg.instance_for_test(temp_dir=str(tmp / "dagster")) as instance:
        settings = Settings.resolve()
        summary = build(settings, instance=instance, defs=TEST_DEFS, run_config=SMALL_EHRXQA)
        yield settings, instance, tmp / "source", manifest, summary
    mp.undo()


def observe(settings, instance) -> None:
    assert build(settings, select="group:sources", instance=instance, defs=TEST_DEFS).success


def test_full_build_green(built):
    settings, instance, root, manifest, summary = built
    assert summary.success, summary.failures
    assert {k for k in summary.materialized if k.startswith("ingest/")} == {f"ingest/{t}" for t in manifest["rows"]}
    assert summary.checks and all(c[2] for c in summary.checks), [c for c in summary.checks if not c[2]]
    assert summary.materialized["ingest/admissions"]["rejected_rows"] == \
        manifest["planted"]["ehr"]["admissions_dischtime_before_admittime"]
    assert requested(dg.evaluate_automation_conditions(defs=TEST_DEFS, instance=instance)) == set()
    # every table-backed asset reports its row count and column schema
    meta = instance.get_latest_materialization_event(K(["cxr_labels", "gold"])).asset_materialization.metadata
    assert meta["dagster/row_count"].value > 0
    assert {c.name for c in meta["dagster/column_schema"].schema.columns} == {"image_id", "object", "attribute"}


def test_no_change_rebuild_runs_nothing(built):
    settings, instance, *_ = built
    summary = build(settings, instance=instance, defs=TEST_DEFS, changed=True)
    assert summary.success and summary.materialized == {}, summary.materialized


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
    assert release_files(settings.release_dir) == fresh_release(tmp_path_factory)


def release_files(folder) -> dict[str, str]:
    """Path -> SHA-256 of every release file, the manifest included; DuckDB databases (whose bytes vary from
    write to write) by the manifest's content digest."""
    from ehrxqa_pipeline.release.manifest import MANIFEST_NAME, file_entries, sha256_file

    return {**{e["path"]: e["sha256"] for e in file_entries(folder)}, MANIFEST_NAME: sha256_file(folder / MANIFEST_NAME)}


def fresh_release(tmp_path_factory) -> dict[str, str]:
    """The release files of a full build of the current (edited) source, copied to another path, in a new home
    and instance: the release depends on neither path (nor on the history of the instance)."""
    import shutil

    tmp, current = tmp_path_factory.mktemp("fresh"), Settings.resolve()
    shutil.copytree(current.source_dir, tmp / "elsewhere" / "source")
    (tmp / "dagster").mkdir()
    (tmp / "home" / "cache").mkdir(parents=True)  # the sentence-embedding cache memoises a function of the text
    shutil.copy(current.cache_dir / "embeddings.duckdb", tmp / "home" / "cache" / "embeddings.duckdb")
    with pytest.MonkeyPatch.context() as mp, dg.instance_for_test(temp_dir=str(tmp / "dagster")) as instance:
        mp.setenv("EHRXQA_HOME", str(tmp / "home"))
        mp.setenv("EHRXQA_SOURCE_ROOT", str(tmp / "elsewhere" / "source"))
        mp.setattr(definitions, "defs", TEST_DEFS)  # as in the cascade: the manifest lists these assets' versions
        settings = Settings.resolve()
        summary = build(settings, instance=instance, defs=TEST_DEFS, run_config=SMALL_EHRXQA)
        assert summary.success, (summary.failures, summary.stale)
        return release_files(settings.release_dir)


def test_prompt_version_edit_reruns_only_paraphrasing_and_after(built, monkeypatch):
    """PROMPT_VERSION reaches Dagster through the code versions of paraphrase/prompts and /candidates (and the
    prompts' content): editing it is replayed here as those code versions changing."""
    import assets.paraphrase as para

    settings, instance, *_ = built
    baseline = dg.evaluate_automation_conditions(defs=TEST_DEFS, instance=instance)
    old, new = para.PROMPT_VERSION, para.PROMPT_VERSION + "-edited"
    monkeypatch.setattr(para, "PROMPT_VERSION", new)  # the prompts table records the version it was made with
    edited = _with_code_versions(
        lambda key, cv: cv.replace(old, new) if key in (para.PROMPTS_KEY, para.CANDIDATES_KEY) else cv)
    graph = edited.resolve_asset_graph()
    assert graph.get(para.PROMPTS_KEY).code_version.endswith(new)
    ticks, _, _ = cascade(instance, settings, baseline.cursor, edited)
    assert ticks[0] == {"paraphrase/prompts", "paraphrase/candidates"}
    rerun = set().union(*ticks)
    assert rerun <= {"paraphrase/prompts"} | descendants(para.PROMPTS_KEY)
    _EDITED["defs"] = edited


def test_code_version_bump_reruns_the_asset_then_its_downstream(built):
    settings, instance, *_ = built
    base = _EDITED.get("defs", TEST_DEFS)
    baseline = dg.evaluate_automation_conditions(defs=base, instance=instance)
    assert requested(baseline) == set()
    key = K(["mimic_cxr_vqa", "questions"])
    bumped = _with_code_versions(lambda k, cv: cv + "-bumped" if k == key else cv, base)
    ticks, _, _ = cascade(instance, settings, baseline.cursor, bumped)
    assert ticks[0] == {"mimic_cxr_vqa/questions"}
    assert ticks[1] == children({"mimic_cxr_vqa/questions"}, ticks[0])  # its data version holds its code version
    assert set().union(*ticks) <= {"mimic_cxr_vqa/questions"} | descendants(key)
    _EDITED["defs"] = bumped


def test_failed_blocking_check_stops_downstream(built, monkeypatch):
    settings, instance, root, *_ = built
    current = _EDITED.get("defs", TEST_DEFS)
    monkeypatch.setattr(definitions, "defs", current)  # the code versions the previous scenarios left
    first = dg.evaluate_automation_conditions(defs=current, instance=instance)
    assert requested(first) == set()
    before = release_files(settings.release_dir)

    # Break the contract: every patient's gender becomes 'U' -> everything quarantined -> blocking failure.
    def breaker(text):
        lines = text.splitlines()
        return "\n".join([lines[0]] + [",".join([l.split(",")[0], "U", *l.split(",")[2:]]) for l in lines[1:]]) + "\n"
    edit(resolve(root, "patients"), breaker)
    observe(settings, instance)
    second = dg.evaluate_automation_conditions(defs=current, instance=instance, cursor=first.cursor)
    assert requested(second) == {"ingest/patients"}
    broken = build(settings, select="key:ingest/patients", instance=instance, defs=current)
    assert ("ingest/patients", "quarantine", False) in {(c[0], c[1], c[2]) for c in broken.checks}
    third = dg.evaluate_automation_conditions(defs=current, instance=instance, cursor=second.cursor)
    assert "downstream/of_patients" in descendants(K(["ingest", "patients"]))
    assert not requested(third) & descendants(K(["ingest", "patients"])), requested(third)
    # `build --changed` runs nothing more, and says so: rc non-zero, every blocked asset named with the check
    stuck = build(settings, instance=instance, defs=current, changed=True)
    assert not stuck.success and "downstream/of_patients" not in stuck.materialized
    assert "downstream/of_patients" in stuck.stale and set(stuck.stale) <= descendants(K(["ingest", "patients"]))
    assert "blocking check ingest/patients:quarantine failed" in stuck.stale["downstream/of_patients"]
    assert all("upstream out of date" in why or "ingest/patients" in why for why in stuck.stale.values())
    assert release_files(settings.release_dir) == before  # the previous release is untouched
    # a manifest assembled now would describe a mixed release: its check warns, the build fails and names why
    mixed = build(settings, select="key:release/manifest", instance=instance, defs=current)
    check = next(c for c in mixed.checks if c[:2] == ("release/manifest", "consistent"))
    assert not check[2] and not mixed.success and "upstream out of date" in mixed.stale["release/manifest"], check


_EDITED: dict = {}  # the definitions the previous scenario left the instance at (code versions changed)


def _with_code_versions(fn, base: dg.Definitions = TEST_DEFS) -> dg.Definitions:
    """``base`` with each asset's code version replaced by ``fn(key, code_version)``."""
    assets = [a.map_asset_specs(lambda spec: spec.replace_attributes(code_version=fn(spec.key, spec.code_version)))
              if isinstance(a, dg.AssetsDefinition) and a.is_executable and not a.is_observable else a
              for a in base.assets]
    return dg.Definitions(assets=assets, asset_checks=base.asset_checks, schedules=base.schedules,
                          sensors=base.sensors, resources=base.resources, executor=base.executor)
