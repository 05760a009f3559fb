"""The paper's paraphrase prompts (Figure B1: MIMIC-CXR-VQA, Figure C4: EHRXQA), versioned.

The texts are the paper's, with its Jinja syntax ({{num_of_paraphrase}}, {% if content_type in [...] %}),
rendered with jinja2. Two additions, both part of ``PROMPT_VERSION``:
- EHRXQA templates with EHRSQL tense slots (``has_verb`` ...) get one more sentence asking to keep them
  (the paper's C4 predates those slots in this catalog; without it every paraphrase would drop them);
- nothing else: the answer is parsed from the model's numbered list (``llm.parse_paraphrases``).

``PROMPT_VERSION`` is part of the candidates asset's code version and of the LLM cache key: editing a
prompt must bump it, which marks the paraphrase assets unsynced and makes the next run ask again.
"""

from __future__ import annotations

import jinja2

from ehrxqa_pipeline.paraphrase.placeholders import placeholder_set
from ehrxqa_pipeline.paraphrase.templates import MIMIC_CXR_VQA, ParaTemplate

PROMPT_VERSION = "paper-b1-c4.1"
PAPER_COUNTS = {"mimic_cxr_vqa": 30, "ehrxqa": 15}  # candidates asked per template (paper B.2.2, C.3.4)

_HEAD = ("You are an AI paraphraser for the medical domain (radiology).\n"
         "Write {{num_of_paraphrase}} paraphrases for the given question without changing its original meaning. "
         "The paraphrases must adhere to the following conditions.\n\nConditions:\n")
_TAIL = "\nQuestion: {{question_template}}\nParaphrased questions:"
_SAME = ("The answer to the paraphrased question should be identical to the answer to the original question. "
         "Maintain the placeholders in the format of ${placeholder} (e.g., ${object}, ${attribute}, ${category}, "
         "${attribute_1}, ${object_1}). ")
_ABN = ("The object-related placeholder will be replaced with the actual anatomical locations found in the image, "
        "such as 'left lung' or 'cardiac silhouette'. The attribute-related placeholder will be replaced with "
        "specific abnormalities that can be found in chest X-ray images, such as 'lung opacity' or 'lung cancer'. "
        "The category-related placeholder will be replaced with the corresponding category of the attribute, such "
        "as 'anatomical finding', 'disease', or 'tubes/lines'. Abnormality is a superset of four categories: "
        "anatomical finding, disease, device, and tubes/lines.")

MIMIC_CXR_VQA_PROMPT = _HEAD + (
    "The paraphrased question should be similar to real-world questions asked by a medical doctor when given a "
    "chest x-ray image. Keep the paraphrased question concise and straightforward. " + _SAME +
    "Ensure that the paraphrased question maintains these placeholders. "
    "{% if content_type in ['anatomy', 'attribute', 'condition', 'abnormality'] %}" + _ABN +
    "{% if semantic_type == 'verify' %} Formulate the paraphrased question so it can be answered with a \"yes\" "
    "or \"no\" response."
    "{% elif semantic_type == 'query' %} Formulate the paraphrased questions to elicit multiple possible answers."
    "{% elif semantic_type == 'choose' %} The paraphrased questions should include 'which' (and ',') and be "
    "answerable by selecting one of two placeholders.{% else %}{% endif %}"
    "{% else %}The viewpos-related placeholder will be replaced with the actual view position of the chest x-ray "
    "image, such as 'PA' or 'AP'. The gender-related placeholder will be replaced with the gender of the patient "
    "in the chest x-ray image, such as 'M' or 'F'. We define the cardiothoracic ratio (CTR) as the ratio of the "
    "width of the heart to the width of the thorax. We define the mediastinal thoracic ratio (MTR) as the ratio "
    "of the width of the mediastinum to the width of the thorax.{% endif %}") + _TAIL

EHRXQA_PROMPT = _HEAD + (
    "The paraphrased question should be similar to real-world questions asked by a medical doctor when given the "
    "EHR database. Keep the paraphrased question concise and straightforward. " + _SAME +
    "Maintain the placeholders in the format of [placeholder] (e.g., [time_filter_exact1], [time_filter_exact2], "
    "[time_filter_global1], [time_filter_global2]). Ensure that the paraphrased question maintains these "
    "placeholders. "
    "{% if tense_slots %}Maintain the tense placeholders written as a word ending in _verb (here: "
    "{{tense_slots}}); each will be replaced with the verb in the right tense, such as 'has' or 'had'. {% endif %}"
    "The unit-related placeholder will be replaced with the corresponding time expression, such as 'days, "
    "'hours'. The gender-related placeholder will be replaced with the corresponding gender expression, such as "
    "'male' or 'female'. The age-related placeholder will be replaced with the corresponding age expression, "
    "such as '30-40'. The exact time-related placeholder will be replaced with the corresponding time expression, "
    "such as 'first', 'second', or 'last'. The global time-related placeholder will be replaced with the "
    "corresponding time expression, such as 'on the first hospital visit', 'last year', or 'this month'. The "
    "procedure-related placeholder will be replaced with the specific procedure name, such as 'temporary "
    "tracheostomy' or 'venous cath nec'. The diagnosis-related placeholder will be replaced with the specific "
    "name of the diagnosis, such as 'PEG Insertion' or 'Invasive Ventilation'. The drug-related placeholder will "
    "be replaced with the specific medication name, such as 'danazol' or 'aspirin'. The comparison-related "
    "placeholder will be replaced with the corresponding comparison expression, such as 'still present' or "
    "'newly detected'. " + _ABN + " Formulate the paraphrased questions to be answerable with "
    "{{answer_type}}.") + _TAIL

_ENV = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=False)
_COMPILED = {MIMIC_CXR_VQA: _ENV.from_string(MIMIC_CXR_VQA_PROMPT), "ehrxqa": _ENV.from_string(EHRXQA_PROMPT)}


def build_prompt(template: ParaTemplate, count: int) -> str:
    """The prompt asking for ``count`` paraphrases of one template (only the template text goes in)."""
    tense = sorted(p for p in placeholder_set(template.text) if p.endswith("_verb"))
    return _COMPILED[template.dataset].render(
        num_of_paraphrase=count, question_template=template.text, content_type=template.content_type,
        semantic_type=template.semantic_type, answer_type=template.answer_type, tense_slots=", ".join(tense))


def scaffold_texts() -> tuple[str, ...]:
    """The fixed prompt wording (public, from the paper): words in it are not record values."""
    return MIMIC_CXR_VQA_PROMPT, EHRXQA_PROMPT
