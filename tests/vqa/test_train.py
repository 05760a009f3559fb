"""Training, inference, persistence and benchmarking of the reference model on a tiny generated source."""

from __future__ import annotations

import shutil

import numpy as np
import polars as pl
import pytest

from ehrxqa_pipeline.vqa.auroc import pair_auroc
from ehrxqa_pipeline.vqa.infer import predict
from ehrxqa_pipeline.vqa.predictions import IMAGES_SCHEMA, RELATIONS_SCHEMA, Predictions
from ehrxqa_pipeline.vqa.train import TrainConfig, data_version, load_model, plot_curves, save_model, train_reference
from tests.vqa.conftest import tiny_config
from tests.vqa.held_out import labelled_relations, within_pair_auroc

pytestmark = pytest.mark.slow  # trains the reference model: not in `make test-fast`


def _holdout_scores(con, wh, result) -> tuple[float, float, int]:
    preds = predict(result, con, wh.files_root, image_ids=wh.holdout(con))
    rel = labelled_relations(con, preds, "silver")
    per = pair_auroc(rel, min_positives=3)
    return float(per["auroc"].mean()), within_pair_auroc(rel), per.height


def test_training_loss_decreases_and_run_is_reported(vqa_trained):
    r = vqa_trained
    losses = [c["train_loss"] for c in r.curves]
    assert len(losses) == 6 and losses[-1] < 0.8 * losses[0]
    assert all(b < a for a, b in zip(losses, losses[1:]))
    assert {"valid_loss", "valid_auroc", "valid_view_acc", "train_images_per_s"} <= set(r.curves[0])
    t = r.timings
    assert t["decode_seconds"] > 0 and t["model_seconds"] > 0 and t["train_images_per_s"] > 0
    assert t["wall_seconds"] >= t["decode_seconds"] and t["device"] == "cpu"
    assert 1 <= r.best_epoch <= 6 and len(r.version) == 12 and not r.model.training


def test_beats_chance_on_held_out_images_and_shuffled_labels_do_not(vqa_warehouse, vqa_trained, tmp_path):
    con = vqa_warehouse.connect()
    try:
        macro, within, n_pairs = _holdout_scores(con, vqa_warehouse, vqa_trained)
        assert n_pairs >= 8
        assert macro >= 0.75 and within >= 0.68, (macro, within)
        # Control: the same training on labels permuted across the train images must not get there.
        shuffled_db = tmp_path / "shuffled.duckdb"
        shutil.copy(vqa_warehouse.db, shuffled_db)
        import duckdb
        with duckdb.connect(str(shuffled_db)) as sc:
            sc.execute("""
                CREATE OR REPLACE TABLE cxr_labels.silver AS
                WITH ids AS (SELECT image_id, row_number() OVER (ORDER BY image_id) AS r,
                                    row_number() OVER (ORDER BY hash(image_id || 'shuffle')) AS r2
                             FROM splits.images WHERE split = 'train')
                SELECT b.image_id, s.object, s.attribute FROM cxr_labels.silver s
                JOIN ids a ON a.image_id = s.image_id JOIN ids b ON b.r = a.r2
                UNION ALL
                SELECT s.* FROM cxr_labels.silver s JOIN splits.images i USING (image_id) WHERE i.split <> 'train'""")
            shuffled = train_reference(sc, vqa_warehouse.files_root, tiny_config(), log=lambda _: None)
        s_macro, s_within, _ = _holdout_scores(con, vqa_warehouse, shuffled)
        print(f"held-out AUROC macro {macro:.3f} within {within:.3f}; shuffled {s_macro:.3f} {s_within:.3f}")
        assert s_within < 0.65 and s_macro < macro - 0.08, (s_macro, s_within, macro)
    finally:
        con.close()


def test_same_seed_gives_bitwise_identical_weights_and_predictions(vqa_warehouse, vqa_trained, vqa_con, tmp_path):
    import torch  # here, not at the top: collecting this file (every worker of make test-fast does) stays cheap

    # trained again from a crop store on disk (memory-mapped) where vqa_trained held its crops in memory
    again = train_reference(vqa_con, vqa_warehouse.files_root, tiny_config(), log=lambda _: None,
                            scratch=tmp_path / "scratch")
    assert list((tmp_path / "scratch").iterdir()) == []  # the store is removed after training
    a, b = vqa_trained.model.state_dict(), again.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert again.version == vqa_trained.version
    p1 = predict(vqa_trained, vqa_con, vqa_warehouse.files_root, split="test")
    p2 = predict(again, vqa_con, vqa_warehouse.files_root, split="test")
    assert p1.relations.equals(p2.relations) and p1.images.equals(p2.images)


