"""The privacy guard: record values never reach a prompt; the paper's own wording is not a leak."""

import pytest

from ehrxqa_pipeline.paraphrase.generate import prompts_for
from ehrxqa_pipeline.paraphrase.privacy import PrivacyGuard, PrivacyViolation, ValueSet
from ehrxqa_pipeline.paraphrase.prompts import scaffold_texts
from ehrxqa_pipeline.paraphrase.templates import all_templates

VALUES = ValueSet.of([10000032, 50414267, 27, "Aspirin", "Sodium Chloride 0.9%", "Heparin",
                      "02aa804e-bde0afdd-112c0b34-7bc16630-4e384014", "M", None])


@pytest.fixture(scope="module")
def prompts():
    return prompts_for(all_templates())


def test_every_real_prompt_is_clean(prompts):
    guard = PrivacyGuard(VALUES, exempt=scaffold_texts())
    assert guard.scan_all(prompts) == []
    guard.check(prompts)  # no exception


def test_planted_patient_id_fails(prompts):
    planted = dict(prompts)
    planted["ehrxqa/1000"] = planted["ehrxqa/1000"].replace("{patient_id}", "10000032")
    leaks = PrivacyGuard(VALUES, exempt=scaffold_texts()).scan_all(planted)
    assert [(x.key, x.kind) for x in leaks] == [("ehrxqa/1000", "long_number")]
    with pytest.raises(PrivacyViolation) as err:
        PrivacyGuard(VALUES, exempt=scaffold_texts()).check(planted)
    assert "10000032" not in str(err.value)  # the finding names the prompt and kind, never the value
    assert "ehrxqa/1000: long_number" in str(err.value)


@pytest.mark.parametrize("text,kind", [
    ("Is there ${attribute} on 2105-03-04?", "date"), ("Any study since 03/04/2105?", "date"),
    ("Was it taken at 12:30?", "date"), ("Is patient 27 well?", "record_id"),
    ("Was Sodium Chloride 0.9% given?", "record_value"), ("Was heparin given?", "record_value"),
    ("Show image 02aa804e-bde0afdd-112c0b34-7bc16630-4e384014.", "record_value"),
    ("Is study 50414267 abnormal?", "long_number")])
def test_each_kind_of_value_is_found(text, kind):
    leaks = PrivacyGuard(VALUES, exempt=scaffold_texts()).scan("t", text)
    assert kind in {x.kind for x in leaks}, leaks


def test_scaffold_words_and_short_values_are_not_leaks():
    guard = PrivacyGuard(VALUES, exempt=scaffold_texts())
    # 'aspirin' is an example in the paper's EHRXQA prompt; "M" is too short to scan; 1/2 is template text
    assert guard.scan("t", "such as 'danazol' or 'aspirin'. Is the width wider than 1/2 of the thorax? M") == []
    assert PrivacyGuard(VALUES).scan("t", "such as 'aspirin'")  # without the exemption it is a value
