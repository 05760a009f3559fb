"""The out-of-process VQA worker: its tasks (ehrxqa_pipeline.vqa.worker) and their Dagster Pipes entry point
(ehrxqa_pipeline.cli.vqa_worker).

Its round trip through Dagster (metadata, the ``learned`` check, the predictions it writes) is exercised by
the whole build of tests/test_end_to_end.py, and that it and the library it drives import no Dagster but
dagster-pipes by tests/test_deploy.py (with the slim image's package list); here, its metadata values and
the refusal of an unknown task.
"""

from __future__ import annotations

import logging

import pytest


def test_metadata_values_go_through_pipes_as_json_or_plain():
    from ehrxqa_pipeline.cli.vqa_worker import _value

    assert _value({"a": 1}) == {"raw_value": {"a": 1}, "type": "json"}
    assert _value([{"epoch": 1}]) == {"raw_value": [{"epoch": 1}], "type": "json"}
    assert _value(0.5) == 0.5 and _value("cpu") == "cpu" and _value(None) is None


def test_an_unknown_task_is_refused_naming_it(monkeypatch):
    import dagster_pipes

    from ehrxqa_pipeline.cli import vqa_worker

    class Pipes:
        extras = {"task": "evaluate"}
        log = logging.getLogger("vqa_worker_test")

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(dagster_pipes, "open_dagster_pipes", lambda: Pipes())
    with pytest.raises(ValueError, match="unknown VQA worker task 'evaluate'"):
        vqa_worker.main()
