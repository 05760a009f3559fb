"""`make bench`: wall time and peak memory of each pipeline stage, one child process per stage.

Peak memory is the child's maximum resident set size (wait4 rusage), so each stage is measured alone.
Targets (design.md section 4) are on a 2-core, 24 GiB machine. Usage:
    python -m benchmarks.run [--scales demo,full] [--stages generate,ingest] [--workdir DIR]
Results are printed as a table and written to <workdir>/bench-results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EHRXQA = str(Path(sys.executable).with_name("ehrxqa"))


def run_stage(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """Run a command; return (wall seconds, peak RSS in GiB, exit code)."""
    start = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, {**os.environ, **env})
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    return wall, usage.ru_maxrss / (1024 ** 2), os.waitstatus_to_exitcode(status)


def stages(scale: str, work: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    source, home = work / f"source-{scale}", work / f"home-{scale}"
    gen = [EHRXQA, "demo-source", str(source), "--scale", scale, "--force"]
    env = {"EHRXQA_SOURCE_ROOT": str(source), "EHRXQA_HOME": str(home)}
    # Metadata-only full sources have no JPEGs; demo sources do.
    cxr_env = {**env, "EHRXQA_CHECK_IMAGES": "0" if scale == "full" else "1"}
    return {
        "generate": (gen, {}),
        "ingest": ([EHRXQA, "build", "--select", "group:sources or group:ingest"], env),
        # design.md target: cohort + labels + splits <= 60 s and <= 8 GiB at full scale on 2 cores
        "cxr": ([EHRXQA, "build", "--select", "group:cxr_cohort or group:cxr_labels or group:splits"], cxr_env),
        "vqa": ([EHRXQA, "build", "--select", "group:mimic_cxr_vqa or group:release"], cxr_env),
        "ehr_db": ([EHRXQA, "build", "--select", "group:ehr_db"], cxr_env),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--scales", default="demo,full")
    p.add_argument("--stages", default="generate,ingest,cxr,vqa,ehr_db")
    p.add_argument("--workdir", default=str(ROOT / "data" / "bench"))
    args = p.parse_args(argv)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    results = []
    for scale in args.scales.split(","):
        if "ingest" in args.stages.split(","):
            shutil.rmtree(work / f"home-{scale}", ignore_errors=True)
        for name, (cmd, env) in stages(scale, work).items():
            if name not in args.stages.split(","):
                continue
            wall, rss, code = run_stage(cmd, env)
            results.append({"scale": scale, "stage": name, "seconds": round(wall, 1),
                            "peak_rss_gib": round(rss, 2), "exit_code": code})
            print(f"{scale:>5} {name:<10} {wall:8.1f} s {rss:6.2f} GiB  exit {code}", flush=True)
    (work / "bench-results.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0 if all(r["exit_code"] == 0 for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
