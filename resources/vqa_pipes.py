"""How the VQA worker (``python -m ehrxqa_pipeline.cli.vqa_worker``) is launched through Dagster Pipes: a child
process of the step (``dg.PipesSubprocessClient``, the default), or with EHRXQA_VQA_LAUNCH=k8s a pod of its own
from EHRXQA_VQA_WORKER_IMAGE (``dagster_k8s.PipesK8sClient``) that holds the GPU and mounts the shared volumes
at the step's paths, so the step pod needs neither a GPU nor torch (deploy/README.md).
"""

import contextlib
import sys
import tempfile
from pathlib import Path

import dagster as dg

from assets.automation import GPU_K8S_CONFIG, K8S_STEP_RESOURCES
from ehrxqa_pipeline.config import Environment, Settings
from resources.config import PipelineConfig

WORKER_MODULE = "ehrxqa_pipeline.cli.vqa_worker"
# deploy/pvc.yaml's claims, mounted at EHRXQA_HOME and EHRXQA_SOURCE_ROOT (tests/test_vqa_pipes_k8s.py keeps
# them in step with deploy/)
HOME_CLAIM = "ehrxqa-home"
SOURCE_CLAIM = "physionet-sources"


class SharedFileContextInjector(dg.PipesContextInjector):
    """The Pipes context as a file under EHRXQA_HOME/cache/vqa, which the worker pod mounts at the same path.
    PipesK8sClient's default, an environment variable, is capped at 128 KiB by Linux: a prediction task's
    image ids pass that from about 4,400 ids."""

    def __init__(self, config: PipelineConfig):
        self._config = config

    @contextlib.contextmanager
    def inject_context(self, context_data):
        root = self._config.settings().cache_dir / "vqa"
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="pipes-", dir=root) as tmp:
            with dg.PipesFileContextInjector(str(Path(tmp) / "context.json")).inject_context(context_data) as params:
                yield params

    def no_messages_debug_text(self) -> str:
        return "Attempted to inject context via a file under EHRXQA_HOME/cache/vqa on the shared volume."


def vqa_pipes_client(config: PipelineConfig, env: Environment) -> dg.PipesClient:
    """The client that launches the worker, as EHRXQA_VQA_LAUNCH chooses (dagster_k8s, slow to import, only
    then)."""
    if env.vqa_worker_pod_image() is None:
        return dg.PipesSubprocessClient()
    from dagster_k8s import PipesK8sClient

    return PipesK8sClient(context_injector=SharedFileContextInjector(config))


def worker_launch(pipes: dg.PipesClient, settings: Settings) -> dict:
    """What ``pipes.run`` takes besides the context and the task: the worker's command and, for a pod, its image
    and spec: one GPU with the toleration of GPU steps (``GPU_K8S_CONFIG``), a step's CPU and memory, and
    EHRXQA_HOME (and EHRXQA_SOURCE_ROOT, read-only) mounted at the step's paths, which the task names. The worker
    needs no environment of its own: every setting comes in its task."""
    if isinstance(pipes, dg.PipesSubprocessClient):
        return {"command": [sys.executable, "-m", WORKER_MODULE]}
    mounts = [(HOME_CLAIM, settings.home, False)]
    if settings.source_root is not None:
        mounts.append((SOURCE_CLAIM, settings.source_root, True))
    limits = {**K8S_STEP_RESOURCES["limits"], **GPU_K8S_CONFIG["container_config"]["resources"]["limits"]}
    container = {"resources": {**K8S_STEP_RESOURCES, "limits": limits},
                 "volume_mounts": [{"name": c, "mount_path": str(p), "read_only": ro} for c, p, ro in mounts]}
    volumes = [{"name": c, "persistent_volume_claim": {"claim_name": c, "read_only": ro}} for c, _, ro in mounts]
    return {"image": Environment.read().vqa_worker_pod_image(), "command": ["python", "-m", WORKER_MODULE],
            "base_pod_spec": {"containers": [container], "volumes": volumes, **GPU_K8S_CONFIG["pod_spec_config"]}}
