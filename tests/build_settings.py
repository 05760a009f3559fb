"""Settings that keep the test builds of the whole graph small without changing any code path."""

from ehrxqa_pipeline.config import ENVIRONMENT

# Paraphrase candidates per template (the same generator and validator as the paper's 30 / 15, whose sentence
# embeddings cost about 25 s of every build).
FEW_PARAPHRASES = {ENVIRONMENT["count_mimic_cxr_vqa"]: "4", ENVIRONMENT["count_ehrxqa"]: "2"}
