"""The torch decode path (vqa.decode, CUDA's in production) and the streaming loader (vqa.stream), on the CPU.

The torch path must cut the pixels the CPU path (vqa.jpeg: PIL draft mode + OpenCV) cuts, up to resampling:
its differences are bounded here on demo phantoms, at full size and reduced as real 2,500 px films are.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from ehrxqa_pipeline.vqa.images import ImageDecodeError, box_table, decode_crops
from tests.vqa.test_model import _mini_warehouse


def _torch_cut(con, items, root, **kw):
    from ehrxqa_pipeline.vqa.decode import cut, decode_gray, read_jpeg

    ids = [i for i, _ in items]
    _, first, counts, coords, _ = box_table(con, ids)
    images = decode_gray([read_jpeg(root / p) for _, p in items], "cpu")
    return cut(images, [coords[f:f + c] for f, c in zip(first, counts)], **kw)


def _diff(a, b) -> float:
    return float(np.abs(a.numpy().astype(np.float64) - b.astype(np.float64)).mean())


@pytest.mark.parametrize("min_side, bound", [(4096, 0.5), (100, 1.0)])  # full size; reduced by 1/2
def test_torch_path_cuts_the_cpu_paths_pixels(tmp_path, min_side, bound):
    import torch

    con, items = _mini_warehouse(tmp_path, {"a": [("left lung", "pleural effusion")], "b": []})
    cpu = decode_crops(con, items, tmp_path, min_side=min_side)
    crops, thumbs, texture = _torch_cut(con, items, tmp_path, min_side=min_side)
    assert crops.shape == cpu.crops.shape and thumbs.shape == cpu.thumbs.shape
    assert crops.dtype == thumbs.dtype == texture.dtype == torch.uint8
    # measured: 0.22 / 0.09 / 0.22 grey levels at full size, 0.45 / 0.26 / 0.68 reduced
    assert _diff(crops, cpu.crops) < bound and _diff(thumbs, cpu.thumbs) < bound
    assert _diff(texture, cpu.texture) < 2 * bound
    # and the finding is where the CPU path sees it: the effusion crop differs from the clean one
    left = cpu.index.filter(pl.col("object") == "left lung")["row"].to_list()
    assert _diff(crops[left[0]], crops[left[1]].numpy()) > 8.0


@pytest.mark.parametrize("size", [(320, 340), (1100, 1300), (2544, 3056), (700, 512), (4000, 600)])
def test_draft_scale_is_pils(tmp_path, size):
    from PIL import Image

    from ehrxqa_pipeline.vqa.jpeg import draft_scale

    path = tmp_path / "x.jpg"
    Image.new("L", size, 128).save(path, quality=90)
    with Image.open(path) as im:
        s = min(1.0, 512 / min(size))
        if s < 1.0:
            im.draft("L", (max(1, int(size[0] * s)), max(1, int(size[1] * s))))
        got = im.size
    f = draft_scale(*size, 512)
    assert got == (-(-size[0] // f), -(-size[1] // f))


def test_decode_errors_name_the_file(tmp_path):
    from ehrxqa_pipeline.vqa.decode import decode_gray, read_jpeg

    with pytest.raises(ImageDecodeError, match="not found.*gone.jpg"):
        read_jpeg(tmp_path / "gone.jpg")
    con, items = _mini_warehouse(tmp_path, {"a": [], "b": []})
    bad = tmp_path / items[1][1]
    bad.write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    datas = [read_jpeg(tmp_path / p) for _, p in items]
    with pytest.raises(ImageDecodeError, match=f"cannot decode JPEG {bad}"):
        decode_gray(datas, "cpu", [str(tmp_path / p) for _, p in items])


def test_crop_store_holds_the_in_memory_values_memory_mapped(tmp_path):
    con, items = _mini_warehouse(tmp_path / "src", {"a": [("left lung", "pleural effusion")], "b": [], "c": []})
    mem = decode_crops(con, items, tmp_path / "src")
    disk = decode_crops(con, items, tmp_path / "src", store=tmp_path / "store", chunk_images=2)
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == ["crops.npy", "texture.npy", "thumbs.npy"]
    assert isinstance(disk.crops, np.memmap) and isinstance(disk.thumbs, np.memmap)
    for name in ("crops", "thumbs", "texture", "geom"):
        assert np.array_equal(getattr(disk, name), getattr(mem, name)), name
    assert disk.index.equals(mem.index) and disk.image_ids == mem.image_ids
    with pytest.raises(ValueError, match="needs on_missing='raise'"):
        decode_crops(con, items, tmp_path / "src", store=tmp_path / "s2", on_missing="report")


def test_the_crop_store_takes_the_devices_pixels_through_the_stream(tmp_path):
    """``decode_crops(decode="torch")``, what training uses on CUDA: the stream's pixels, batch by batch, into the
    store as in memory, within resampling of the CPU path's, with the same rows."""
    con, items = _mini_warehouse(tmp_path / "src", {"a": [("left lung", "pleural effusion")], "b": [], "c": []})
    cpu = decode_crops(con, items, tmp_path / "src")
    mem = decode_crops(con, items, tmp_path / "src", decode="torch")
    disk = decode_crops(con, items, tmp_path / "src", store=tmp_path / "store", chunk_images=2, decode="torch")
    assert isinstance(disk.crops, np.memmap)
    for name in ("crops", "thumbs", "texture", "geom"):
        assert np.array_equal(getattr(disk, name), getattr(mem, name)), name
        assert np.abs(getattr(mem, name).astype(float) - getattr(cpu, name).astype(float)).mean() < 1.0, name
    assert not np.array_equal(mem.thumbs, cpu.thumbs)  # the other path indeed
    assert mem.index.equals(cpu.index) and mem.image_ids == cpu.image_ids == disk.image_ids


