"""The graph-level test harness of tests/test_pipeline.py (and the graph of tests/test_definitions.py): the code
location plus one test asset, a full build of the small synthetic source on a temporary home and instance, and
the tick-by-tick replay of the automation conditions."""

import dagster as dg
import pytest

from assets.automation import ON_CHANGE, RELEASE_ON_CHANGE
from assets import freshness
from assets.freshness import out_of_date
from assets.ehrxqa import sampling_run_config
from ehrxqa_pipeline.cli.build import build, evaluation_scope, materialize, requested_checks
from ehrxqa_pipeline.cli.dagster_private import evaluate_automation
from ehrxqa_pipeline.config import ENVIRONMENT, Settings
from ehrxqa_pipeline import definitions
from ehrxqa_pipeline.definitions import defs
from tests.instances import instance_for_test
from tests.build_settings import FEW_PARAPHRASES

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


def with_statement_log(definitions: dg.Definitions, path) -> dg.Definitions:
    """``definitions`` whose warehouse records every statement of every step to ``path``
    (``resources.Warehouse.statement_log``)."""
    from resources import Warehouse

    warehouse = definitions.resources["warehouse"]
    recording = Warehouse(config=warehouse.config, memory_limit=warehouse.memory_limit, threads=warehouse.threads,
                          statement_log=str(path))
    return dg.Definitions(assets=definitions.assets, asset_checks=definitions.asset_checks, jobs=definitions.jobs,
                          schedules=definitions.schedules, sensors=definitions.sensors, executor=definitions.executor,
                          resources={**definitions.resources, "warehouse": recording})


def declared_reads(definitions: dg.Definitions) -> dict[str, set[str]]:
    """What each step may read (``ehrxqa_pipeline.lineage.undeclared_reads``): per asset key, itself and its
    deps; per check key, its asset and additional deps (user strings)."""
    graph = definitions.resolve_asset_graph()
    out = {k.to_user_string(): {k.to_user_string(), *names(graph.get(k).parent_keys)}
           for k in graph.materializable_asset_keys}
    return out | {c.to_user_string(): names(graph.get(c).parent_entity_keys) for c in graph.asset_check_keys}


def warehouse_keys(definitions: dg.Definitions) -> set[str]:
    """The asset and check keys whose steps take the warehouse resource."""
    return {k for d in definitions.resolve_asset_graph().assets_defs if "warehouse" in d.required_resource_keys
            for k in (*names(d.keys), *names(d.check_keys))}


def checks_left_out(result, graph) -> set[str]:
    """Checks of the assets that the automation sensor's runs for ``result`` (an evaluation) materialize but do
    not evaluate: the run requests are built by the function the daemon calls."""
    from dagster._core.definitions.automation_tick_evaluation_context import build_run_requests

    out = set()
    for request in build_run_requests(result._requested_subsets, graph, None, False):
        if request.asset_check_keys is not None:  # None: every check of the run's assets
            wanted = graph.get_check_keys_for_assets(set(request.asset_selection))
            out |= {c.to_user_string() for c in wanted - set(request.asset_check_keys)}
    return out


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


def requests(result, graph=GRAPH) -> set[tuple[str, frozenset]]:
    """What an evaluation requests: each asset with its partitions, and each check."""
    return {(k.to_user_string(), frozenset(result.get_requested_partitions(k)))
            for k in graph.materializable_asset_keys if result.get_num_requested(k)} | {
        (c.to_user_string(), frozenset()) for c in requested_checks(result, ())}


def data_versions(instance) -> dict[str, str | None]:
    return freshness.data_versions(GRAPH, instance, GRAPH.materializable_asset_keys)


# The release assets wait until nothing upstream of them is out of date (assets.automation.UpstreamCurrent).
WAITERS = names(k for k in GRAPH.materializable_asset_keys if GRAPH.get(k).automation_condition == RELEASE_ON_CHANGE)


def cascade(instance, settings, cursor, graph_defs=TEST_DEFS, *, code_location: bool = False
            ) -> tuple[list[set[str]], set[str], object]:
    """Tick by tick: evaluate the automation conditions, materialize exactly what they request, until nothing
    is due. Returns the requested set of every tick, the assets whose data version changed, the cursor. Each
    tick after the first must request exactly the children of what changed in the previous one, except release
    assets, which wait (then run) until their ancestors are up to date; at the end nothing is out of date.
    ``code_location``: the assets read the code location's own definitions (what the manifest lists, as
    `ehrxqa build` writes it), not ``graph_defs`` (the code edits replayed: edited code versions)."""
    if code_location:
        return _ticks(instance, cursor, graph_defs)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(definitions, "defs", graph_defs)  # what the assets read of the code location (edited versions)
        return _ticks(instance, cursor, graph_defs)


