"""Settings that keep the test builds of the whole graph small without changing any code path."""

from resources.llm import COUNT_ENV

# Paraphrase candidates per template (the same generator and validator as the paper's 30 / 15, whose sentence
# embeddings cost about 25 s of every build).
FEW_PARAPHRASES = {COUNT_ENV["mimic_cxr_vqa"]: "4", COUNT_ENV["ehrxqa"]: "2"}
