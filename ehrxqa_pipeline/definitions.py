"""The one Definitions object of the code location: it only assembles."""

from __future__ import annotations

import dagster as dg

from assets.contract_checks import CONTRACT_CHECKS
from assets.cxr_cohort import CXR_COHORT_ASSETS
from assets.ehr_db import EHR_DB_ASSETS
from assets.ehrxqa import EHRXQA_ASSETS, EHRXQA_CHECKS
from assets.cxr_labels import CXR_LABEL_ASSETS, CXR_LABEL_CHECKS
from assets.mimic_cxr_vqa import MIMIC_CXR_VQA_ASSETS
from assets.paraphrase import PARAPHRASE_ASSETS
from assets.splits import SPLIT_ASSETS
from assets.ingest import INGEST_ASSETS
from assets.sources import observe_sources
from resources import default_resources

# Within one run, steps that write the DuckDB warehouse go one at a time (DuckDB has a single writer).
EXECUTOR = dg.multiprocess_executor.configured({
    "max_concurrent": 2,
    "tag_concurrency_limits": [{"key": "ehrxqa/warehouse", "value": "write", "limit": 1}],
})

weekly_rebuild = dg.ScheduleDefinition(
    name="weekly_rebuild", target=dg.AssetSelection.all(), cron_schedule="0 3 * * 1",
    execution_timezone="UTC", default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Rebuild every asset from the current sources each Monday 03:00 UTC.")

automation_sensor = dg.AutomationConditionSensorDefinition(
    "ehrxqa_automation", target=dg.AssetSelection.all(include_sources=True),
    default_status=dg.DefaultSensorStatus.RUNNING, minimum_interval_seconds=60,
    description="Observes the sources every 15 minutes and re-materializes only what a change touched.")

defs = dg.Definitions(
    assets=[observe_sources, *INGEST_ASSETS, *CXR_COHORT_ASSETS, *CXR_LABEL_ASSETS, *SPLIT_ASSETS,
            *MIMIC_CXR_VQA_ASSETS, *EHR_DB_ASSETS, *EHRXQA_ASSETS, *PARAPHRASE_ASSETS],
    asset_checks=[*CONTRACT_CHECKS, *CXR_LABEL_CHECKS, *EHRXQA_CHECKS],
    schedules=[weekly_rebuild],
    sensors=[automation_sensor],
    resources=default_resources(),
    executor=EXECUTOR,
)
