"""Code edits replayed tick by tick with the automation conditions, on a copy of the full build of the small
synthetic source that tests/test_pipeline.py starts from (tests/pipeline_graph.py: ``built``), in this order: a
prompt version edit, a code version bump, and a failed blocking check that stops everything downstream and
leaves the release untouched. Each re-runs only what reads the edited code. In a file of their own so that an
xdist worker runs them while another runs the data edits of tests/test_pipeline.py (the suite's critical path);
the build is made once for both (``pristine_build``)."""

import dagster as dg
import pytest

from ehrxqa_pipeline import definitions
from ehrxqa_pipeline.cli.build import build
from ehrxqa_pipeline.sources.readers import resolve
from tests.pipeline_graph import (TEST_DEFS, K, built, cascade, children, descendants, observe,  # noqa: F401
                                  release_files, requested, with_code_versions)
from tests.textfiles import edit

pytestmark = pytest.mark.slow  # whole-graph builds: not in `make test-fast`


def test_prompt_version_edit_reruns_only_paraphrasing_and_after(built, monkeypatch):
    """PROMPT_VERSION reaches Dagster through the code versions of paraphrase/prompts and /candidates (and the
    prompts' content): editing it is replayed here as those code versions changing."""
    import assets.paraphrase as para

    settings, instance, *_ = built
    baseline = dg.evaluate_automation_conditions(defs=TEST_DEFS, instance=instance)
    old, new = para.PROMPT_VERSION, para.PROMPT_VERSION + "-edited"
    monkeypatch.setattr(para, "PROMPT_VERSION", new)  # the prompts table records the version it was made with
    edited = with_code_versions(
        lambda key, cv: cv.replace(old, new) if key in (para.PROMPTS_KEY, para.CANDIDATES_KEY) else cv)
    graph = edited.resolve_asset_graph()
    assert graph.get(para.PROMPTS_KEY).code_version.endswith(new)
    ticks, _, _ = cascade(instance, settings, baseline.cursor, edited)
    assert ticks[0] == {"paraphrase/prompts", "paraphrase/candidates"}
    rerun = set().union(*ticks)
    assert rerun <= {"paraphrase/prompts"} | descendants(para.PROMPTS_KEY)
    _EDITED["defs"] = edited


def test_code_version_bump_reruns_the_asset_then_its_downstream(built):
    settings, instance, *_ = built
    base = _EDITED.get("defs", TEST_DEFS)
    baseline = dg.evaluate_automation_conditions(defs=base, instance=instance)
    assert requested(baseline) == set()
    key = K(["mimic_cxr_vqa", "statistics"])  # three levels above the manifest, and quick to re-run
    bumped = with_code_versions(lambda k, cv: cv + "-bumped" if k == key else cv, base)
    ticks, _, _ = cascade(instance, settings, baseline.cursor, bumped)
    assert ticks[0] == {"mimic_cxr_vqa/statistics"}
    # its data version holds its code version: its children are due next (the manifest waits for the others)
    assert ticks[1] == children({"mimic_cxr_vqa/statistics"}, ticks[0]) - {"release/manifest"}
    assert set().union(*ticks) == {"mimic_cxr_vqa/statistics"} | descendants(key), ticks
    _EDITED["defs"] = bumped


def test_failed_blocking_check_stops_downstream(built, monkeypatch):
    settings, instance, root, *_ = built
    current = _EDITED.get("defs", TEST_DEFS)
    monkeypatch.setattr(definitions, "defs", current)  # the code versions the previous scenarios left
    first = dg.evaluate_automation_conditions(defs=current, instance=instance)
    assert requested(first) == set()
    before = release_files(settings.release_dir)

    # Break the contract: every patient's gender becomes 'U' -> everything quarantined -> blocking failure.
    def breaker(text):
        lines = text.splitlines()
        return "\n".join([lines[0]] + [",".join([l.split(",")[0], "U", *l.split(",")[2:]]) for l in lines[1:]]) + "\n"
    edit(resolve(root, "patients"), breaker)
    observe(settings, instance)
    second = dg.evaluate_automation_conditions(defs=current, instance=instance, cursor=first.cursor)
    assert requested(second) == {"ingest/patients"}
    broken = build(settings, select="key:ingest/patients", instance=instance, defs=current)
    assert ("ingest/patients", "quarantine", False) in {(c[0], c[1], c[2]) for c in broken.checks}
    third = dg.evaluate_automation_conditions(defs=current, instance=instance, cursor=second.cursor)
    assert "downstream/of_patients" in descendants(K(["ingest", "patients"]))
    assert not requested(third) & descendants(K(["ingest", "patients"])), requested(third)
    # `build --changed` runs nothing more, and says so: rc non-zero, every blocked asset named with the check
    stuck = build(settings, instance=instance, defs=current, changed=True)
    assert not stuck.success and "downstream/of_patients" not in stuck.materialized
    assert "downstream/of_patients" in stuck.stale and set(stuck.stale) <= descendants(K(["ingest", "patients"]))
    assert "blocking check ingest/patients:quarantine failed" in stuck.stale["downstream/of_patients"]
    assert all("upstream out of date" in why or "ingest/patients" in why for why in stuck.stale.values())
    assert release_files(settings.release_dir) == before  # the previous release is untouched
    # a manifest assembled now would describe a mixed release: its check warns, the build fails and names why
    mixed = build(settings, select="key:release/manifest", instance=instance, defs=current)
    check = next(c for c in mixed.checks if c[:2] == ("release/manifest", "consistent"))
    assert not check[2] and not mixed.success and "upstream out of date" in mixed.stale["release/manifest"], check


_EDITED: dict = {}  # the definitions the previous scenario left the instance at (code versions changed)

