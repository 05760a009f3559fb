"""`make bench`: wall time and peak memory of each pipeline stage, one child process per stage.

Peak memory is the child's maximum resident set size (wait4 rusage), so each stage is measured alone.
Targets (design.md section 4) are on a 2-core, 24 GiB machine. Usage:
    python -m benchmarks.run [--scales demo,full] [--stages generate,ingest] [--workdir DIR]
Results are printed as a table and written to <workdir>/bench-results.json.

Stages ``build`` and ``rebuild`` (``--e2e-scales``, default demo only) time the whole pipeline as a user runs
it: ``ehrxqa build`` end to end from an empty EHRXQA_HOME (<workdir>/home-<scale>-e2e, on the generated
source), then ``ehrxqa build --changed`` with nothing changed, which observes the sources, evaluates the
automation conditions and should run nothing (design.md: "a rebuild with nothing changed runs nothing and
takes seconds"). The ``build`` stage also reports every step (``benchmarks/steps.py``): while it runs, the RSS of
its process tree (sum of VmRSS over /proc) is sampled every 0.25 s; afterwards each step of each run on the
home's Dagster instance (per partition for partitioned steps) gets its wall time and the largest sample taken
between its start and end. ``ehrxqa build`` executes the steps in its own process, one after another, so a
step's peak is the build process tree's RSS while the step ran, memory still held from earlier steps included,
not the step's own allocation; being a sum over the tree, it can exceed the stage's peak, which is that of the
largest single process (wait4). The steps, longest first, go to <workdir>/build-steps-<scale>.json (the stage's
row in bench-results.json names it as ``steps_file``) and the 15 longest are printed below the stage's line.

Stage ``vqa_model`` (``benchmarks/vqa_bench.py``; needs the cxr stage's home and a source with JPEGs, so at
``full`` scale it reports that it was skipped) times the reference VQA model: a default training run and
training / inference images/s per batch size with decode vs model seconds, on CUDA when present; its numbers
go to <workdir>/vqa-model-<scale>.json. Stage ``vqa_decode`` (``benchmarks/decode_bench.py``, same needs) exports
the train images with their boxes to a bundle and measures JPEG decode (``cpu``: PIL + OpenCV threads;
``torch``: torchvision's decoder, nvJPEG on CUDA), the model alone and the two end to end, in images/s; its
numbers go to <workdir>/vqa-decode-<scale>.json. On a GPU machine without this project's environment, copy
the bundle and run ``python -m benchmarks.decode_bench run --bundle DIR --device cuda --real-size`` there
(torch, torchvision, numpy, PIL and OpenCV suffice).

Stage ``scene-graph-zip`` (needs the generate stage's source) times ``sources.scene_graph.tabular_from_zip``
on the source's ``silver_dataset/scene_graph.zip`` alone, in its own process: wall time and peak RSS like every
stage, plus members, bytes and rows, and a linear extrapolation to the real zip's 243,310 members (and, by
uncompressed bytes, to its 10.26 GB); its numbers go to <workdir>/scene-graph-<scale>.json.

Stage ``edit`` (``--e2e-scales``; after ``build``) times partial rebuilds as a user meets them: on the e2e
home, each edit of ``benchmarks/edits.py`` (a Chest ImaGenome gold label, a silver label, a MIMIC-IV lab name)
is applied to the source and ``ehrxqa build --changed`` is timed, with the assets it materialized and its share
of the ``build`` stage's wall time (design.md: a gold label edit <= 25 % of a full build at demo scale, <= 5 % at
full scale); then the edit is undone and rebuilt (not timed), so the home and the source end as they began. Its
numbers go to <workdir>/edits-<scale>.json.

Stage ``ui-run`` (``--e2e-scales``; ``benchmarks/ui_run.py``, needs the generate stage's source) times a run as the
UI launches it, one process per step (the code location's multiprocess executor, whose steps fork from a server
process that preloaded the code location), of the ingest group with its checks from an empty home
<workdir>/home-<scale>-ui; its numbers (wall, steps, seconds per step) go to <workdir>/ui-run-<scale>.json.

A scale is a preset name (``demo``, ``full``) or ``PRESET:PATIENTS`` for a preset with another CXR patient
count (``full:20000``: the full preset's proportions, 20,000 patients); its folders are named with ``-``.

Stage ``ehrxqa`` (needs the ehr_db stage's databases in <workdir>/home-<scale>) times the EHRXQA library
directly, in one process: sampling every catalog template on the silver and on the gold database (paper
caps, or ``--ehrxqa-caps TRAIN_VALID,TEST``), then NeuralSQL executor throughput with the oracle VQA module
over the sampled gold items; its numbers go to <workdir>/ehrxqa-<scale>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from benchmarks import steps

ROOT = Path(__file__).resolve().parents[1]
EHRXQA = str(Path(sys.executable).with_name("ehrxqa"))
E2E = ("build", "rebuild", "edit", "ui-run")
REAL_SCENE_GRAPHS, REAL_SCENE_GRAPH_BYTES = 243_310, 10.26e9  # Chest ImaGenome 1.0.0 scene_graph.zip, unzipped


def run_stage(argv: list[str], env: dict[str, str],
              samples: list[tuple[float, int]] | None = None) -> tuple[float, float, int]:
    """Run a command; return (wall seconds, peak RSS in GiB, exit code). With ``samples``, append to it
    (``time.time()``, RSS bytes of the command's process tree) every 0.25 s while it runs (``steps.RssSampler``)."""
    start = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, {**os.environ, **env})
    if samples is not None:
        sampler = steps.RssSampler(pid).start()
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped: its pid cannot be reused
        samples.extend(sampler.stop())
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    return wall, usage.ru_maxrss / (1024 ** 2), os.waitstatus_to_exitcode(status)


