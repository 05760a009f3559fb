"""`ehrxqa build` fails fast and loud at start-up (issue 22 points 5, 6, 8): every bad setting is one line
naming the variable, the value and the accepted forms, exit status 2, no traceback; an unusable EHRXQA_HOME
(read-only, full) is named before any work; a second build on a home that has one running is refused with
the holder's pid; `python -m ehrxqa_pipeline.cli` is the `ehrxqa` command. All checks run before Dagster
starts, so each test takes about a second."""

import errno
import functools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ehrxqa_pipeline.cli import main
from ehrxqa_pipeline.cli.lock import BUSY_EXIT, LOCK_NAME, BuildLock

BAD = [
    ("EHRXQA_SEED", "abc", "use an integer"),
    ("EHRXQA_EXECUTOR", "nonsense", "'multiprocess' or 'k8s'"),
    ("EHRXQA_CHECK_IMAGES", "no", "use 0 or 1"),
    ("EHRXQA_SOURCE_VERSIONS", "mimiciv=9", "mimiciv=2.2|3.0|3.1"),
    ("EHRXQA_VQA_DEVICE", "gpu", "auto, cpu, cuda or cuda:N"),
    ("EHRXQA_VQA_AMP", "off", "use 0 or 1"),
    ("EHRXQA_VQA_DECODE", "nvjpeg", "use auto, cpu, torch, mixed or mixed:SHARE"),
    ("EHRXQA_VQA_DECODE", "mixed:1.5", "the share of images decoded on the CPU, 0 to 1"),
    ("EHRXQA_VQA_BASE_URL", "https://vision.example.com/v1", "not on the allow-list"),
    ("EHRXQA_VQA_BASE_URL", "localhost:8000", "http(s) URL"),
    ("EHRXQA_VQA_ALLOW_HOSTS", "https://vision.example.com/v1", "no scheme or path"),
    ("EHRXQA_VQA_LAUNCH", "pod", "use subprocess or k8s"),
    ("EHRXQA_VQA_LAUNCH", "k8s", "needs EHRXQA_VQA_WORKER_IMAGE"),
    ("EHRXQA_VQA_BACKBONE", "resnet18", "needs EHRXQA_VQA_BACKBONE_WEIGHTS"),
    ("EHRXQA_VQA_BACKBONE_WEIGHTS", "/nowhere/resnet18.pt", "needs EHRXQA_VQA_BACKBONE"),
    ("EHRXQA_LLM_BASE_URL", "ftp://x", "http(s) URL"),
    ("EHRXQA_PARAPHRASE_COUNT_EHRXQA", "many", "positive integer"),
    ("EHRXQA_PARAPHRASE_REQUIRE_REVIEW", "maybe", "use 0 or 1 or true"),
]


def _clean_env(monkeypatch, home: Path) -> None:
    for name in list(os.environ):
        if name.startswith("EHRXQA_") or name == "DAGSTER_HOME":
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("EHRXQA_HOME", str(home))


def _fails(capsys, argv=("build",)) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    err = capsys.readouterr().err
    return exit_info.value.code, err


@pytest.mark.parametrize("name,value,forms", BAD, ids=[f"{n}={v}" for n, v, _ in BAD])
def test_a_bad_setting_is_one_line_naming_it(name, value, forms, tmp_path, monkeypatch, capsys):
    _clean_env(monkeypatch, tmp_path / "home")
    monkeypatch.setenv(name, value)
    code, err = _fails(capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    assert value in err and forms in err and (name in err or name == "EHRXQA_SOURCE_VERSIONS"), err
    assert not (tmp_path / "home" / "dagster").exists()  # refused before any work


def test_a_missing_source_root_is_one_line(tmp_path, monkeypatch, capsys):
    _clean_env(monkeypatch, tmp_path / "home")
    monkeypatch.setenv("EHRXQA_SOURCE_ROOT", str(tmp_path / "nowhere"))
    code, err = _fails(capsys)
    assert code == 2 and err.count("\n") == 1
    assert f"EHRXQA_SOURCE_ROOT={tmp_path / 'nowhere'} is not a folder" in err


BAD_CONFIG = [
    ("ops:\n  ehrxqa__silver:\n    config: {train_valid_capp: 2}\n", "train_valid_capp"),
    ("ops:\n  no_such_op:\n    config: {}\n", "no_such_op"),
    ("ops: [\n", "while parsing"),
    (None, "No such file or directory"),
]


@pytest.mark.parametrize("text,named", BAD_CONFIG, ids=["field", "op", "yaml", "missing"])
def test_a_bad_run_config_file_is_one_line_naming_it(text, named, tmp_path, monkeypatch, capsys):
    _clean_env(monkeypatch, tmp_path / "home")
    path = tmp_path / "run.yaml"
    if text is not None:
        path.write_text(text)
    code, err = _fails(capsys, ("build", "--config", str(path)))
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"error: --config {path}") and named in err, err
    assert not (tmp_path / "home" / "dagster").exists()  # refused before any work


def test_an_allowed_vision_host_passes_the_start_up_check(tmp_path):
    from ehrxqa_pipeline.config import check_environment

    env = {"EHRXQA_HOME": str(tmp_path), "EHRXQA_VQA_BASE_URL": "http://vqa.internal:8000/v1",
           "EHRXQA_VQA_ALLOW_HOSTS": "vqa.internal"}
    assert check_environment(env).home == tmp_path
    assert check_environment({"EHRXQA_VQA_BASE_URL": "http://127.0.0.1:8000/v1"}).seed == 0