def test_no_step_reads_memory_it_did_not_write(vqa_warehouse, vqa_trained, vqa_con, monkeypatch):
    """Training leaves new tensors' memory unfilled (``device.seed_everything``): trained again with every new
    tensor filled with NaN first, as deterministic mode does by default, the weights are the same bits, so no
    step read memory before writing it."""
    import torch

    from ehrxqa_pipeline.vqa import device

    seed = device.seed_everything

    def filling(*args, **kwargs):
        seed(*args, **kwargs)
        assert torch.utils.deterministic.fill_uninitialized_memory is False
        torch.utils.deterministic.fill_uninitialized_memory = True
    monkeypatch.setattr(device, "seed_everything", filling)
    try:
        filled = train_reference(vqa_con, vqa_warehouse.files_root, tiny_config(), log=lambda _: None)
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = False
    a, b = vqa_trained.model.state_dict(), filled.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_save_load_round_trip_predicts_identically(vqa_warehouse, vqa_trained, vqa_con, tmp_path):
    import torch

    path = save_model(vqa_trained, tmp_path / "models" / "reference.pt")
    assert [p.name for p in path.parent.iterdir()] == ["reference.pt"]  # no temporary file left behind
    loaded = load_model(path)
    assert loaded.version == vqa_trained.version and loaded.curves == vqa_trained.curves
    assert loaded.vocab.objects == vqa_trained.vocab.objects and (loaded.vocab.pool == vqa_trained.vocab.pool).all()
    assert loaded.config == vqa_trained.config and not loaded.model.training
    p1 = predict(vqa_trained, vqa_con, vqa_warehouse.files_root, split="test")
    p2 = predict(loaded, vqa_con, vqa_warehouse.files_root, split="test")
    assert p1.relations.equals(p2.relations) and p1.images.equals(p2.images)
    # the convolutions run channels-last (the faster layout on the CPU), trained and loaded alike; the file holds
    # plain contiguous tensors, whatever the layout
    convs = [k for k, v in vqa_trained.model.state_dict().items() if v.ndim == 4]
    assert len(convs) == 8
    for model in (vqa_trained.model, loaded.model):
        state = model.state_dict()
        assert all(state[k].is_contiguous(memory_format=torch.channels_last) and state[k].stride(1) == 1
                   for k in convs)  # channels innermost (a one-channel tensor is also "contiguous")
    saved = torch.load(path, weights_only=True)["state_dict"]
    assert all(v.is_contiguous() for v in saved.values())


def test_predictions_cover_every_pool_pair_of_every_boxed_object(vqa_warehouse, vqa_trained, vqa_con):
    timings: dict = {}
    p = predict(vqa_trained, vqa_con, vqa_warehouse.files_root, split="test", batch_size=4, timings=timings)
    assert isinstance(p, Predictions)
    rel, img = p.relations, p.images
    assert dict(rel.schema) == RELATIONS_SCHEMA and dict(img.schema) == IMAGES_SCHEMA
    expected = vqa_con.sql("""
        SELECT i.image_id, b.bbox_name AS object, p.attribute FROM splits.images i
        JOIN ingest.silver_bbox b ON b.object_id = i.image_id || '_' || b.bbox_name
        JOIN cxr_labels.pairs p ON p.object = b.bbox_name
        WHERE i.split = 'test' AND b.width > 0 AND b.height > 0 ORDER BY ALL""").pl()
    # sorted, complete, no extras; a zero-area box (kept as published) has no crop, hence no prediction
    assert rel.select("image_id", "object", "attribute").equals(expected)
    assert rel["prob"].min() >= 0 and rel["prob"].max() <= 1
    truth = vqa_con.sql("SELECT image_id, ctr, mtr FROM splits.images WHERE split = 'test' ORDER BY image_id").pl()
    assert img.select("image_id", "ctr", "mtr").equals(truth)  # CTR/MTR from the given boxes
    assert img.select(pl.col("p_pa").is_between(0, 1).all() & pl.col("p_male").is_between(0, 1).all()).item()
    assert timings["images"] == img.height and timings["decode_seconds"] > 0 and timings["model_seconds"] > 0
    with pytest.raises(ValueError, match="not in splits.images"):
        predict(vqa_trained, vqa_con, vqa_warehouse.files_root, image_ids=["no-such-image"])