def build_step_report(home: Path, samples: list[tuple[float, int]], stopped: float, out: Path) -> list[dict]:
    """The build stage's steps (``steps.build_steps`` on the instance in ``home``), longest first, written to
    ``out`` as JSON."""
    from ehrxqa_pipeline.config import Settings

    table = steps.build_steps(Settings(home).dagster_home, samples, stopped)
    out.write_text(json.dumps(table, indent=2) + "\n")
    return table


def ehrxqa_bench(home: Path, caps: tuple[int, int], seed: int = 0) -> dict:
    """Seconds to sample the whole catalog per database, draws/s, and NeuralSQL (oracle) queries/s on gold."""
    from ehrxqa_pipeline.questions.ehrxqa import CATALOG
    from ehrxqa_pipeline.questions.ehrxqa.sampling import DatabaseFiles, SamplingCaps, sample_templates
    from ehrxqa_pipeline.questions.neuralsql import NeuralSqlExecutor, OracleModule

    out: dict = {"templates": len(CATALOG), "caps": list(caps)}
    for which in ("silver", "gold"):
        files = DatabaseFiles(home / "release" / "ehrxqa" / "databases" / which / "mimic_iv_cxr.db",
                              home / "answer_sheets" / which / "tb_cxr_plus.db")
        start = time.perf_counter()
        conn = files.open()
        opened = time.perf_counter()
        items, reports = sample_templates(conn, which, seed, SamplingCaps(*caps), CATALOG)
        sampled = time.perf_counter()
        draws = sum(r.draws for r in reports)
        out[which] = {"open_s": round(opened - start, 2), "sample_s": round(sampled - opened, 2),
                      "items": sum(len(v) for v in items.values()), "draws": draws,
                      "draws_per_s": round(draws / max(sampled - opened, 1e-9), 1),
                      "templates_below_cap": sum(r.kept < r.cap for r in reports)}
        if which == "gold":
            queries = [i.neural_sql for v in items.values() for i in v]
            start = time.perf_counter()
            executor = NeuralSqlExecutor(conn, OracleModule(conn))
            loaded = time.perf_counter()
            for q in queries:
                executor.execute(q)
            ran = time.perf_counter()
            out["executor"] = {"oracle_load_s": round(loaded - start, 2), "queries": len(queries),
                               "seconds": round(ran - loaded, 2),
                               "queries_per_s": round(len(queries) / max(ran - loaded, 1e-9), 1)}
        conn.close()
    return out