def test_the_vision_allow_list_error_cites_a_file_of_the_project():
    from ehrxqa_pipeline.vqa.modules import HostNotAllowedError, OpenAIVisionModule

    with pytest.raises(HostNotAllowedError) as err:
        OpenAIVisionModule("https://vision.example.com/v1", "m")
    assert "design.md" not in str(err.value) and "README.md, Configuration" in str(err.value)
    readme = Path(__file__).resolve().parents[1] / "README.md"
    assert "## Configuration" in readme.read_text()


def test_a_bad_setting_from_the_command_line_has_no_traceback(tmp_path):
    """The real process: `python -m ehrxqa_pipeline.cli` (point 8), exit 2, one line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EHRXQA_") and k != "DAGSTER_HOME"}
    env.update(EHRXQA_HOME=str(tmp_path / "home"), EHRXQA_SEED="abc")
    run = subprocess.run([sys.executable, "-m", "ehrxqa_pipeline.cli", "build"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    assert run.stderr == "error: EHRXQA_SEED='abc' is not valid: use an integer, e.g. 0\n"
    usage = subprocess.run([sys.executable, "-m", "ehrxqa_pipeline.cli", "--help"], capture_output=True,
                           text=True, timeout=60)
    assert usage.returncode == 0 and usage.stdout.startswith("usage: ehrxqa ")


def test_a_read_only_home_is_one_line(tmp_path, monkeypatch, capsys):
    """A read-only file system (simulated: the tests may run as root, whom permissions do not stop)."""
    import pathlib

    _clean_env(monkeypatch, tmp_path / "home")

    def read_only(self, *a, **k):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))

    monkeypatch.setattr(pathlib.Path, "write_bytes", read_only)
    code, err = _fails(capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert f"EHRXQA_HOME={tmp_path / 'home'} is not writable: Read-only file system" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_home_without_write_permission_is_one_line(tmp_path, monkeypatch, capsys):
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o555)
    _clean_env(monkeypatch, home)
    try:
        code, err = _fails(capsys)
    finally:
        home.chmod(0o755)
    assert code == 2 and "is not writable: Permission denied" in err


def test_a_full_home_names_the_free_space(tmp_path, monkeypatch, capsys):
    import shutil

    _clean_env(monkeypatch, tmp_path / "home")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(10 << 30, 10 << 30, 3 << 20))
    code, err = _fails(capsys)
    assert code == 2 and err.count("\n") == 1
    assert f"EHRXQA_HOME={tmp_path / 'home'} has 3 MiB free on its file system; a build needs at least 512 MiB" in err


def test_a_second_build_on_the_same_home_is_refused_naming_the_pid(tmp_path, monkeypatch, capsys):
    home = tmp_path / "home"
    _clean_env(monkeypatch, home)
    home.mkdir()
    hold = ("import sys, time; from pathlib import Path; from ehrxqa_pipeline.cli.lock import BuildLock; "
            "BuildLock(Path(sys.argv[1])).acquire(); print('locked', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", hold, str(home)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        start = time.perf_counter()
        assert main(["build"]) == BUSY_EXIT
        err = capsys.readouterr().err
        assert time.perf_counter() - start < 5
        assert f"another ehrxqa build is running on EHRXQA_HOME={home} (pid {holder.pid} " in err
        assert f"kill {holder.pid}" in err
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # killed: the kernel released the lock; its record remains and names the build that did not finish
    lock = BuildLock(home).acquire()
    try:
        assert lock.previous["pid"] == holder.pid
    finally:
        lock.release()
    assert (home / LOCK_NAME).read_text() == ""  # a build that ended normally leaves no record
    assert BuildLock(home).acquire().previous is None


@functools.cache
def _all_tokens() -> dict[str, tuple[tuple[int, str], ...]]:
    """Per module of the pipeline (ehrxqa_pipeline/, assets/, resources/): its (type, text) tokens, read once for
    the tests below (tokenizing every module takes about 1.5 s)."""
    import io
    import tokenize

    root = Path(__file__).resolve().parents[1]
    return {str(p.relative_to(root)): tuple((t.type, t.string) for t in tokenize.generate_tokens(
                io.StringIO(p.read_text()).readline))
            for folder in ("ehrxqa_pipeline", "assets", "resources") for p in sorted((root / folder).rglob("*.py"))}


def _tokens(kind: int) -> dict[str, str]:
    """Per module of the pipeline: its tokens of one kind, joined."""
    return {path: " ".join(text for type_, text in tokens if type_ == kind) for path, tokens in _all_tokens().items()}


def test_the_environment_is_read_in_one_module():
    """Issue 16 point 4: ehrxqa_pipeline/config.py reads and writes every environment variable (Settings,
    Environment, Settings.export); every other module of the pipeline gets values from it (code only: a
    comment may show a user how to pass ``dg.EnvVar`` to a resource)."""
    import re
    import tokenize

    access = re.compile(r"\b(environ|getenv|EnvVar)\b")
    users = [m for m, names in _tokens(tokenize.NAME).items() if access.search(names)]
    assert users == ["ehrxqa_pipeline/config.py"], users


def test_every_environment_variable_named_in_the_code_is_a_known_setting():
    """A variable the code names (in a string: a message, a docstring) is one config.py reads: no stale or
    invented names."""
    import re
    import tokenize

    from ehrxqa_pipeline.config import CHECK_IMAGES_ENV, ENVIRONMENT, HOME_ENV, SEED_ENV, SOURCE_ENV
    from ehrxqa_pipeline.sources.layout import VERSIONS_ENV

    known = {*ENVIRONMENT.values(), HOME_ENV, SEED_ENV, SOURCE_ENV, CHECK_IMAGES_ENV, VERSIONS_ENV}
    variable = re.compile(r"(?<!{)\bEHRXQA_[A-Z0-9_]*[A-Z0-9]\b")  # not a {NAME} interpolated in an f-string
    named = {n for text in _tokens(tokenize.STRING).values() for n in variable.findall(text)}
    assert named - known == set(), named - known