def test_predict_on_a_root_without_the_jpegs_names_the_file(vqa_trained, vqa_con, tmp_path):
    from ehrxqa_pipeline.vqa.images import ImageDecodeError

    first = vqa_con.sql("SELECT image_path FROM splits.images WHERE split = 'test' "
                        "ORDER BY image_id LIMIT 1").fetchone()[0]
    with pytest.raises(ImageDecodeError, match=str(tmp_path / first)):
        predict(vqa_trained, vqa_con, tmp_path, split="test")
    timings: dict = {}
    p = predict(vqa_trained, vqa_con, tmp_path, split="test", on_missing="report", timings=timings)
    assert p.images.height == 0 and str(tmp_path / first) in timings["missing"]


def test_plot_and_version_identity(vqa_trained):
    png = plot_curves(vqa_trained.curves)
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 2000
    vocab, cfg = vqa_trained.vocab, TrainConfig()
    base = data_version(cfg, vocab, ["a", "b"], 10, ["c"])
    assert data_version(cfg, vocab, ["b", "a"], 10, ["c"]) == base  # order does not matter
    assert data_version(TrainConfig(decode_workers=7, device="cpu", threads=1, decode="torch"), vocab, ["a", "b"], 10,
                        ["c"]) == base
    for other in (data_version(cfg, vocab, ["a"], 10, ["c"]), data_version(cfg, vocab, ["a", "b"], 11, ["c"]),
                  data_version(TrainConfig(seed=1), vocab, ["a", "b"], 10, ["c"])):
        assert other != base


def test_throughput_benchmark_reports_train_and_inference(vqa_warehouse, vqa_con):
    import torch

    from ehrxqa_pipeline.vqa.bench import throughput

    out = throughput(vqa_con, vqa_warehouse.files_root, batch_sizes=(4, 8), max_images=12, min_steps=1, threads=1)
    assert out["images"] == 12 and out["device"] == "cpu" and out["decode"]["images_per_s"] > 0
    for bs in (4, 8):
        assert out["train"][bs]["images_per_s"] > 0 and out["infer"][bs]["images_per_s"] > 0
    assert np.isfinite(out["train"][8]["crops_per_s"])
    with pytest.raises(ValueError, match="EHRXQA_VQA_DEVICE"):
        if torch.cuda.is_available():
            raise ValueError("EHRXQA_VQA_DEVICE (CUDA present: nothing to check)")
        throughput(vqa_con, vqa_warehouse.files_root, device="cuda")


# the torch decode path (vqa.decode: nvJPEG on CUDA) through predict, here beside the other tests of the shared
# trained model (vqa_trained is trained once per worker: in another file it would train again)
def test_predict_with_the_torch_decoder_matches_the_cpu_decoder(vqa_trained, vqa_con, vqa_warehouse):
    timings: dict = {}
    cpu = predict(vqa_trained, vqa_con, vqa_warehouse.files_root, split="test", decode="cpu")
    tor = predict(vqa_trained, vqa_con, vqa_warehouse.files_root, split="test", decode="torch", batch_size=16,
                  decode_workers=0, timings=timings)
    assert tor.relations.select("image_id", "object", "attribute").equals(
        cpu.relations.select("image_id", "object", "attribute"))
    assert tor.images["image_id"].to_list() == cpu.images["image_id"].to_list()
    gap = (tor.relations["prob"] - cpu.relations["prob"]).abs()
    assert gap.mean() < 0.01 and gap.max() < 0.2  # resampling only: a few grey levels per crop
    assert (tor.images["p_pa"] - cpu.images["p_pa"]).abs().max() < 0.05
    assert timings["images"] == cpu.images.height and timings["decode_seconds"] > 0
    # the mixed decoder: each image's answers are those of the path that decoded it (its crops moved with it)
    mixed = predict(vqa_trained, vqa_con, vqa_warehouse.files_root, split="test", decode="mixed:0.5", batch_size=16)
    keys = ("image_id", "object", "attribute")
    assert mixed.relations.select(keys).equals(cpu.relations.select(keys))
    gaps = pl.DataFrame({"image_id": mixed.relations["image_id"],
                         "cpu": (mixed.relations["prob"] - cpu.relations["prob"]).abs(),
                         "torch": (mixed.relations["prob"] - tor.relations["prob"]).abs()}
                        ).group_by("image_id").agg(pl.col("cpu").max(), pl.col("torch").max())
    # (not exactly: a torch-decoded image's pixels move by a rounding where its batch's padded shape changes, and
    # the model's sums with their batch's composition: here an image is within 2.1e-4 of its own path's answers
    # and 2.4e-4 to 6.2e-3 from the other's; a crop moved to another image's rows would be far from both)
    assert gaps.select(pl.min_horizontal("cpu", "torch") < 1e-3).to_series().all()
    assert (gaps["cpu"] < gaps["torch"]).sum() == gaps.height // 2  # mixed:0.5: every second image on the CPU
