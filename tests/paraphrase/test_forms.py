"""Question forms: every template keeps its own form; planted wrong forms are caught."""

import pytest

from ehrxqa_pipeline.paraphrase.forms import form_problem, options, template_form
from ehrxqa_pipeline.paraphrase.templates import all_templates, vqa_templates


def test_every_template_passes_its_own_form():
    for t in all_templates():
        assert form_problem(t.form, t.text, t.options) is None, t.template_id


def test_mimic_forms_follow_semantic_types():
    for t in vqa_templates():
        want = {"verify": {"verify"}, "choose": {"choose"}, "query": {"list", "what"}}[t.semantic_type]
        assert t.form in want, t.key


def test_ehrxqa_forms():
    forms = {t.key: t.form for t in all_templates() if t.dataset == "ehrxqa"}
    assert forms["1000"] == "verify" and forms["3000"] == "count" and forms["3100"] == "when"
    assert forms["4100"] == "list" and forms["1009"] == "choose"


@pytest.mark.parametrize("form,text,opts,ok", [
    ("verify", "Can you see any ${category} in the ${object}?", (), True),
    ("verify", "Which ${category} are in the ${object}?", (), False),
    ("verify", "List all ${category} in the ${object}.", (), False),
    ("verify", "Could you list the ${category} in the ${object}?", (), False),
    ("choose", "Which ${category} relates to the ${object}: ${attribute_1} or ${attribute_2}?",
     ("${attribute_1}", "${attribute_2}"), True),
    ("choose", "Is ${attribute_1} related to the ${object}?", ("${attribute_1}", "${attribute_2}"), False),
    ("list", "What are all the ${category} in the ${object}?", (), True),
    ("list", "Could you name every ${category} in the ${object}?", (), True),
    ("list", "Are there any ${category} in the ${object}?", (), False),
    ("count", "How many patients had ${attribute}?", (), True),
    ("count", "Which patients had ${attribute}?", (), False),
    ("when", "On what date did patient {patient_id} have ${attribute}?", (), True),
    ("what", "Which projection is this image?", (), True),
    ("what", "Is this a PA image?", (), False)])
def test_form_rules(form, text, opts, ok):
    assert (form_problem(form, text, opts) is None) == ok


def test_options_and_template_form():
    assert options("Which view is in this image, AP or PA?") == ("AP", "PA")
    assert template_form("What is the gender of this patient, male or female?") == "choose"
    assert template_form("What is the gender of this patient?") == "what"
