"""The templates to paraphrase, from both catalogs, in one shape.

MIMIC-CXR-VQA: the 48 templates of ``questions.mimic_cxr_vqa.templates`` (id ``mimic_cxr_vqa/<key>``).
EHRXQA: the image and image+table templates of ``questions.ehrxqa.CATALOG`` (id ``ehrxqa/<index>``).
The paper paraphrased those with GPT-4 and took EHRSQL's machine paraphrases for the table-only templates,
so table-only scopes are left out here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ehrxqa_pipeline.paraphrase.forms import options, template_form
from ehrxqa_pipeline.paraphrase.placeholders import placeholder_set

MIMIC_CXR_VQA = "mimic_cxr_vqa"
EHRXQA = "ehrxqa"
DATASETS = (MIMIC_CXR_VQA, EHRXQA)
# the paper's prompt wording for the presence content type (the published pre-release CSV called it "condition")
_PROMPT_CONTENT_TYPE = {"presence": "condition"}
ANSWER_TYPES = {"verify": "'yes' or 'no'", "choose": "one of the two options given in the question",
                "list": "a list of items", "what": "a single value", "count": "a single number",
                "when": "a date and time"}


@dataclass(frozen=True)
class ParaTemplate:
    """One template to paraphrase."""

    template_id: str  # "mimic_cxr_vqa/base_1", "ehrxqa/1000"
    dataset: str
    key: str  # the catalog's key: "base_1" or "1000"
    text: str
    form: str  # forms.FORMS
    content_type: str = ""  # MIMIC-CXR-VQA content type, as the paper's prompt names it
    semantic_type: str = ""  # MIMIC-CXR-VQA semantic type
    scope: str = ""  # EHRXQA scope

    @property
    def placeholders(self) -> frozenset[str]:
        return placeholder_set(self.text)

    @property
    def options(self) -> tuple[str, ...]:
        return options(self.text) if self.form == "choose" else ()

    @property
    def answer_type(self) -> str:
        return ANSWER_TYPES[self.form]


def vqa_templates() -> tuple[ParaTemplate, ...]:
    from ehrxqa_pipeline.questions.mimic_cxr_vqa.templates import TEMPLATES

    return tuple(ParaTemplate(f"{MIMIC_CXR_VQA}/{t.key}", MIMIC_CXR_VQA, t.key, t.text, template_form(t.text),
                              _PROMPT_CONTENT_TYPE.get(t.content_type, t.content_type), t.semantic_type)
                 for t in TEMPLATES)


def ehrxqa_templates() -> tuple[ParaTemplate, ...]:
    from ehrxqa_pipeline.questions.ehrxqa import CATALOG

    return tuple(ParaTemplate(f"{EHRXQA}/{t.index}", EHRXQA, str(t.index), t.text, template_form(t.text),
                              scope=t.scope)
                 for t in sorted(CATALOG, key=lambda t: t.index) if not t.scope.startswith("TABLE"))


def all_templates() -> tuple[ParaTemplate, ...]:
    return vqa_templates() + ehrxqa_templates()