def _stream_inputs(con, items, root):
    ids = [i for i, _ in items]
    _, first, counts, coords, _ = box_table(con, ids)
    return [root / p for _, p in items], [coords[f:f + c] for f, c in zip(first, counts)]


@pytest.mark.parametrize("workers", [0, 2])
def test_stream_cpu_decoder_equals_decode_crops_in_order(tmp_path, workers):
    from ehrxqa_pipeline.vqa.stream import stream

    con, items = _mini_warehouse(tmp_path, {"a": [], "b": [("left lung", "pleural effusion")], "c": []})
    cpu = decode_crops(con, items, tmp_path)
    paths, boxes = _stream_inputs(con, items, tmp_path)
    batches = list(stream(paths, boxes, decode="cpu", batch_images=2, workers=workers))
    assert [b.rows.tolist() for b in batches] == [[0, 1], [2]]
    assert np.array_equal(np.concatenate([b.crops.numpy() for b in batches]), cpu.crops)
    assert np.array_equal(np.concatenate([b.thumbs.numpy() for b in batches]), cpu.thumbs)
    assert np.array_equal(np.concatenate([b.texture.numpy() for b in batches]), cpu.texture)
    assert batches[0].crop_image.tolist() == [0] * 36 + [1] * 36 and all(b.decode_seconds > 0 for b in batches)


@pytest.mark.parametrize("workers", [0, 2])
def test_stream_mixed_decoder_takes_each_image_from_its_path_in_input_order(tmp_path, workers):
    import torch

    from ehrxqa_pipeline.vqa.stream import MIXED_SHARE, on_cpu, parse_decoder, stream

    con, items = _mini_warehouse(tmp_path, {"a": [], "b": [("left lung", "pleural effusion")], "c": [], "d": [],
                                            "e": []})
    paths, boxes = _stream_inputs(con, items, tmp_path)
    boxes[3] = boxes[3][:5]  # images with different numbers of crops, so a crop moved to another image shows
    whole = {d: next(stream(paths, boxes, decode=d, batch_images=5, workers=0)) for d in ("cpu", "torch")}
    assert [on_cpu(k, 0.4) for k in range(5)] == [False, False, True, False, True]
    got = list(stream(paths, boxes, decode="mixed:0.4", batch_images=3, workers=workers))
    assert [b.rows.tolist() for b in got] == [[0, 1, 2], [3, 4]]
    crops, thumbs, texture = (torch.cat([getattr(b, n) for b in got]) for n in ("crops", "thumbs", "texture"))
    at = np.cumsum([0] + [len(b) for b in boxes])
    for k in range(5):
        want = whole["cpu" if on_cpu(k, 0.4) else "torch"]
        assert torch.equal(crops[at[k]:at[k + 1]], want.crops[at[k]:at[k + 1]]), k
        assert torch.equal(thumbs[k], want.thumbs[k]) and torch.equal(texture[k], want.texture[k]), k
    assert not torch.equal(whole["cpu"].thumbs[2], whole["torch"].thumbs[2])  # the two paths do differ here
    assert got[1].crop_image.tolist() == [0] * 5 + [1] * 36
    for bad, why in (("mixed:1.5", "between 0 and 1"), ("mixed:half", "between 0 and 1"),
                     ("torch:0.5", "only mixed takes a share")):
        with pytest.raises(ValueError, match=why):
            next(stream(paths, boxes, decode=bad))
    assert parse_decoder("mixed", "cuda") == ("mixed", MIXED_SHARE) and parse_decoder("auto", "cpu") == ("cpu", 1.0)


