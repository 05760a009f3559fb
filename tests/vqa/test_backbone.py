"""The optional pretrained backbone (issue 18 point 5, ``vqa.backbone``): its setting, its weights loaded from a
local file only (never downloaded) with the SHA-256 of their bytes, the clear errors of a bad file, the probe
trained beside the reference model in the same worker task without changing it, and its predictions answering
through the reference model's answering code. Random-init torchvision weights stand in for pretrained ones.
Its round trip through Dagster (tables, scores, manifest) is in tests/test_end_to_end.py.

torch (and ``vqa.backbone``, which imports it) is imported inside the tests that use it: at module level,
collecting the suite made every xdist worker import it (2.6 s of each worker's start), whether or not it ran one
of them."""

from __future__ import annotations

import hashlib
from dataclasses import asdict
from pathlib import Path

import duckdb
import polars as pl
import pytest

from ehrxqa_pipeline.config import Environment, SettingError
from tests.vqa.conftest import tiny_config


def _save(state: dict, path: Path) -> Path:
    import torch

    torch.save(state, path)
    return path


def _resnet18() -> dict:
    import torch
    import torchvision

    torch.manual_seed(1)
    return torchvision.models.resnet18(weights=None).state_dict()


@pytest.fixture(scope="module")
def resnet18_file(tmp_path_factory) -> Path:
    return _save(_resnet18(), tmp_path_factory.mktemp("weights") / "resnet18.pt")


@pytest.fixture
def no_download(monkeypatch):
    """Every way torch / torchvision fetch weights, and any socket, raises: a download fails the test."""
    import socket
    import urllib.request

    import torch.hub
    import torchvision.models._api

    def refuse(*args, **kwargs):
        raise AssertionError(f"a download was attempted: {args[:1]}")

    monkeypatch.setattr(torch.hub, "load_state_dict_from_url", refuse)
    monkeypatch.setattr(torch.hub, "download_url_to_file", refuse)
    monkeypatch.setattr(torchvision.models._api.WeightsEnum, "get_state_dict", refuse)
    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)


def test_unset_is_no_backbone_and_a_half_or_wrong_setting_names_the_variable_and_the_fix(resnet18_file):
    assert Environment.read({}).backbone() is None
    env = {"EHRXQA_VQA_BACKBONE": "ResNet18", "EHRXQA_VQA_BACKBONE_WEIGHTS": str(resnet18_file)}
    got = Environment.read(env).backbone()
    assert got == ("resnet18", resnet18_file)
    bad = [({"EHRXQA_VQA_BACKBONE": "resnet18"}, "EHRXQA_VQA_BACKBONE='resnet18' needs EHRXQA_VQA_BACKBONE_WEIGHTS"),
           ({"EHRXQA_VQA_BACKBONE_WEIGHTS": str(resnet18_file)},
            f"EHRXQA_VQA_BACKBONE_WEIGHTS='{resnet18_file}' needs EHRXQA_VQA_BACKBONE: the architecture"),
           ({"EHRXQA_VQA_BACKBONE": "vgg16", "EHRXQA_VQA_BACKBONE_WEIGHTS": str(resnet18_file)},
            "EHRXQA_VQA_BACKBONE='vgg16' is not valid: use one of densenet121, resnet18, resnet50"),
           ({"EHRXQA_VQA_BACKBONE": "resnet18", "EHRXQA_VQA_BACKBONE_WEIGHTS": "/nowhere/w.pt"},
            "EHRXQA_VQA_BACKBONE_WEIGHTS='/nowhere/w.pt': no such file; point it at a local resnet18 state_dict")]
    for env, message in bad:
        with pytest.raises(SettingError) as err:
            Environment.read(env).backbone()
        assert str(err.value).startswith(message), err.value


def test_the_resource_takes_explicit_values_over_the_environment(resnet18_file, monkeypatch):
    from resources import VqaDevice

    monkeypatch.delenv("EHRXQA_VQA_BACKBONE", raising=False)
    monkeypatch.delenv("EHRXQA_VQA_BACKBONE_WEIGHTS", raising=False)
    assert VqaDevice().pretrained() is None
    monkeypatch.setenv("EHRXQA_VQA_BACKBONE", "densenet121")
    monkeypatch.setenv("EHRXQA_VQA_BACKBONE_WEIGHTS", str(resnet18_file))
    assert VqaDevice(backbone="resnet18").pretrained() == {"architecture": "resnet18", "weights": str(resnet18_file)}


