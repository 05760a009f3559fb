"""The one Definitions object of the code location: it only assembles."""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence

import dagster as dg

import assets
from assets.automation import DEVICE_TAG, DUCKDB_TAGS, GPU_POOL, K8S_STEP_RESOURCES, automation_sensor, weekly_rebuild
from assets.contract_checks import with_contract_metadata
from assets.release import manifest_asset
from ehrxqa_pipeline.config import EXECUTOR_ENV, Environment, SettingError
from resources import default_resources

# Within one run, steps that write the DuckDB warehouse go one at a time (DuckDB has a single writer), and so
# do steps that use the GPU.
TAG_LIMITS = [{"key": k, "value": v, "limit": 1} for k, v in (*DUCKDB_TAGS.items(), (DEVICE_TAG, GPU_POOL))]
# Each step of a run the UI launches runs in a process of its own. Forked from a server process that imported
# this code location and Great Expectations once (``forkserver``; its preload named here: a run process rebuilds
# the job from its origin, for which Dagster would preload only its executor module), a step starts in a
# fraction of a second; spawned (Dagster's default), every step imported Dagster and the project again, and
# every contract check Great Expectations: 2-3 s of CPU each (`make bench` stage ui-run, the demo's ingest group:
# 312.8 s spawned, 39.8 s forked). Where the platform has no forkserver (Windows): Dagster's default.
PRELOAD = ("ehrxqa_pipeline.gx",  # every contract check
           "ehrxqa_pipeline.cli.dagster_private",  # the instance's storage: SQLAlchemy, Alembic
           "dagster._daemon",  # read by the instance a step builds
           "ehrxqa_pipeline.forkserver_gc")  # last: the collector's settings, once everything above is loaded
START_METHOD = ({"start_method": {"forkserver": {"preload_modules": [__name__, *PRELOAD]}}}
                if "forkserver" in multiprocessing.get_all_start_methods() else {})
EXECUTOR = dg.multiprocess_executor.configured({"max_concurrent": 2, "tag_concurrency_limits": TAG_LIMITS,
                                                **START_METHOD})

# EHRXQA_EXECUTOR=k8s (read when the code location loads): one Kubernetes pod per step (dagster-k8s). Image,
# namespace, env (EHRXQA_HOME) and the shared volume come from the run launcher and the user deployment
# (deploy/values.yaml); here: the default step resources, and the same per-run limits. GPU steps add their
# request through op tags (assets.automation.GPU_TAGS).
K8S_EXECUTOR_CONFIG = {
    "max_concurrent": 8,
    "tag_concurrency_limits": TAG_LIMITS,
    "step_k8s_config": {"container_config": {"resources": K8S_STEP_RESOURCES}},
}


def k8s_executor_config(gpu_ops: Sequence[str] = ()) -> dict:
    """``K8S_EXECUTOR_CONFIG``; with ``gpu_ops``, the ops whose torch work runs in a pod of its own
    (EHRXQA_VQA_LAUNCH=k8s), whose step pods then ask for a step's resources without the GPU and toleration of
    their op tags: the worker pod holds the GPU (a SHALLOW merge replaces the tags' resources and tolerations)."""
    if not gpu_ops:
        return K8S_EXECUTOR_CONFIG
    no_gpu = {"container_config": {"resources": K8S_STEP_RESOURCES}, "pod_spec_config": {"tolerations": []},
              "merge_behavior": "SHALLOW"}
    return {**K8S_EXECUTOR_CONFIG, "per_step_k8s_config": dict.fromkeys(gpu_ops, no_gpu)}


def ops_on_gpu(asset_defs) -> list[str]:
    """The ops whose tags ask for a GPU (``assets.automation.GPU_TAGS``)."""
    return sorted(a.op.name for a in asset_defs
                  if isinstance(a, dg.AssetsDefinition) and a.is_executable and a.op.tags.get(DEVICE_TAG) == GPU_POOL)


def choose_executor(kind: str | None = None, gpu_ops: Sequence[str] = ()) -> dg.ExecutorDefinition:
    """``multiprocess`` (default) or ``k8s`` (``kind``, else EHRXQA_EXECUTOR); on k8s, ``gpu_ops`` without a
    GPU of their own when their worker runs in its own pod (EHRXQA_VQA_LAUNCH=k8s)."""
    env = Environment.read()
    kind = kind or env.executor or "multiprocess"
    if kind == "k8s":
        from dagster_k8s import k8s_job_executor

        config = k8s_executor_config(gpu_ops if env.vqa_worker_pod_image() else ())
        return k8s_job_executor.configured(config, name="k8s")
    if kind != "multiprocess":
        raise SettingError(f"{EXECUTOR_ENV}={kind!r} is not valid: use 'multiprocess' (default) or 'k8s'")
    return EXECUTOR


# Named jobs for what users rebuild by hand (the UI's Jobs page, `dagster job launch -j NAME`); none holds a
# partitioned asset, so each runs as one run. Everything at once: "Materialize all" in the UI, `ehrxqa build`
# or the weekly schedule (they split the partitioned image steps per top folder).
_REL = dg.AssetSelection.keys
EHRXQA_RELEASE = ("release/ehrxqa/silver", "release/ehrxqa/gold")
JOBS = [
    dg.define_asset_job("mimic_cxr_vqa", dg.AssetSelection.groups("mimic_cxr_vqa") | _REL("release/mimic_cxr_vqa"),
                        description="MIMIC-CXR-VQA questions, statistics and release files from the current splits."),
    dg.define_asset_job("ehrxqa", dg.AssetSelection.groups("ehr_db", "ehrxqa") | _REL(*EHRXQA_RELEASE),
                        description="EHRXQA databases, sampled items with their checks, and release files."),
    dg.define_asset_job("paraphrase_review", dg.AssetSelection.groups("paraphrase")
                        | _REL("release/mimic_cxr_vqa", *EHRXQA_RELEASE),
                        description="After editing paraphrases/reviewed.csv: review state, pools and the released "
                                    "questions drawn from them."),
    dg.define_asset_job("release", dg.AssetSelection.groups("release"),
                        description="Statistics, plots, datasheet, Hugging Face parquet export, Croissant "
                                    "description, manifest and changelog of the release folder."),
]

# every asset of the assets package (module attributes, or lists of them for the generated ones), with their
# data contracts' metadata; the manifest, which reads these Definitions when it runs, is made here
ASSETS = [*with_contract_metadata(dg.load_assets_from_package_module(assets)), manifest_asset(lambda: defs)]

defs = dg.Definitions(
    assets=ASSETS,
    asset_checks=dg.load_asset_checks_from_package_module(assets),
    jobs=JOBS,
    schedules=[weekly_rebuild],
    sensors=[automation_sensor],
    resources=default_resources(),
    executor=choose_executor(gpu_ops=ops_on_gpu(ASSETS)),
)
