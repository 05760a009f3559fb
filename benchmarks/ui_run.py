"""Stage ``ui-run`` of `make bench`: a run as the UI launches one, from an empty home on the generated source.

`ehrxqa build` executes its steps in its own process; a run launched from the UI (`ehrxqa dev`, a schedule,
the automation sensor) goes through the code location's multiprocess executor instead, one process per step
(``ehrxqa_pipeline.definitions.EXECUTOR``). This stage materializes the ingest group with its
checks that way (Dagster's ``execute_job`` on the job rebuilt from the code location's module, as a run process
rebuilds it) and reports the wall time, the steps and the seconds per step. The home and the source are those of
the environment (EHRXQA_HOME, EHRXQA_SOURCE_ROOT); its numbers go to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def ui_run() -> dict:
    import dagster as dg

    from ehrxqa_pipeline.cli import prepare_instance
    from ehrxqa_pipeline.cli.dagster_private import reconstructable_job
    from ehrxqa_pipeline.config import Settings
    from ehrxqa_pipeline.definitions import EXECUTOR, defs

    prepare_instance(Settings.resolve())
    graph = defs.resolve_asset_graph()
    selection = sorted(k for k in graph.materializable_asset_keys if k.path[0] == "ingest")
    job = reconstructable_job()
    with dg.DagsterInstance.get() as instance:
        start = time.perf_counter()
        result = dg.execute_job(job, instance=instance, asset_selection=selection)
        wall = time.perf_counter() - start
    steps = sorted({e.step_key for e in result.all_events if e.step_key})
    return {"success": result.success, "seconds": round(wall, 1), "steps": len(steps),
            "seconds_per_step": round(wall / max(len(steps), 1), 2),
            "executor_config": EXECUTOR.apply_config_mapping({}).value["config"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    result = ui_run()
    print(json.dumps(result, indent=2), flush=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["success"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
