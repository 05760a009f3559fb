"""The VQA worker's launch (issue 18 point 4): a child process of the step by default, or with
EHRXQA_VQA_LAUNCH=k8s a pod of its own (dagster_k8s.PipesK8sClient). Without a cluster: the settings'
checks, the pod body dagster-k8s would create from a real Pipes session (image, command, GPU, volumes at the
step's paths, the context in a file on the shared volume), the step pods of GPU assets left without a GPU,
and a code location that never imports torch in that mode."""

import ast
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster_pipes import DAGSTER_PIPES_CONTEXT_ENV_VAR, DAGSTER_PIPES_MESSAGES_ENV_VAR, decode_env_var, encode_env_var

from ehrxqa_pipeline.config import Environment, SettingError, check_environment
from resources import default_resources
from resources.config import PipelineConfig
from resources.vqa_pipes import HOME_CLAIM, SOURCE_CLAIM, WORKER_MODULE, worker_launch

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "registry.test/ehrxqa-vqa:1"


@pytest.fixture
def k8s_env(monkeypatch, tmp_path):
    """EHRXQA_VQA_LAUNCH=k8s with an image, a home and a source root of this test's."""
    for name in list(os.environ):
        if name.startswith("EHRXQA_"):
            monkeypatch.delenv(name)
    env = {"EHRXQA_VQA_LAUNCH": "k8s", "EHRXQA_VQA_WORKER_IMAGE": IMAGE, "EHRXQA_HOME": str(tmp_path / "home"),
           "EHRXQA_SOURCE_ROOT": str(tmp_path / "physionet")}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.mark.parametrize("env,named", [
    ({"EHRXQA_VQA_LAUNCH": "pod"}, "EHRXQA_VQA_LAUNCH='pod' is not valid: use subprocess or k8s"),
    ({"EHRXQA_VQA_LAUNCH": "k8s"}, "EHRXQA_VQA_LAUNCH=k8s needs EHRXQA_VQA_WORKER_IMAGE"),
], ids=["unknown", "no-image"])
def test_a_bad_launch_setting_names_the_variable(env, named, monkeypatch):
    with pytest.raises(SettingError, match=named):
        Environment.read(env).vqa_worker_pod_image()
    with pytest.raises(SettingError, match=named):
        check_environment(env)  # `ehrxqa build` at start-up
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingError, match=named):
        default_resources()  # the code location, when it loads


def test_the_launch_defaults_to_a_child_process(monkeypatch):
    assert Environment.read({}).vqa_worker_pod_image() is None
    assert Environment.read({"EHRXQA_VQA_LAUNCH": "subprocess", "EHRXQA_VQA_WORKER_IMAGE": IMAGE}
                            ).vqa_worker_pod_image() is None
    monkeypatch.delenv("EHRXQA_VQA_LAUNCH", raising=False)
    pipes = default_resources()["vqa_pipes"]
    assert type(pipes) is dg.PipesSubprocessClient
    assert worker_launch(pipes, PipelineConfig().settings()) == {"command": [sys.executable, "-m", WORKER_MODULE]}


def _pod(k8s_env, extras: dict):
    """The pod PipesK8sClient.run would create for a Pipes context holding ``extras``, built as it builds it
    (``build_pod_body``, with the bootstrap variables of the resource's own context injector and message
    reader); and the context the worker would read."""
    from dagster_k8s.pipes import PipesK8sClient, build_pod_body

    pipes = default_resources()["vqa_pipes"]
    assert isinstance(pipes, PipesK8sClient)
    launch = worker_launch(pipes, PipelineConfig().settings())
    with (pipes.context_injector.inject_context({"run_id": "test-run", "extras": extras}) as context_params,
          pipes.message_reader.read_messages(handler=None) as message_params):
        env = {DAGSTER_PIPES_CONTEXT_ENV_VAR: encode_env_var(context_params),
               DAGSTER_PIPES_MESSAGES_ENV_VAR: encode_env_var(message_params)}
        pod = build_pod_body(pod_name="ehrxqa-vqa-test", image=launch["image"], command=launch["command"],
                             env_vars={**env, **pipes.env, **launch.get("env", {})}, base_pod_meta=None,
                             base_pod_spec=launch["base_pod_spec"])
        context_file = Path(decode_env_var(env[DAGSTER_PIPES_CONTEXT_ENV_VAR])["path"])
        context = context_file.read_text()
    return pod, env, context_file, context


