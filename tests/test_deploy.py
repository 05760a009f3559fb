"""deploy/ renders and validates without a cluster: every YAML parses, the Helm values run this code location
with the shared volume at EHRXQA_HOME and the K8sRunLauncher, the k8s executor is chosen by EHRXQA_EXECUTOR
and its config validates, the GPU op tags build a Kubernetes job that requests one GPU, and the VQA worker
runs in a pod of its own that the step pods may create (tests/test_vqa_pipes_k8s.py builds that pod)."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow  # loads the Kubernetes deployment: not in `make test-fast`

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"


def _docs(path: Path) -> list:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


@pytest.fixture(scope="module")
def values() -> dict:
    return yaml.safe_load((DEPLOY / "values.yaml").read_text())


def _env(deployment: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in deployment["env"]}


def test_every_yaml_parses():
    files = sorted(DEPLOY.glob("**/*.y*ml"))
    assert {p.name for p in files} >= {"values.yaml", "pvc.yaml", "rbac.yaml"}
    for path in files:
        assert _docs(path), path


def test_user_deployment_serves_this_code_location(values):
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    assert values["dagster-user-deployments"]["enabled"]
    assert deployment["image"]["repository"] and deployment["image"]["tag"]
    args = deployment["dagsterApiGrpcArgs"]
    assert args[args.index("--module-name") + 1] == "ehrxqa_pipeline.definitions"
    assert deployment["includeConfigInLaunchedRuns"]["enabled"]
    env = _env(deployment)
    assert env["EHRXQA_EXECUTOR"] == "k8s"
    mounts = {m["name"]: m["mountPath"] for m in deployment["volumeMounts"]}
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in deployment["volumes"]}
    # EHRXQA_HOME (warehouse, databases, answer sheets, release) is the shared read-write volume
    home_volume = next(name for name, path in mounts.items() if path == env["EHRXQA_HOME"])
    source_volume = next(name for name, path in mounts.items() if path == env["EHRXQA_SOURCE_ROOT"])
    pvcs = {d["metadata"]["name"]: d for d in _docs(DEPLOY / "pvc.yaml")}
    assert pvcs[claims[home_volume]]["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claims[source_volume] in pvcs
    assert next(m for m in deployment["volumeMounts"] if m["name"] == source_volume)["readOnly"]


def test_run_launcher_is_k8s_with_the_same_volume(values):
    launcher = values["runLauncher"]
    assert launcher["type"] == "K8sRunLauncher"
    config = launcher["config"]["k8sRunLauncher"]
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    env = dict(v.split("=", 1) for v in config["envVars"])
    assert env["EHRXQA_HOME"] == _env(deployment)["EHRXQA_HOME"]
    assert {m["mountPath"] for m in config["volumeMounts"]} == {m["mountPath"] for m in deployment["volumeMounts"]}
    assert {v["persistentVolumeClaim"]["claimName"] for v in config["volumes"]} == \
        {v["persistentVolumeClaim"]["claimName"] for v in deployment["volumes"]}


def test_dockerfile_installs_the_project():
    text = (DEPLOY / "Dockerfile").read_text()
    assert "pip install -e ." in text and "ehrxqa_pipeline.definitions" in text
    for folder in ("ehrxqa_pipeline", "assets", "resources", "data_contracts"):
        assert f"COPY {folder}" in text, folder
    assert (DEPLOY / "README.md").is_file()


def test_the_vqa_worker_runs_in_its_own_pod(values):
    """The chart sets EHRXQA_VQA_LAUNCH=k8s with the worker image for the code server and the run pods alike,
    so the code location image carries torch's CPU build (at the project's pins, before the project, whose
    pins it then satisfies): with worker pods no step imports torch (tests/test_vqa_pipes_k8s.py)."""
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    env = _env(deployment)
    launcher = dict(v.split("=", 1) for v in values["runLauncher"]["config"]["k8sRunLauncher"]["envVars"])
    for where in (env, launcher):
        assert where["EHRXQA_VQA_LAUNCH"] == "k8s"
        assert where["EHRXQA_VQA_WORKER_IMAGE"] == env["EHRXQA_VQA_WORKER_IMAGE"]
    assert env["EHRXQA_VQA_WORKER_IMAGE"].split(":")[0] != deployment["image"]["repository"]
    text = (DEPLOY / "Dockerfile").read_text()
    torch_line = next(line for line in text.splitlines() if "torch==" in line)
    assert "ARG TORCH_VARIANT=cpu" in text and "whl/${TORCH_VARIANT}" in torch_line
    project = _pins((ROOT / "pyproject.toml").read_text())
    assert _pins(torch_line) == {"torch": project["torch"], "torchvision": project["torchvision"]}
    assert text.index(torch_line) < text.index("pip install -e .")


# What PipesK8sClient calls with the step pod's service account (dagster_k8s.pipes, .client): create, follow
# (list, get) and delete the pod, stream its log, and list events when it does not start.
PIPES_K8S_VERBS = {"pods": {"create", "get", "list", "watch", "delete"}, "pods/log": {"get"}, "events": {"list"}}
USER_CODE_SERVICE_ACCOUNT = "ehrxqa-dagster-user-deployments-user-deployments"  # the chart's, release `ehrxqa`


def test_rbac_lets_step_pods_run_the_worker_pod():
    docs = {d["kind"]: d for d in _docs(DEPLOY / "rbac.yaml")}
    granted: dict[str, set] = {}
    for rule in docs["Role"]["rules"]:
        assert rule["apiGroups"] == [""]
        for resource in rule["resources"]:
            granted.setdefault(resource, set()).update(rule["verbs"])
    assert all(verbs <= granted.get(resource, set()) for resource, verbs in PIPES_K8S_VERBS.items()), granted
    binding = docs["RoleBinding"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": docs["Role"]["metadata"]["name"]}
    (subject,) = binding["subjects"]
    assert subject == {"kind": "ServiceAccount", "name": USER_CODE_SERVICE_ACCOUNT, "namespace": "ehrxqa"}
    readme = (DEPLOY / "README.md").read_text()
    assert "helm upgrade --install ehrxqa dagster/dagster" in readme and "-n ehrxqa" in readme


def test_k8s_executor_chosen_by_environment():
    code = ("import json; from ehrxqa_pipeline.definitions import defs; "
            "e = defs.resolve_implicit_global_asset_job_def().executor_def; print(json.dumps(e.name))")
    out = {}
    for kind in ("k8s", None):
        env = {k: v for k, v in os.environ.items() if k != "EHRXQA_EXECUTOR"}
        if kind:
            env["EHRXQA_EXECUTOR"] = kind
        run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                             check=True)
        out[kind] = json.loads(run.stdout.strip().splitlines()[-1])
    assert out == {"k8s": "k8s", None: "multiprocess"}


def test_k8s_executor_config_validates():
    from dagster._config import process_config
    from dagster_k8s import k8s_job_executor

    from ehrxqa_pipeline.definitions import K8S_EXECUTOR_CONFIG

    result = process_config(k8s_job_executor.config_schema.config_type, K8S_EXECUTOR_CONFIG)
    assert result.success, result.errors
    limits = {(t["key"], t["value"]): t["limit"] for t in K8S_EXECUTOR_CONFIG["tag_concurrency_limits"]}
    assert limits[("ehrxqa/warehouse", "write")] == 1 and limits[("ehrxqa/device", "gpu")] == 1


def test_gpu_tags_build_a_job_requesting_one_gpu():
    from dagster_k8s.job import DagsterK8sJobConfig, UserDefinedDagsterK8sConfig, construct_dagster_k8s_job

    from assets.automation import GPU_POOL, GPU_TAGS

    assert GPU_POOL == "gpu"
    user = UserDefinedDagsterK8sConfig.from_dict(GPU_TAGS["dagster-k8s/config"])
    job = construct_dagster_k8s_job(
        job_config=DagsterK8sJobConfig(job_image="ehrxqa:test", dagster_home="/opt/dagster/dagster_home"),
        args=["dagster", "api", "execute_step"], job_name="ehrxqa-step", user_defined_k8s_config=user,
        pod_name="ehrxqa-step", component="step_worker")
    pod = job.spec.template.spec
    assert str(pod.containers[0].resources.limits["nvidia.com/gpu"]) == "1"
    assert any(t.key == "nvidia.com/gpu" for t in pod.tolerations)


def test_helm_renders_when_available(tmp_path):
    """With helm and the chart cached locally (no network here), render the values; otherwise skip."""
    helm = shutil.which("helm")
    chart = os.environ.get("EHRXQA_DAGSTER_CHART")  # a local copy of the dagster chart, if any
    if not helm or not chart:
        pytest.skip("helm or a local dagster chart (EHRXQA_DAGSTER_CHART) not available")
    out = subprocess.run([helm, "template", "ehrxqa", chart, "-f", str(DEPLOY / "values.yaml")],
                         capture_output=True, text=True, check=True).stdout
    assert "ehrxqa_pipeline.definitions" in out and "K8sRunLauncher" in out
    assert f"serviceAccountName: {USER_CODE_SERVICE_ACCOUNT}" in out  # the subject of deploy/rbac.yaml


def _pins(text: str) -> dict[str, str]:
    """name -> version specifier of the requirement strings in ``text`` (pyproject.toml or a Dockerfile)."""
    found = re.findall(r'"?([A-Za-z][A-Za-z0-9_.-]*(?:\[[a-z]+\])?)((?:==|>=)[0-9][^\s",]*(?:,<[0-9.]+)?)"?', text)
    return {re.sub(r"\[.*\]", "", name).lower(): spec for name, spec in found}


def test_the_vqa_worker_image_holds_what_the_worker_imports_at_the_projects_pins():
    """deploy/vqa-worker.Dockerfile installs the distributions the worker's imports come from (or what those
    bring along), at pyproject.toml's pins, and no Dagster but dagster-pipes; the worker and the library it
    drives import no Dagster but dagster_pipes."""
    import importlib.metadata as md

    text = (DEPLOY / "vqa-worker.Dockerfile").read_text()
    listed = _pins(text.split("RUN pip install", 1)[1].split("&&", 1)[0])
    project = _pins((ROOT / "pyproject.toml").read_text())
    assert all(project[name] == spec for name, spec in listed.items() if name in project), (listed, project)
    assert not [n for n in listed if n.startswith("dagster") and n != "dagster-pipes"]
    code = ("import sys, torch, torchvision, dagster_pipes, ehrxqa_pipeline.cli.vqa_worker, "
            "ehrxqa_pipeline.vqa.worker, ehrxqa_pipeline.vqa.train, ehrxqa_pipeline.vqa.infer, "
            "ehrxqa_pipeline.vqa.decode, ehrxqa_pipeline.vqa.stream, "
            "ehrxqa_pipeline.vqa.workspace; from ehrxqa_pipeline.vqa.train import plot_curves; plot_curves([]); "
            "print(' '.join(sorted({m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names))))")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert "dagster" not in run.stdout.split()  # the worker, torch and all: no Dagster but dagster_pipes
    of = md.packages_distributions()
    # torch imports these where they are installed, and runs without them: tqdm; dill (torch.utils.data's
    # datapipes, torch/utils/_import_utils.py), which the dev extra's `datasets` installs for the tests
    optional = {"tqdm", "dill"}
    imported = {d.lower() for m in run.stdout.split() for d in of.get(m, [])} - {"ehrxqa-pipeline"} - optional

    def closure(names: set[str]) -> set[str]:
        seen, todo = set(), list(names)
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            try:
                reqs = md.requires(name) or []
            except md.PackageNotFoundError:
                continue
            todo += [re.split(r"[\s;<>=!~\[(]", r, 1)[0].lower() for r in reqs if "extra ==" not in r]
        return seen

    installed = {n.replace("_", "-") for n in closure(set(listed))}
    missing = sorted(d for d in imported if d.replace("_", "-") not in installed)
    assert not missing, f"the worker imports {missing}, which deploy/vqa-worker.Dockerfile does not install"
