"""LabelModule / ReferenceModule (predictions equal to the gold labels answer every hand-made MIMIC-CXR-VQA
row right; one flipped prediction changes exactly the rows that depend on it) and the OpenAI-compatible
vision module against a local scripted server (loopback only; a remote host is refused before any request)."""

from __future__ import annotations

import base64

import polars as pl
import pytest

from ehrxqa_pipeline.questions.neuralsql import ImageRef, OracleModule
from ehrxqa_pipeline.vqa.metrics import accuracy
from ehrxqa_pipeline.vqa.modules import (ALLOW_HOSTS, HostNotAllowedError, LabelModule, OpenAIVisionModule,
                                         ReferenceModule, answer_mimic_cxr_vqa, parse_reply, reference_labels)
from tests.paraphrase.server import ChatServer, Reply, completion
from tests.vqa.helpers_scoring import IMAGES, PAIRS, QUESTIONS, gold_labels, predictions

GOLD = QUESTIONS["answer"].to_list()


def test_hand_answers_are_the_programs_answers():
    assert answer_mimic_cxr_vqa(gold_labels(), QUESTIONS) == GOLD


def test_reference_equal_to_gold_scores_100_percent():
    ref = ReferenceModule(predictions(), PAIRS, IMAGES)
    assert ref.name == "reference" and isinstance(ref, LabelModule)
    got = answer_mimic_cxr_vqa(ref, QUESTIONS)
    assert got == GOLD and accuracy(got, GOLD) == 1.0


def test_one_flipped_prediction_changes_exactly_the_dependent_rows():
    got = answer_mimic_cxr_vqa(ReferenceModule(predictions(flip={("img12", "right lung", "pleural effusion")}),
                                               PAIRS, IMAGES), QUESTIONS)
    changed = {i: got[i] for i in range(len(GOLD)) if got[i] != GOLD[i]}
    # row 0 (is there effusion in the right lung) yes -> no; row 2 (anatomical findings in the right lung) and
    # row 3 (locations of effusion) lose it; row 5 (any abnormality) still has the opacity and the PICC.
    assert changed == {0: ["no"], 2: [], 3: []}
    got = answer_mimic_cxr_vqa(ReferenceModule(predictions(pa_flip={"img12"}), PAIRS, IMAGES), QUESTIONS)
    assert {i: got[i] for i in range(len(GOLD)) if got[i] != GOLD[i]} == {6: ["ap"]}


def test_threshold_decides_positives():
    preds = predictions(probs={("img12", "left lung", "pleural effusion"): 0.6})
    assert answer_mimic_cxr_vqa(ReferenceModule(preds, PAIRS, IMAGES, threshold=0.5), QUESTIONS)[1] == ["yes"]
    assert answer_mimic_cxr_vqa(ReferenceModule(preds, PAIRS, IMAGES, threshold=0.7), QUESTIONS)[1] == ["no"]


def test_reference_labels_view_gender_ratios_and_missing_images():
    preds = predictions()
    preds = type(preds)(preds.relations, preds.images.with_columns(
        p_male=pl.when(pl.col("image_id") == "img21").then(0.2).otherwise("p_male"),  # patient 2 predicted F
        ctr=pl.when(pl.col("image_id") == "img12").then(None).otherwise("ctr")).filter(pl.col("image_id") != "img31"))
    labels = reference_labels(preds, PAIRS, IMAGES)
    img = {r["image_id"]: r for r in labels.images.iter_rows(named=True)}
    assert set(img) == {"img11", "img12", "img13", "img21", "img22"}  # img31 has no predictions
    assert img["img11"]["view_position"] == "AP" and img["img12"]["view_position"] == "PA"
    assert img["img21"]["gender"] == "F" and img["img22"]["gender"] == "M" and img["img11"]["gender"] == "F"
    assert img["img12"]["ctr"] is None and img["img13"]["ctr"] == 0.56
    # batch: the ct_ratio row of img12 (no ratio now) abstains; module: same, and unknown images abstain
    assert answer_mimic_cxr_vqa(labels, QUESTIONS)[8] is None
    m = LabelModule(labels, "reference")
    refs = [ImageRef(12, "img12", 1), ImageRef(31, "img31", 3), ImageRef(12, "img12", 1), ImageRef(13, "img13", 1)]
    qs = ["Is there pleural effusion in the right lung?", "is there pleural effusion in the right lung?",
          "is the width of the cardiac silhouette wider than 1/2 of the thorax width?",
          "list all anatomical locations related to pleural effusion."]
    assert m(refs, qs) == [True, None, None, ["right lung"]]


def test_oracle_shares_the_label_module():
    assert issubclass(OracleModule, LabelModule)


# -- OpenAI-compatible vision endpoint -----------------------------------------------------------------
JPEG = b"\xff\xd8\xff\xe0 phantom jpeg bytes \xff\xd9"


@pytest.fixture
def image(tmp_path):
    path = tmp_path / "p10" / "p10" / "s12" / "img12.jpg"
    path.parent.mkdir(parents=True)
    path.write_bytes(JPEG)
    return ImageRef(12, "img12", 10, path)