def test_the_worker_pod_has_its_image_command_gpu_and_the_steps_volumes(k8s_env):
    pod, env, _, _ = _pod(k8s_env, {"task": "train"})
    (container,) = pod.spec.containers
    assert container.image == IMAGE
    assert container.command == ["python", "-m", "ehrxqa_pipeline.cli.vqa_worker"]
    assert str(container.resources.limits["nvidia.com/gpu"]) == "1"
    assert any(t.key == "nvidia.com/gpu" and t.effect == "NoSchedule" for t in pod.spec.tolerations)
    assert pod.spec.restart_policy == "Never"
    claims = {v.name: v.persistent_volume_claim for v in pod.spec.volumes}
    mounts = {m.mount_path: (claims[m.name].claim_name, bool(m.read_only)) for m in container.volume_mounts}
    assert all(bool(claims[m.name].read_only) == bool(m.read_only) for m in container.volume_mounts)
    assert mounts == {k8s_env["EHRXQA_HOME"]: (HOME_CLAIM, False),
                      k8s_env["EHRXQA_SOURCE_ROOT"]: (SOURCE_CLAIM, True)}
    values = {e.name: e.value for e in container.env}
    assert values[DAGSTER_PIPES_CONTEXT_ENV_VAR] == env[DAGSTER_PIPES_CONTEXT_ENV_VAR]
    assert DAGSTER_PIPES_MESSAGES_ENV_VAR in values


def test_the_pipes_context_is_a_file_on_the_shared_volume_however_many_image_ids(k8s_env):
    """A prediction task of 20,000 ids (about 900 KB of context) leaves the pod's environment small: Linux
    refuses to start a process with one variable over 128 KiB. The file goes once the session closes."""
    ids = [f"{i:08x}-5b7c9c1e-2a1f4d3b-8e6f0a9c-{i:08x}" for i in range(20_000)]
    pod, env, context_file, context = _pod(k8s_env, {"task": "predict", "shards": {"p10": ids}})
    assert context_file.is_relative_to(Path(k8s_env["EHRXQA_HOME"]) / "cache" / "vqa")
    assert ids[-1] in context
    assert not context_file.exists()
    (container,) = pod.spec.containers
    assert max(len(e.value) for e in container.env) < 1024


def test_the_worker_pod_mounts_the_volumes_of_the_user_deployment():
    """With the env of deploy/values.yaml the worker pod mounts the user deployment's claims at its paths."""
    values = yaml.safe_load((ROOT / "deploy" / "values.yaml").read_text())
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    env = {e["name"]: e["value"] for e in deployment["env"]}
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in deployment["volumes"]}
    step = {m["mountPath"]: (claims[m["name"]], m.get("readOnly", False)) for m in deployment["volumeMounts"]}
    settings = PipelineConfig(home=env["EHRXQA_HOME"], source_root=env["EHRXQA_SOURCE_ROOT"]).settings()
    pod = worker_launch(object(), settings)["base_pod_spec"]
    worker = {v["name"]: v["persistent_volume_claim"]["claim_name"] for v in pod["volumes"]}
    (container,) = pod["containers"]
    assert {m["mount_path"]: (worker[m["name"]], m["read_only"]) for m in container["volume_mounts"]} == step
    pvcs = {d["metadata"]["name"] for d in yaml.safe_load_all((ROOT / "deploy" / "pvc.yaml").read_text())}
    assert {HOME_CLAIM, SOURCE_CLAIM} == pvcs


def test_the_assets_run_the_worker_with_the_launch(k8s_env, monkeypatch):
    """``_run_worker`` hands the client the task and every launch argument."""
    from dagster_k8s import PipesK8sClient

    from assets.vqa_scoring import _run_worker

    pipes, seen = default_resources()["vqa_pipes"], {}

    class Done:
        def get_results(self):
            return ["reported"]

    def run(self, **kwargs):
        seen.update(kwargs)
        return Done()

    monkeypatch.setattr(PipesK8sClient, "run", run)
    settings = PipelineConfig().settings()
    assert _run_worker("ctx", pipes, settings, {"task": "train"}) == ["reported"]
    assert seen == {"context": "ctx", "extras": {"task": "train"}, **worker_launch(pipes, settings)}
    assert seen["image"] == IMAGE


