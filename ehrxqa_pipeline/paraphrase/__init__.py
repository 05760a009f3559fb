"""Paraphrase pools for MIMIC-CXR-VQA and EHRXQA (paper B.2.2 and C.3.4). Pure library code, no Dagster.

templates -> prompts (``prompts``, privacy-checked by ``privacy``) -> candidates (``generate``: an LLM through
``llm`` with the ``cache``, or the offline ``rules``) -> machine validation with named reasons
(``validate``, meaning measured by ``embed``) -> human review (``review``, paraphrases/reviewed.csv) ->
pools split 3:1 by k-means over edit distance (``split``, ``pools``) -> applied to records (``apply``).
Submodules are imported on use (the embedding model and the openai client load lazily).
"""

from ehrxqa_pipeline.paraphrase.apply import PhrasingError, choose_ehrxqa_phrasings, choose_vqa_phrasings
from ehrxqa_pipeline.paraphrase.prompts import PROMPT_VERSION
from ehrxqa_pipeline.paraphrase.templates import EHRXQA, MIMIC_CXR_VQA, ParaTemplate, all_templates

__all__ = ["EHRXQA", "MIMIC_CXR_VQA", "PROMPT_VERSION", "ParaTemplate", "PhrasingError", "all_templates",
           "choose_ehrxqa_phrasings", "choose_vqa_phrasings"]
