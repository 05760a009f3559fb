"""The paraphrase assets in Dagster, on a few templates: offline, with a local LLM server, and with a planted
patient id that the blocking privacy check stops before any request."""

import json
from dataclasses import replace

import dagster as dg
import duckdb
import polars as pl
import pytest

import assets.paraphrase as para
from ehrxqa_pipeline.paraphrase import rules
from ehrxqa_pipeline.paraphrase.templates import all_templates
from resources import LLMResource, PipelineConfig, Warehouse
from tests.instances import instance_for_test
from tests.paraphrase.server import ChatServer, completion, question_of

pytestmark = pytest.mark.slow  # Dagster runs of the paraphrase group: not in `make test-fast`

PICK = ("mimic_cxr_vqa/base_1", "mimic_cxr_vqa/base_9", "mimic_cxr_vqa/base_11", "ehrxqa/1000", "ehrxqa/3000",
        "ehrxqa/4100")
PATIENT = 10000032


@pytest.fixture
def home(tmp_path, monkeypatch):
    templates = tuple(t for t in all_templates() if t.template_id in PICK)
    monkeypatch.setattr(para, "all_templates", lambda: templates)
    monkeypatch.setenv("EHRXQA_REVIEWED_PARAPHRASES", str(tmp_path / "reviewed.csv"))
    monkeypatch.delenv("EHRXQA_LLM_BASE_URL", raising=False)
    (tmp_path / "reviewed.csv").write_text("template,text,decision,note\n")
    (tmp_path / "home").mkdir()
    con = duckdb.connect(str(tmp_path / "home" / "warehouse.duckdb"))
    con.execute("CREATE SCHEMA ingest")
    con.execute(f"CREATE TABLE ingest.patients AS SELECT {PATIENT} AS subject_id")
    con.execute("CREATE TABLE ingest.prescriptions AS SELECT 'Heparin Sodium' AS drug")
    con.close()
    return tmp_path


def _resources(home, llm=None):
    config = PipelineConfig(home=str(home / "home"), seed=0)
    return {"pipeline_config": config, "warehouse": Warehouse(config=config), "llm": llm or LLMResource()}


def _run(home, llm=None, instance=None):
    return dg.materialize(dg.load_assets_from_modules([para]), resources=_resources(home, llm), instance=instance,
                          raise_on_error=False)


def _table(home, name):
    with duckdb.connect(str(home / "home" / "warehouse.duckdb"), read_only=True) as con:
        return con.execute(f"SELECT * FROM paraphrase.{name}").pl()


def test_offline_build(home):
    result = _run(home)
    assert result.success
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks == {"no_record_values": True, "llm_requests_succeeded": True, "placeholders_match_template": True,
                      "train_test_disjoint": True, "every_template_has_phrasings": True}
    cands, pools = _table(home, "candidates"), _table(home, "pools")
    assert set(cands["source"]) == {rules.SOURCE} and set(pools["template_id"]) == set(PICK)
    assert set(pools["side"]) == {"train", "test"}
    stats = json.loads((home / "home" / "release" / "paraphrases" / "statistics.json").read_text())
    assert stats["mimic_cxr_vqa"]["templates"] == 3
    assert stats["ehrxqa"]["paraphrases_per_template"]["paper_mean"] == 10.4
    queue = (home / "home" / "paraphrase" / "review_queue.csv").read_text().splitlines()
    assert queue[0] == "template,text,decision,note" and len(queue) == _table(home, "review").height + 1
    # same inputs, same pools
    first = pools
    assert _run(home).success and _table(home, "pools").equals(first)


def test_review_file_rejection_removes_a_phrasing(home):
    assert _run(home).success
    victim = _table(home, "pools").row(0, named=True)
    (home / "reviewed.csv").write_text(f"template,text,decision,note\n{victim['template_id']},\"{victim['text']}\","
                                       "rejected,test\n")
    assert _run(home).success
    assert victim["text"] not in set(_table(home, "pools").filter(
        pl.col("template_id") == victim["template_id"])["text"])
    assert _table(home, "review").filter(pl.col("decision") == "rejected").height == 1


def test_llm_build_then_cache_hits_send_nothing(home):
    def answer(prompt):
        t = next(t for t in all_templates() if t.text == question_of(prompt))
        return completion("\n".join(f"{i}. {v}" for i, v in enumerate(rules.variants(t)[:6], 1)))

    with ChatServer(default=answer) as server, instance_for_test() as instance:
        llm = LLMResource(base_url=server.base_url, model="test-model", backoff_s=0.01, timeout_s=10)
        assert _run(home, llm, instance).success
        assert len(server.requests) == len(PICK)
        assert all("Question: " in p and str(PATIENT) not in p for p in server.requests)
        meta = instance.get_latest_materialization_event(para.CANDIDATES_KEY).asset_materialization.metadata
        assert meta["requests"].value == len(PICK) and meta["llm/total_tokens"].value == 18 * len(PICK)
        assert set(_table(home, "candidates")["source"]) == {"llm"}
        assert _run(home, llm, instance).success
        assert len(server.requests) == len(PICK)  # second run: all cache hits, no request
        meta = instance.get_latest_materialization_event(para.CANDIDATES_KEY).asset_materialization.metadata
        assert meta["cache_hits"].value == len(PICK) and meta["requests"].value == 0


def test_planted_patient_id_blocks_the_run(home, monkeypatch):
    templates = [t for t in all_templates() if t.template_id in PICK]
    poisoned = replace(templates[0], text=templates[0].text.replace("?", f" of patient {PATIENT}?"))
    monkeypatch.setattr(para, "all_templates", lambda: (poisoned, *templates[1:]))
    with ChatServer(default=completion("1. x")) as server:
        result = _run(home, LLMResource(base_url=server.base_url, model="m"))
    assert not result.success
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks["no_record_values"] is False
    assert server.requests == []  # candidates never ran
    materialized = {e.asset_key for e in result.get_asset_materialization_events()}
    assert para.CANDIDATES_KEY not in materialized and para.POOLS_KEY not in materialized