def scene_graph_bench(zip_path: Path, out_dir: Path) -> dict:
    """Convert the zip once into a fresh folder: seconds, size, rows, and the extrapolation to the real zip."""
    import resource
    import zipfile

    from ehrxqa_pipeline.sources.scene_graph import tabular_from_zip

    shutil.rmtree(out_dir, ignore_errors=True)
    with zipfile.ZipFile(zip_path) as zf:
        infos = [i for i in zf.infolist() if not i.is_dir()]
    members, unzipped = len(infos), sum(i.file_size for i in infos)
    start = time.perf_counter()
    paths = tabular_from_zip(zip_path, out_dir)
    seconds = time.perf_counter() - start
    rows = {}
    for name, path in paths.items():
        with open(path, "rb") as fh:
            rows[name] = sum(block.count(b"\n") for block in iter(lambda: fh.read(1 << 24), b"")) - 1
    shutil.rmtree(out_dir, ignore_errors=True)
    return {"members": members, "zip_bytes": zip_path.stat().st_size, "unzipped_bytes": unzipped,
            "rows": rows, "seconds": round(seconds, 2), "ms_per_member": round(1000 * seconds / members, 3),
            "mb_per_s_unzipped": round(unzipped / 1e6 / seconds, 1),
            "peak_rss_gib_in_process": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20, 2),
            "extrapolated_s_243310_members": round(seconds * REAL_SCENE_GRAPHS / members),
            "extrapolated_s_10_26_gb": round(seconds * REAL_SCENE_GRAPH_BYTES / unzipped)}


def _changed_build(env: dict[str, str]) -> tuple[float, list[str], int]:
    """``ehrxqa build --changed``: (wall seconds, the assets its summary lists as materialized, exit code)."""
    import re
    import subprocess

    start = time.perf_counter()
    done = subprocess.run([EHRXQA, "build", "--changed"], env={**os.environ, **env}, capture_output=True, text=True)
    wall = time.perf_counter() - start
    summary = done.stdout.split("\n\n")
    key = r"[a-z_]+(?:/[a-z_]+)+(?:\[p\d+\])?"  # group/name, group/name/side, group/name[p10]
    assets = sorted({m.group(1) for block in summary for m in re.finditer(rf"^({key}) ", block, flags=re.M)})
    if done.returncode:
        print((done.stdout + done.stderr)[-2000:], flush=True)  # why it failed, in the bench log
    return wall, assets, done.returncode


def edit_bench(home: Path, source: Path, full_build_seconds: float | None) -> list[dict]:
    """Each edit of ``benchmarks.edits``, timed as ``build --changed`` on the built ``home``, then undone."""
    from benchmarks import edits

    env = {"EHRXQA_HOME": str(home), "EHRXQA_SOURCE_ROOT": str(source)}
    warehouse = home / "warehouse.duckdb"
    out = []
    for make in (lambda: edits.gold_label(source, warehouse), lambda: edits.silver_label(source, warehouse),
                 lambda: edits.lab_name(source)):
        edit = make()
        edit.apply()
        wall, assets, code = _changed_build(env)
        edit.undo()
        _, _, restored = _changed_build(env)
        out.append({"edit": edit.name, "seconds": round(wall, 1), "exit_code": code, "restore_exit_code": restored,
                    "share_of_full_build": None if not full_build_seconds else round(wall / full_build_seconds, 3),
                    "assets": len(assets), "materialized": assets})
        print(f"  {edit.name:<14} {wall:7.1f} s  {len(assets)} assets  exit {code}", flush=True)
    return out