def test_stream_reads_lazily_and_reports_missing(tmp_path, monkeypatch):
    from ehrxqa_pipeline.vqa import stream as vstream

    con, items = _mini_warehouse(tmp_path, {"a": [], "b": [], "c": [], "d": []})
    paths, boxes = _stream_inputs(con, items, tmp_path)
    paths[2].unlink()
    seen = []
    real = vstream.decode_one
    monkeypatch.setattr(vstream, "decode_one", lambda path, *a, **k: seen.append(path.stem) or real(path, *a, **k))
    it = vstream.stream(paths, boxes, decode="cpu", batch_images=2, workers=0, on_missing="report")
    first = next(it)
    assert seen == ["a", "b"] and first.rows.tolist() == [0, 1]  # nothing read beyond the batch asked for
    second = next(it)
    assert second.rows.tolist() == [3] and second.missing == [str(paths[2])] and second.crops.shape[0] == 36
    with pytest.raises(ImageDecodeError, match="not found"):
        list(vstream.stream(paths, boxes, decode="torch", workers=0))
    with pytest.raises(ImageDecodeError, match="not found"):
        list(vstream.stream(paths, boxes, decode="cpu", batch_images=1, workers=2))  # raised in a reader thread
    paths[1].write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")  # and one that does not decode
    for decode in ("cpu", "torch", "mixed"):
        with pytest.raises(ImageDecodeError, match="cannot decode"):  # (the torch path reads all files first)
            list(vstream.stream(paths[:2], boxes[:2], decode=decode, workers=0))
        got = list(vstream.stream(paths, boxes, decode=decode, batch_images=2, workers=0, on_missing="report"))
        assert [b.rows.tolist() for b in got] == [[0], [3]] and [b.crops.shape[0] for b in got] == [36, 36]
        assert [b.missing for b in got] == [[str(paths[1])], [str(paths[2])]] and got[0].thumbs.shape[0] == 1
    with pytest.raises(ValueError, match="unknown JPEG decoder"):
        vstream.resolve_decoder("nvjpeg", "cpu")
    assert vstream.resolve_decoder("auto", "cpu") == "cpu" and vstream.resolve_decoder("auto", "cuda:0") == "torch"


def test_stream_threads_read_a_bounded_number_of_batches_ahead(tmp_path, monkeypatch):
    import threading
    import time

    from ehrxqa_pipeline.vqa import stream as vstream

    con, items = _mini_warehouse(tmp_path, {k: [] for k in "abcdefgh"})
    paths, boxes = _stream_inputs(con, items, tmp_path)
    seen, lock = [], threading.Lock()
    real = vstream.decode_one

    def counted(path, *a, **k):
        with lock:
            seen.append(path.stem)
        return real(path, *a, **k)

    monkeypatch.setattr(vstream, "decode_one", counted)
    it = vstream.stream(paths, boxes, decode="cpu", batch_images=2, workers=2, prefetch=1)
    assert next(it).rows.tolist() == [0, 1]
    time.sleep(0.5)  # let the readers run as far ahead as they may
    assert 4 <= len(seen) <= 6  # the batch in hand, the one read ahead, and the one submitted as it was taken
    rest = [b.rows.tolist() for b in it]
    assert rest == [[2, 3], [4, 5], [6, 7]] and sorted(seen) == list("abcdefgh")


def test_decoding_threads_are_every_core_but_one_and_reading_threads_so_on_cuda_only(monkeypatch):
    from ehrxqa_pipeline.vqa import jpeg
    from ehrxqa_pipeline.vqa.stream import reader_threads

    for cores, threads in ((16, 15), (2, 2), (1, 2)):
        monkeypatch.setattr(jpeg.os, "sched_getaffinity", lambda pid, n=cores: set(range(n)))
        assert jpeg.host_threads() == threads
        assert reader_threads("cuda:0") == threads and reader_threads("cpu") == 2
