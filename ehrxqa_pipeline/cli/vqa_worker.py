"""``python -m ehrxqa_pipeline.cli.vqa_worker``: one reference-model task (``vqa.worker``) under Dagster Pipes.

The asset that launches it (``assets/vqa_scoring.py``, through ``dagster.PipesSubprocessClient``) passes the
task as the Pipes extras; this process runs it and reports its materialization, data version and the
``learned`` check back, and the epochs into the step's Dagster log. It imports ``dagster_pipes`` only (no
Dagster), so it runs in the slim image ``deploy/vqa-worker.Dockerfile``.
"""

from __future__ import annotations

import json


def _value(v):
    """A Pipes metadata value: JSON for containers, the plain value otherwise."""
    if isinstance(v, (dict, list)):
        return {"raw_value": json.loads(json.dumps(v, default=str)), "type": "json"}
    return v


def main() -> int:
    from dagster_pipes import open_dagster_pipes

    from ehrxqa_pipeline.vqa.worker import LEARNED_CHECK, run_task

    with open_dagster_pipes() as pipes:
        metadata, version, check = run_task(pipes.extras, log=pipes.log.info)
        pipes.report_asset_materialization(metadata={k: _value(v) for k, v in metadata.items()},
                                           data_version=version)
        if check is not None:
            pipes.report_asset_check(LEARNED_CHECK, passed=check["passed"], severity="WARN",
                                     metadata={**{k: _value(v) for k, v in check["metadata"].items()},
                                               "description": check["description"]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