def _ticks(instance, cursor, graph_defs):
    # each tick evaluated as `ehrxqa build --changed` evaluates a round (the cursor not written and read back in
    # between: tests/test_cli.py compares that evaluation with dg.evaluate_automation_conditions)
    ticks, changed_all, changed, waiting, after, scope = [], set(), None, set(), None, None
    graph = graph_defs.resolve_asset_graph()
    for _ in range(30):
        result = evaluate_automation(graph_defs, instance, cursor, only=scope)
        if scope is not None:  # what the last tick touched, alone, requests what evaluating everything requests
            assert requests(result, graph) == requests(evaluate_automation(graph_defs, instance, cursor), graph)
        cursor, due = result.cursor, requested(result)
        assert checks_left_out(result, graph) == set()  # the sensor runs every check
        if changed is not None:
            expected = children(changed, ticks[-1]) | waiting
            assert due <= expected and expected - due <= WAITERS, (ticks, changed, due, expected)
            waiting = expected - due
        if not due:
            assert not waiting and out_of_date(graph_defs, instance) == {}, (waiting, out_of_date(graph_defs, instance))
            return ticks, changed_all, cursor
        ticks.append(due)
        before = after if after is not None else data_versions(instance)  # nothing ran since the last tick's
        keys = [K.from_user_string(k) for k in due]  # and the checks of other assets it requested, as the sensor
        summary = materialize(keys, instance, defs=graph_defs, run_config=SMALL_EHRXQA,
                              checks=requested_checks(result, set(keys)))
        assert summary.success, summary.failures
        scope = evaluation_scope(graph, set(keys) | {K.from_user_string(k.split("[")[0]) for k in summary.materialized}
                                 | {K.from_user_string(c[0]) for c in summary.checks})
        after = data_versions(instance)
        changed = {k for k in after if after[k] != before[k]}
        changed_all |= changed
    raise AssertionError(f"no fixed point after 30 ticks: {ticks}")


@pytest.fixture(scope="module")
def built(small_source, tmp_path_factory):
    """A full build of a copy of the small source, on the instance `ehrxqa` keeps under EHRXQA_HOME/dagster
    (so the command, run as a user runs it, can build on the same home: tests/test_pipeline.py kills one), with
    every statement its steps run on the warehouse recorded (``statement_log``). Each test module gets its own
    copy of one build made once per test session (``pristine_build``), on a home and instance of its own."""
    import shutil

    from ehrxqa_pipeline.cli import prepare_instance

    snapshot, summary = pristine_build(small_source, tmp_path_factory)
    tmp = tmp_path_factory.mktemp("pipeline")
    for name in ("home", "source", "statements.jsonl"):  # 120 MB on tmpfs: 0.1 s
        (shutil.copytree if (snapshot / name).is_dir() else shutil.copy2)(snapshot / name, tmp / name)
    mp = _pipeline_env(tmp)
    settings = Settings.resolve()
    prepare_instance(settings)
    with dg.DagsterInstance.get() as instance:
        yield settings, instance, tmp / "source", small_source[1], summary
    mp.undo()


def _pipeline_env(tmp) -> pytest.MonkeyPatch:
    """The environment of a pipeline home under ``tmp`` (undo it afterwards: prepare_instance exports some)."""
    mp = pytest.MonkeyPatch()
    for name, value in (("EHRXQA_HOME", tmp / "home"), ("EHRXQA_SOURCE_ROOT", tmp / "source"),
                        ("EHRXQA_CHECK_IMAGES", "0"),  # this source has no JPEGs
                        ("DAGSTER_HOME", tmp / "home" / "dagster"), ("EHRXQA_SEED", "0"), *FEW_PARAPHRASES.items()):
        mp.setenv(name, str(value))
    return mp