def test_parse_reply():
    assert parse_reply("Yes.") is True and parse_reply(" no ") is False
    assert parse_reply("left lung, Right Lung") == ["left lung", "right lung"] and parse_reply("None") == []
    for bad in (None, "", "  ", "yes, there is an effusion", "The image shows a large effusion in the lower left lung"):
        assert parse_reply(bad) is None, bad


def test_vision_module_sends_image_and_question_and_parses(image):
    seen = []

    def reply(text):
        def step(content):
            seen.append(content)
            return completion(text)
        return step

    script = [reply("Yes."), reply("left lung, right lung"), reply("none"),
              Reply(200, b"this is not json"), completion(""),
              completion("It is hard to say what this image shows without more clinical context")]
    with ChatServer(script) as server:
        m = OpenAIVisionModule(server.base_url, "test-model", concurrency=1)
        got = m([image] * 6, ["is there pleural effusion in the right lung?", "list all locations.", "list all x.",
                              "q4", "q5", "q6"])
        assert got[:3] == [True, ["left lung", "right lung"], []]
        assert got[3:] == [None, None, None]  # malformed replies abstain
        assert len(server.requests) == 6
    assert m.stats["requests"] == 6 and m.stats["answered"] == 3
    assert m.stats["malformed"] + m.stats["errors"] == 3 and m.stats["malformed"] == 2  # "" and prose
    text, img = seen[0]
    assert text == {"type": "text", "text": "is there pleural effusion in the right lung?"}
    prefix = "data:image/jpeg;base64,"
    assert img["type"] == "image_url" and img["image_url"]["url"].startswith(prefix)
    assert base64.b64decode(img["image_url"]["url"][len(prefix):]) == JPEG


def test_vision_module_abstains_without_an_image_and_sends_nothing():
    with ChatServer([completion("yes")]) as server:
        m = OpenAIVisionModule(server.base_url, "test-model")
        assert m([ImageRef(1, "x", 10, None)], ["is there x?"]) == [None]
        assert server.requests == [] and m.stats["no_image"] == 1


def test_remote_host_is_refused_before_any_request(monkeypatch):
    from resources.device import VqaDevice

    monkeypatch.setenv(ALLOW_HOSTS, "vqa.example.com")  # the library never reads it: loopback only by default
    with pytest.raises(HostNotAllowedError, match=ALLOW_HOSTS) as e:
        OpenAIVisionModule("https://vqa.example.com/v1", "gpt-vision", api_key="k")
    assert "vqa.example.com" in str(e.value) and "data use agreement" in str(e.value)
    with pytest.raises(HostNotAllowedError):
        OpenAIVisionModule("http://10.0.0.5:8000/v1", "m", allow_hosts=("localhost",))
    monkeypatch.setenv(ALLOW_HOSTS, "vqa.example.com, other.example.org")  # the resource reads it
    vision = VqaDevice(vision_base_url="https://vqa.example.com/v1").vision()
    assert vision["allow_hosts"] == ("127.0.0.1", "::1", "localhost", "other.example.org", "vqa.example.com")
    assert OpenAIVisionModule(**vision).name == "openai_vision"  # allowed; nothing sent


def test_an_explicit_allow_list_is_never_widened_by_the_environment(monkeypatch):
    """Issue 16 point 4 (privacy): before, VqaDevice(allow_hosts="127.0.0.1") with EHRXQA_VQA_ALLOW_HOSTS naming
    another host allowed both, because the module added the environment's hosts to the explicit value."""
    from resources.device import VqaDevice

    monkeypatch.setenv(ALLOW_HOSTS, "api.example.com")
    device = VqaDevice(allow_hosts="127.0.0.1", vision_base_url="https://api.example.com/v1")
    assert device.hosts() == ("127.0.0.1",) and device.vision()["allow_hosts"] == ("127.0.0.1",)
    with pytest.raises(HostNotAllowedError, match="api.example.com"):
        OpenAIVisionModule(**device.vision())
    with pytest.raises(HostNotAllowedError):
        OpenAIVisionModule("https://api.example.com/v1", "m", allow_hosts=("127.0.0.1",))
    # with nothing explicit, the environment adds to loopback (the documented default)
    assert set(VqaDevice().hosts()) == {"127.0.0.1", "localhost", "::1", "api.example.com"}
    assert OpenAIVisionModule("https://api.example.com/v1", "m", allow_hosts=VqaDevice().hosts()).name == "openai_vision"


def test_vision_module_answers_mimic_rows(tmp_path):
    root = tmp_path / "files"
    for row in IMAGES.iter_rows(named=True):
        (root / row["image_path"]).parent.mkdir(parents=True, exist_ok=True)
        (root / row["image_path"]).write_bytes(JPEG)
    with ChatServer(default=completion("yes")) as server:
        m = OpenAIVisionModule(server.base_url, "test-model")
        got = answer_mimic_cxr_vqa(m, QUESTIONS.head(3), images=IMAGES, images_root=root)
        assert len(server.requests) == 3
    assert got == [["yes"], ["yes"], ["yes"]]
    with pytest.raises(ValueError, match="pass images"):
        answer_mimic_cxr_vqa(m, QUESTIONS.head(1))