def stages(scale: str, work: Path, caps: str = "80,10") -> dict[str, tuple[list[str], dict[str, str]]]:
    from ehrxqa_pipeline.sources.scene_graph import ZIP_RELEASE_PATH

    preset, _, patients = scale.partition(":")
    tag = scale.replace(":", "-")
    source, home = work / f"source-{tag}", work / f"home-{tag}"
    gen = [EHRXQA, "demo-source", str(source), "--scale", preset, "--force",
           *(["--patients", patients] if patients else [])]
    env = {"EHRXQA_SOURCE_ROOT": str(source), "EHRXQA_HOME": str(home)}
    # Metadata-only full sources have no JPEGs; demo sources do.
    cxr_env = {**env, "EHRXQA_CHECK_IMAGES": "0" if preset == "full" else "1"}
    e2e_env = {**cxr_env, "EHRXQA_HOME": str(work / f"home-{tag}-e2e")}
    return {
        "generate": (gen, {}),
        "ingest": ([EHRXQA, "build", "--select", "group:sources or group:ingest"], env),
        # design.md target: cohort + labels + splits <= 60 s and <= 8 GiB at full scale on 2 cores
        "cxr": ([EHRXQA, "build", "--select", "group:cxr_cohort or group:cxr_labels or group:splits"], cxr_env),
        "vqa": ([EHRXQA, "build", "--select", "group:mimic_cxr_vqa or key:release/mimic_cxr_vqa"], cxr_env),
        "ehr_db": ([EHRXQA, "build", "--select", "group:ehr_db"], cxr_env),
        "ehrxqa": ([sys.executable, "-m", "benchmarks.run", "--ehrxqa-home", str(home), "--ehrxqa-out",
                    str(work / f"ehrxqa-{tag}.json"), "--ehrxqa-caps", caps], {}),
        # scene_graph.zip -> scene_tabular (sources.scene_graph), on the generated source's zip
        "scene-graph-zip": ([sys.executable, "-m", "benchmarks.run", "--scene-graph-zip",
                             str(source / ZIP_RELEASE_PATH),
                             "--scene-graph-out", str(work / f"scene-graph-{tag}.json")], {}),
        # training / inference images/s per batch size, decode vs model (needs the cxr stage and JPEGs)
        "vqa_model": ([sys.executable, "-m", "benchmarks.vqa_bench", "--home", str(home), "--source", str(source),
                       "--out", str(work / f"vqa-model-{tag}.json")], {}),
        # JPEG decode (PIL threads vs torch / nvJPEG), model and end-to-end images/s (needs the cxr stage and JPEGs)
        "vqa_decode": ([sys.executable, "-m", "benchmarks.decode_bench", "run", "--home", str(home), "--source",
                        str(source), "--bundle", str(work / f"decode-bundle-{tag}"), "--batches", "64,256",
                        "--out", str(work / f"vqa-decode-{tag}.json")], {}),
        # a run as the UI launches it (a process per step: the code location's multiprocess executor), of the
        # ingest group and its checks from an empty home (benchmarks/ui_run.py)
        "ui-run": ([sys.executable, "-m", "benchmarks.ui_run", "--out", str(work / f"ui-run-{tag}.json")],
                   {**env, "EHRXQA_HOME": str(work / f"home-{tag}-ui")}),
        "build": ([EHRXQA, "build"], e2e_env),  # every asset, from an empty home
        "rebuild": ([EHRXQA, "build", "--changed"], e2e_env),  # nothing changed: runs nothing
        # a gold label, a silver label, a lab name edited: build --changed, each against the build stage
        "edit": ([sys.executable, "-m", "benchmarks.run", "--edit-home", e2e_env["EHRXQA_HOME"], "--edit-source",
                  str(source), "--edit-out", str(work / f"edits-{tag}.json")], cxr_env),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--scales", default="demo,full")
    p.add_argument("--stages",
                   default="generate,scene-graph-zip,ingest,cxr,vqa,ehr_db,ehrxqa,vqa_model,vqa_decode,ui-run,build,"
                           "rebuild,edit")
    p.add_argument("--e2e-scales", default="demo", help="scales at which the build and rebuild stages run")
    p.add_argument("--workdir", default=str(ROOT / "data" / "bench"))
    p.add_argument("--ehrxqa-caps", default="80,10", help="per-template TRAIN_VALID,TEST caps of stage ehrxqa")
    p.add_argument("--ehrxqa-home", help=argparse.SUPPRESS)  # set: run the ehrxqa stage's body (child process)
    p.add_argument("--ehrxqa-out", help=argparse.SUPPRESS)
    p.add_argument("--scene-graph-zip", help=argparse.SUPPRESS)  # set: run the scene-graph-zip stage's body
    p.add_argument("--scene-graph-out", help=argparse.SUPPRESS)
    p.add_argument("--edit-home", help=argparse.SUPPRESS)  # set: run the edit stage's body (child process)
    p.add_argument("--edit-source", help=argparse.SUPPRESS)
    p.add_argument("--edit-out", help=argparse.SUPPRESS)
    p.add_argument("--full-build-seconds", type=float, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.edit_home:
        result = edit_bench(Path(args.edit_home), Path(args.edit_source), args.full_build_seconds)
        Path(args.edit_out).write_text(json.dumps(result, indent=2) + "\n")
        return 0 if all(r["exit_code"] == 0 and r["restore_exit_code"] == 0 for r in result) else 1
    if args.scene_graph_zip:
        out = Path(args.scene_graph_out)
        result = scene_graph_bench(Path(args.scene_graph_zip), out.with_name(out.stem + "-tabular"))
        print(json.dumps(result, indent=2), flush=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
        return 0
    if args.ehrxqa_home:
        caps = tuple(int(x) for x in args.ehrxqa_caps.split(","))
        result = ehrxqa_bench(Path(args.ehrxqa_home), caps)
        print(json.dumps(result, indent=2), flush=True)
        Path(args.ehrxqa_out).write_text(json.dumps(result, indent=2) + "\n")
        return 0
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    results = []
    for scale in args.scales.split(","):
        if "ingest" in args.stages.split(","):
            shutil.rmtree(work / f"home-{scale.replace(':', '-')}", ignore_errors=True)
        for name, (cmd, env) in stages(scale, work, args.ehrxqa_caps).items():
            if name not in args.stages.split(",") or (name in E2E and scale not in args.e2e_scales.split(",")):
                continue
            if name in ("build", "ui-run"):  # from an empty home
                shutil.rmtree(env["EHRXQA_HOME"], ignore_errors=True)
            full = [r["seconds"] for r in results if r["scale"] == scale and r["stage"] == "build"]
            if name == "edit" and full:
                cmd = [*cmd, "--full-build-seconds", str(full[0])]
            samples = [] if name == "build" else None
            wall, rss, code = run_stage(cmd, env, samples)
            results.append({"scale": scale, "stage": name, "seconds": round(wall, 1),
                            "peak_rss_gib": round(rss, 2), "exit_code": code})
            print(f"{scale:>5} {name:<15} {wall:8.1f} s {rss:6.2f} GiB  exit {code}", flush=True)
            if samples is not None:
                out = work / f"build-steps-{scale.replace(':', '-')}.json"
                table = build_step_report(Path(env["EHRXQA_HOME"]), samples, time.time(), out)
                results[-1]["steps_file"] = str(out)
                print("\n".join(steps.step_lines(table)), flush=True)
    (work / "bench-results.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0 if all(r["exit_code"] == 0 for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