def pristine_build(small_source, tmp_path_factory):
    """The full build of the small source that ``built`` copies: made once per test session by whichever
    process asks first (under pytest-xdist the workers share it: the others wait on a file lock, then copy it),
    in a folder of its own (home/, source/, statements.jsonl). Returns that folder and the build's summary.
    So tests/test_pipeline.py and tests/test_pipeline_code.py, whose scenarios each start from this build, run
    on two workers at once (the suite's critical path was the two in one file) without building twice. A build
    that raised is left unpublished and made again by the next process that asks."""
    import pickle
    import shutil

    from ehrxqa_pipeline.cli import prepare_instance

    folder = session_folder(tmp_path_factory) / "pipeline-build"
    done = folder / "summary.pickle"  # written last: the build is complete
    with _file_lock(folder.with_name(folder.name + ".lock")):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            shutil.copytree(small_source[0], folder / "source")
            seed_embedding_cache(folder / "home", tmp_path_factory)
            mp = _pipeline_env(folder)
            try:
                settings = Settings.resolve()
                prepare_instance(settings)
                with dg.DagsterInstance.get() as instance:
                    summary = build(settings, instance=instance,
                                    defs=with_statement_log(TEST_DEFS, statement_log(settings)),
                                    run_config=SMALL_EHRXQA)
            finally:
                mp.undo()
            done.write_bytes(pickle.dumps(summary))
        return folder, pickle.loads(done.read_bytes())


def seed_embedding_cache(home, tmp_path_factory) -> None:
    """``home`` (not built yet) starts with the session's sentence-embedding cache (``embedding_cache``)."""
    import shutil

    target = Settings(home).embedding_cache
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(embedding_cache(tmp_path_factory), target)


def embedding_cache(tmp_path_factory):
    """A sentence-embedding cache file (``paraphrase.embed.Embedder``) holding what paraphrase validation embeds
    in every whole-graph build of the suite (the templates and their offline candidates at ``FEW_PARAPHRASES``,
    seed 0), for their homes to start with: without it the pristine build and the end-to-end build, which start
    together on the two xdist workers, each spent about 9 s embedding the same 950 texts on one core. Computed
    once per test session by whichever process asks first, with every core (the other waits on the lock), by
    the validation the asset runs (``paraphrase.validate.validate``). The cache memoises a function of the text,
    so a build reads the vectors it would compute; the computation runs in tests/paraphrase/test_embed.py and
    test_assets.py, and in `make build`."""
    from ehrxqa_pipeline.paraphrase.embed import Embedder, MiniLmEncoder
    from ehrxqa_pipeline.paraphrase.generate import rule_based
    from ehrxqa_pipeline.paraphrase.templates import all_templates
    from ehrxqa_pipeline.paraphrase.validate import validate
    from ehrxqa_pipeline.threads import cores

    path = session_folder(tmp_path_factory) / "embeddings.duckdb"
    with _file_lock(path.with_name(path.name + ".lock")):
        if not path.exists():
            templates = all_templates()
            counts = {dataset: int(FEW_PARAPHRASES[ENVIRONMENT[f"count_{dataset}"]])
                      for dataset in ("mimic_cxr_vqa", "ehrxqa")}  # as resources.LLMResource.counts reads them
            candidates, _ = rule_based(templates, counts, seed=0)
            partial = path.with_name("embeddings.partial.duckdb")
            partial.unlink(missing_ok=True)
            validate(templates, candidates, Embedder(cache_path=partial, encoder=MiniLmEncoder(threads=cores())))
            partial.rename(path)  # complete or absent
    return path


def session_folder(tmp_path_factory):
    """A folder shared by every process of this test session: the xdist workers' base temporary folders are
    siblings in it (`--basetemp` or pytest's own); without xdist, the base temporary folder itself."""
    import os

    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


