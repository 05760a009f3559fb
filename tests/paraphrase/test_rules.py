"""The offline paraphraser keeps every placeholder and the question form, for every template of both catalogs."""

from ehrxqa_pipeline.paraphrase import rules
from ehrxqa_pipeline.paraphrase.forms import form_problem
from ehrxqa_pipeline.paraphrase.placeholders import placeholder_set, stray_marks
from ehrxqa_pipeline.paraphrase.templates import all_templates


def test_every_rewrite_keeps_placeholders_and_form():
    templates = all_templates()
    assert len([t for t in templates if t.dataset == "mimic_cxr_vqa"]) == 48
    assert len([t for t in templates if t.dataset == "ehrxqa"]) >= 168
    for t in templates:
        variants = rules.variants(t)
        assert variants, t.template_id
        for v in variants:
            assert placeholder_set(v) == t.placeholders and not stray_marks(v), (t.template_id, v)
            assert form_problem(t.form, v, t.options) is None, (t.template_id, v)
            assert v != t.text


def test_draws_are_reproducible_seeded_and_not_near_duplicates():
    from ehrxqa_pipeline.paraphrase.split import loose_words, within_one_edit

    t = next(t for t in all_templates() if t.template_id == "ehrxqa/1000")
    five = rules.paraphrase(t, 5, seed=3)
    assert five == rules.paraphrase(t, 5, seed=3) and len(five) == 5
    assert five != rules.paraphrase(t, 5, seed=4)
    drawn = rules.paraphrase(t, 1000, seed=3)
    assert set(drawn) <= set(rules.variants(t))
    ws = [loose_words(x) for x in [t.text, *drawn]]
    assert not any(within_one_edit(a, b) for i, a in enumerate(ws) for b in ws[i + 1:])


def test_examples():
    by_id = {t.template_id: t for t in all_templates()}
    assert "Does the ${object} look abnormal?" in rules.variants(by_id["mimic_cxr_vqa/base_abn_1"])
    assert "for the study {study_id}, is the ${object} abnormal?" in rules.variants(by_id["ehrxqa/1102"])