def _merged(*configs: dict) -> dict:
    """The step pod config as the k8s executor merges it: its step config, the op tags, its per-step override."""
    from dagster_k8s.container_context import K8sContainerContext
    from dagster_k8s.job import UserDefinedDagsterK8sConfig

    context = K8sContainerContext()
    for config in configs:
        context = context.merge(K8sContainerContext(run_k8s_config=UserDefinedDagsterK8sConfig.from_dict(config)))
    return context.run_k8s_config.to_dict()


def test_with_worker_pods_the_gpu_steps_pods_ask_for_no_gpu(k8s_env, monkeypatch):
    """The worker pod holds the GPU: its step pod asking for one too would hold a second GPU idle (on a one-GPU
    node pool the worker pod would wait hours for it). The executor's per-step override drops the step's GPU
    and toleration, and only with EHRXQA_VQA_LAUNCH=k8s."""
    from dagster._config import process_config
    from dagster_k8s import k8s_job_executor

    from assets.automation import GPU_TAGS, K8S_STEP_RESOURCES
    from ehrxqa_pipeline.definitions import ASSETS, choose_executor, k8s_executor_config, ops_on_gpu

    monkeypatch.setenv("EHRXQA_EXECUTOR", "k8s")
    ops = ops_on_gpu(ASSETS)
    assert ops == ["vqa_scoring__predictions", "vqa_scoring__reference_model"]
    chosen = choose_executor(gpu_ops=ops).config_schema.resolve_config({}).value["config"]
    assert sorted(chosen["per_step_k8s_config"]) == ops
    config = k8s_executor_config(ops)
    assert process_config(k8s_job_executor.config_schema.config_type, config).success
    step, tags = config["step_k8s_config"], GPU_TAGS["dagster-k8s/config"]
    merged = _merged(step, tags, config["per_step_k8s_config"][ops[0]])
    assert merged["container_config"]["resources"] == K8S_STEP_RESOURCES
    assert not merged["pod_spec_config"]["tolerations"]
    with_gpu = _merged(step, tags)  # the GPU of the op tags, without the override
    assert with_gpu["container_config"]["resources"]["limits"]["nvidia.com/gpu"] == 1
    monkeypatch.delenv("EHRXQA_VQA_LAUNCH")
    config = choose_executor(gpu_ops=ops).config_schema.resolve_config({}).value["config"]
    assert not config["per_step_k8s_config"]


def _step_imports() -> set[str]:
    """Every module the code location's Dagster code imports, at the top or inside a step."""
    found = {"ehrxqa_pipeline.definitions"}
    for folder in ("assets", "resources"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.level == 0:
                    found.add(node.module)
                elif isinstance(node, ast.Import):
                    found.update(a.name for a in node.names)
    return found


@pytest.mark.slow
def test_with_worker_pods_the_code_location_never_imports_torch(tmp_path):
    """deploy/Dockerfile installs the CPU build of torch: nothing the steps import needs torch (the worker pod
    resolves the device), so a code location without it loads and imports every step's modules."""
    modules = sorted(_step_imports())
    assert "ehrxqa_pipeline.vqa.device" not in modules
    code = ("import sys; sys.modules['torch'] = sys.modules['torchvision'] = None\n"
            f"import importlib; [importlib.import_module(m) for m in {modules!r}]\n"
            "from ehrxqa_pipeline.definitions import defs; print(type(defs.resources['vqa_pipes']).__name__)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("EHRXQA_")}
    env.update(EHRXQA_HOME=str(tmp_path), EHRXQA_VQA_LAUNCH="k8s", EHRXQA_VQA_WORKER_IMAGE=IMAGE)
    run = subprocess.run([sys.executable, "-W", "ignore", "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split()[-1] == "PipesK8sClient"