def test_weights_load_from_the_file_with_the_sha256_of_its_bytes(resnet18_file, no_download):
    import torch

    from ehrxqa_pipeline.vqa.backbone import PretrainedModel

    model = PretrainedModel(3, 4, "resnet18")
    facts = model.load_backbone(resnet18_file)
    assert facts == {"module": "pretrained_resnet18", "architecture": "resnet18", "weights_file": "resnet18.pt",
                     "weights_sha256": hashlib.sha256(resnet18_file.read_bytes()).hexdigest(),
                     "leakage_risk": "unknown"}
    state, net = _resnet18(), model.crop_net.net
    assert torch.equal(net.layer4[1].conv2.weight, state["layer4.1.conv2.weight"])
    assert torch.equal(net.conv1.weight, state["conv1.weight"].sum(dim=1, keepdim=True))  # grey = 3 x the same
    # frozen: only the heads train, and batch-norm statistics stay the pretrained ones in training mode
    trainable = {n.split(".")[0] for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {"obj_emb", "head", "prior", "image_head"}
    model.train()
    assert not model.crop_net.training and not net.bn1.training and model.head.training
    out = model.forward_objects(torch.randn(5, 1, 32, 32), torch.tensor([0, 1, 2, 0, 1]), torch.zeros(5, 6))
    assert out.shape == (5, 4) and model.forward_images(torch.randn(2, 2, 64, 64)).shape == (2, 2)


def test_torchxrayvision_style_weights_load_and_are_marked_a_leakage_risk(tmp_path, no_download):
    """One-channel stem, a classifier of another size and ``op_threshs``: torchxrayvision's DenseNet state_dict."""
    import torch
    import torchvision

    from ehrxqa_pipeline.vqa.backbone import PretrainedModel

    net = torchvision.models.densenet121(weights=None)
    net.features.conv0 = torch.nn.Conv2d(1, 64, 7, 2, 3, bias=False)
    net.classifier = torch.nn.Linear(1024, 18)
    state = {**net.state_dict(), "op_threshs": torch.rand(18)}
    facts = PretrainedModel(3, 4, "densenet121").load_backbone(_save(state, tmp_path / "xrv.pt"))
    assert facts["leakage_risk"] == "high" and facts["module"] == "pretrained_densenet121"


@pytest.mark.parametrize("case", ["missing", "not_torch", "not_a_state_dict", "other_architecture", "wrong_shape"])
def test_a_file_that_does_not_fit_names_the_variable_the_file_and_the_fix(case, tmp_path, resnet18_file):
    import torch

    from ehrxqa_pipeline.vqa.backbone import PretrainedModel

    path = tmp_path / "w.pt"
    arch = "resnet18"
    if case == "not_torch":
        path.write_text("not weights")
    elif case == "not_a_state_dict":
        _save([1, 2, 3], path)
    elif case == "other_architecture":
        path, arch = resnet18_file, "resnet50"
    elif case == "wrong_shape":
        _save({**_resnet18(), "layer1.0.conv1.weight": torch.zeros(64, 64, 1, 1)}, path)
    expected = {"missing": "no such file", "not_torch": "is not a torch state_dict file",
                "not_a_state_dict": "holds a list, not a state_dict of tensors",
                "other_architecture": "does not fit torchvision's resnet50 (EHRXQA_VQA_BACKBONE): Error(s)",
                "wrong_shape": "size mismatch for layer1.0.conv1.weight"}[case]
    with pytest.raises(SettingError) as err:
        PretrainedModel(3, 4, arch).load_backbone(path)
    message = str(err.value)
    assert message.startswith(f"EHRXQA_VQA_BACKBONE_WEIGHTS={path}") and expected in message, message
    assert f"point EHRXQA_VQA_BACKBONE_WEIGHTS at a {arch} state_dict" in message, message


@pytest.mark.slow  # trains the reference model and the probe (tests/vqa/test_train.py's tier): not in `make test-fast`
def test_the_worker_trains_the_probe_beside_an_unchanged_reference_and_predicts_with_both(
        vqa_warehouse, resnet18_file, tmp_path, no_download):
    import torch

    from ehrxqa_pipeline.vqa.modules import ReferenceModule, answer_mimic_cxr_vqa
    from ehrxqa_pipeline.vqa.predictions import Predictions
    from ehrxqa_pipeline.vqa.train import load_model
    from ehrxqa_pipeline.vqa.worker import run_task

    base = {"task": "train", "workspace": str(vqa_warehouse.db), "files_root": str(vqa_warehouse.files_root),
            "config": asdict(tiny_config(max_images=8, epochs=2))}
    alone, version, _ = run_task({**base, "model": str(tmp_path / "alone.pt"), "scratch": str(tmp_path / "a")},
                                 log=lambda _: None)
    assert "pretrained" not in alone and "+" not in version
    probe = tmp_path / "pretrained_model.pt"
    meta, both, check = run_task({**base, "model": str(tmp_path / "reference.pt"), "scratch": str(tmp_path / "b"),
                                  "backbone": {"architecture": "resnet18", "weights": str(resnet18_file),
                                               "model": str(probe)}}, log=lambda _: None)
    # the reference model is bitwise the one trained without a backbone
    ref, ref_alone = load_model(tmp_path / "reference.pt"), load_model(tmp_path / "alone.pt")
    assert all(torch.equal(a, b) for a, b in zip(ref.model.state_dict().values(),
                                                 ref_alone.model.state_dict().values()))
    assert meta["version"] == version and both == f"{version}+{meta['pretrained']['version']}" and check["passed"]
    sha = hashlib.sha256(resnet18_file.read_bytes()).hexdigest()
    assert meta["pretrained"]["weights_sha256"] == sha and meta["pretrained"]["leakage_risk"] == "unknown"
    assert meta["pretrained"]["curves"] and meta["pretrained"]["path"] == str(probe)
    assert load_model(probe).backbone["weights_sha256"] == sha  # the model file alone says what it came from

    with vqa_warehouse.connect() as con:
        ids = con.execute("SELECT image_id FROM splits.images WHERE split = 'test' ORDER BY image_id LIMIT 6"
                          ).pl()["image_id"].to_list()
        images = con.execute("SELECT * FROM splits.images").pl()
        pairs = con.execute("SELECT object, attribute, category FROM cxr_labels.pairs").pl()
    reported = run_task({"task": "predict", "workspace": str(vqa_warehouse.db), "device": "cpu",
                         "files_root": str(vqa_warehouse.files_root), "model": str(tmp_path / "reference.pt"),
                         "pretrained": str(probe), "shards": {"p10": ids}, "out": str(tmp_path / "out")})[0]
    assert reported["pretrained"]["weights_sha256"] == sha
    assert reported["shards"]["p10"]["pretrained_timings"]["images"] == len(ids)
    out = tmp_path / "out" / "p10"
    read = {p: Predictions(pl.read_parquet(out / f"{p}relations.parquet"), pl.read_parquet(out / f"{p}images.parquet"))
            for p in ("", "pretrained_")}
    keys = ["image_id", "object", "attribute"]
    assert read[""].relations.select(keys).equals(read["pretrained_"].relations.select(keys))
    assert not read[""].relations["prob"].equals(read["pretrained_"].relations["prob"])
    # the probe answers MIMIC-CXR-VQA questions through the reference model's answering code
    row = read["pretrained_"].relations.row(0, named=True)
    questions = pl.DataFrame({"template_key": ["base_2"], "image_id": [row["image_id"]], "object_1": [row["object"]],
                              "attribute_1": [row["attribute"]]})
    module = ReferenceModule(read["pretrained_"], pairs, images, threshold=row["prob"], name="pretrained_resnet18")
    assert module.name == "pretrained_resnet18"
    assert answer_mimic_cxr_vqa(module, questions) == [["yes"]]


def test_the_backbone_used_is_read_back_once_per_build_and_mixed_partitions_are_refused():
    from ehrxqa_pipeline.vqa.predictions import (BACKBONE_CONTRACT, BACKBONE_SCHEMA, IMAGES_CONTRACT, IMAGES_SCHEMA,
                                                 pretrained_backbone)
    from ehrxqa_pipeline.warehouse import replace_partition

    con = duckdb.connect()
    assert pretrained_backbone(con) is None  # a warehouse from before these tables
    con.execute("CREATE SCHEMA vqa_scoring")
    facts = {"module": "pretrained_resnet18", "architecture": "resnet18", "weights_file": "w.pt",
             "weights_sha256": "ab" * 32, "leakage_risk": "unknown"}
    image = pl.DataFrame([{"image_id": "i1", "p_pa": 0.5, "p_male": 0.5, "ctr": None, "mtr": None}],
                         schema=IMAGES_SCHEMA)
    for part in ("p10", "p11"):
        replace_partition(con, IMAGES_CONTRACT.name, IMAGES_CONTRACT.duckdb_columns(), part, image)
        replace_partition(con, BACKBONE_CONTRACT.name, BACKBONE_CONTRACT.duckdb_columns(), part,
                          pl.DataFrame(schema=BACKBONE_SCHEMA))
    assert pretrained_backbone(con) is None  # unset: empty
    for part in ("p10", "p11"):
        replace_partition(con, BACKBONE_CONTRACT.name, BACKBONE_CONTRACT.duckdb_columns(), part,
                          pl.DataFrame([facts], schema=BACKBONE_SCHEMA))
    assert pretrained_backbone(con) == facts
    replace_partition(con, BACKBONE_CONTRACT.name, BACKBONE_CONTRACT.duckdb_columns(), "p11",
                      pl.DataFrame(schema=BACKBONE_SCHEMA))
    with pytest.raises(ValueError, match="1 pretrained backbones, 1 from none: materialize vqa_scoring/predictions"):
        pretrained_backbone(con)