class _file_lock:
    """An exclusive lock on ``path`` (flock: released when the holder exits, even killed)."""

    def __init__(self, path):
        self.path = path

    def __enter__(self):
        import fcntl

        self.file = open(self.path, "a")
        fcntl.flock(self.file, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        import fcntl

        fcntl.flock(self.file, fcntl.LOCK_UN)
        self.file.close()


def statement_log(settings):
    """Where the full build of ``built`` records its statements: beside its home."""
    return settings.home.parent / "statements.jsonl"


def observe(settings, instance) -> None:
    assert build(settings, select="group:sources", instance=instance, defs=TEST_DEFS).success


def release_files(folder, *, read_from_zip: bool = False) -> dict[str, str]:
    """Path -> SHA-256 of every release file, the manifest and SHA256SUMS.txt included; DuckDB databases (whose
    bytes vary from write to write) by the manifest's content digest, and SHA256SUMS.txt without their lines.
    ``read_from_zip``: the manifest is hashed without the source entries of the two silver scene tables (and the
    digest over all sources, in the datasheet too), which name the file read (scene_tabular/*.txt or
    scene_graph.zip) and its content hash, so builds from either compare; SHA256SUMS.txt then also without the
    lines of those two files (compared as said)."""
    import hashlib
    import json

    from ehrxqa_pipeline.hashing import sha256_file
    from ehrxqa_pipeline.release.manifest import MANIFEST_NAME, SUMS_NAME, file_entries
    from ehrxqa_pipeline.sources.scene_graph import TABULAR

    entries = file_entries(folder)
    files = {e["path"]: e["sha256"] for e in entries}
    varying = {e["path"] for e in entries if e["digest"] == "content"}
    if read_from_zip:
        varying |= {MANIFEST_NAME, "datasheet.md"}
    sums = [line for line in (folder / SUMS_NAME).read_text().splitlines() if line.split("  ", 1)[1] not in varying]
    files[SUMS_NAME] = hashlib.sha256("\n".join(sums).encode()).hexdigest()
    if not read_from_zip:
        return {**files, MANIFEST_NAME: sha256_file(folder / MANIFEST_NAME)}
    doc = json.loads((folder / MANIFEST_NAME).read_text())
    for name in TABULAR:
        doc["sources"]["data_versions"].pop(name)
    digest = doc["sources"].pop("digest")  # also stated in the datasheet, compared without it
    doc["files"] = [f for f in doc["files"] if f["path"] != "datasheet.md"]
    sheet = (folder / "datasheet.md").read_text().replace(digest, "<source digest>")
    return {**files, "datasheet.md": hashlib.sha256(sheet.encode()).hexdigest(),
            MANIFEST_NAME: hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()}


def fresh_release(tmp_path_factory, *, silver_as_zip: bool = True) -> dict[str, str]:
    """The release files of a full build of the current (edited) source, copied to another path in the folder
    layout of PhysioNet's downloads (ZIP folders mimic-iv-2.2/ and chest-imagenome-dataset-1.0.0/, a wget mirror
    physionet.org/files/mimic-cxr-jpg/2.0.0/), the silver scene tables as scene_graph.zip only, in a new home
    and instance: the release depends on neither the path nor the layout nor the form of the silver tables (nor
    on the history of the instance); compare it with ``release_files(..., read_from_zip=True)``.
    ``silver_as_zip=False`` keeps the scene tables as they are (a test that edited one: the zip is not edited)."""
    import shutil

    tmp, current = tmp_path_factory.mktemp("fresh"), Settings.resolve()
    shutil.copytree(current.source_dir, tmp / "elsewhere" / "source")
    root = tmp / "elsewhere" / "source"
    for rel, to in (("mimiciv/2.2", "mimic-iv-2.2"), ("chest-imagenome/1.0.0", "chest-imagenome-dataset-1.0.0"),
                    ("mimic-cxr-jpg/2.0.0", "physionet.org/files/mimic-cxr-jpg/2.0.0")):
        (root / to).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).rename(root / to)
        (root / rel).parent.rmdir()
    # and with Chest ImaGenome's silver tables as PhysioNet ships them: scene_graph.zip only
    if silver_as_zip:
        shutil.rmtree(root / "chest-imagenome-dataset-1.0.0" / "silver_dataset" / "scene_tabular")
    (tmp / "dagster").mkdir()
    seed_embedding_cache(tmp / "home", tmp_path_factory)
    with pytest.MonkeyPatch.context() as mp, instance_for_test(temp_dir=str(tmp / "dagster")) as instance:
        mp.setenv("EHRXQA_HOME", str(tmp / "home"))
        mp.setenv("EHRXQA_SOURCE_ROOT", str(tmp / "elsewhere" / "source"))
        settings = Settings.resolve()
        summary = build(settings, instance=instance, defs=TEST_DEFS, run_config=SMALL_EHRXQA)
        assert summary.success, (summary.failures, summary.stale)
        return release_files(settings.release_dir, read_from_zip=True)


def with_code_versions(fn, base: dg.Definitions = TEST_DEFS) -> dg.Definitions:
    """``base`` with each asset's code version replaced by ``fn(key, code_version)``."""
    assets = [a.map_asset_specs(lambda spec: spec.replace_attributes(code_version=fn(spec.key, spec.code_version)))
              if isinstance(a, dg.AssetsDefinition) and a.is_executable and not a.is_observable else a
              for a in base.assets]
    return dg.Definitions(assets=assets, asset_checks=base.asset_checks, schedules=base.schedules,
                          sensors=base.sensors, resources=base.resources, executor=base.executor)
