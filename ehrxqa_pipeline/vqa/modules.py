"""VQA modules that FUNC_VQA (EHRXQA) and MIMIC-CXR-VQA scoring call, besides the oracle and "yes".

- ``LabelModule`` (shared with ``OracleModule``, defined next to it in ``questions.neuralsql.oracle``):
  inverts a question to (template, arguments) and answers with the template's program over any ``VqaLabels``.
- ``reference_labels`` / ``ReferenceModule``: the reference model's predictions as labels. Grain: one
  predicted positive per (image, object, attribute) with ``prob >= threshold`` (``Predictions.relations``;
  every other pool pair of a predicted image is a negative); per image (``Predictions.images``) view
  position PA when ``p_pa >= 0.5`` else AP, gender M when ``p_male >= 0.5`` else F, ctr / mtr as given.
  Image metadata (subject_id, study_id, split, image_path) comes from ``images`` (``splits.images``);
  images without predictions are left out, so questions about them are abstained on.
- ``answer_mimic_cxr_vqa``: answers MIMIC-CXR-VQA question rows (``mimic_cxr_vqa.questions`` layout) in
  batch: label-based modules through ``mimic_cxr_vqa.programs.answers`` once per template, priors through their
  ``answer_frame``, any other module (e.g. ``OpenAIVisionModule``) through its text interface.
- ``OpenAIVisionModule``: an OpenAI-compatible chat-completions vision endpoint. PRIVACY (README.md, Configuration): the
  JPEG (a base64 data URL) and the question go only to a host on the allow-list -- loopback by default, more
  hosts only through ``$EHRXQA_VQA_ALLOW_HOSTS`` (comma-separated) or ``allow_hosts``; other hosts are refused
  when the module is built, before any request. The HTTP client follows no redirects and ignores proxy
  settings, so the bytes cannot leave through a redirect or a proxy. Replies: "yes" / "no" -> bool,
  "none" / "nothing" -> [], else a comma-separated list of names; an unusable reply (empty, prose, an API
  error) is an abstention (None) counted in ``stats``.
"""

from __future__ import annotations

import base64
import re
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import polars as pl

from ehrxqa_pipeline.config import ENVIRONMENT, allowed_hosts
from ehrxqa_pipeline.questions.neuralsql.oracle import LabelModule
from ehrxqa_pipeline.questions.neuralsql.vqa_modules import Answer, ImageRef, VqaModule, ask, image_path, reads_pixels
from ehrxqa_pipeline.questions.mimic_cxr_vqa.programs import VqaLabels, answers, prepare_labels
from ehrxqa_pipeline.questions.mimic_cxr_vqa.templates import TEMPLATES
from ehrxqa_pipeline.vqa.predictions import Predictions

__all__ = ["HostNotAllowedError", "LabelModule", "OpenAIVisionModule", "ReferenceModule",
           "answer_mimic_cxr_vqa", "image_refs", "parse_reply", "reference_labels"]

_LIST = pl.List(pl.String)
_RATIO = {"ct_ratio_1": "ctr", "mt_ratio_1": "mtr"}
_PREDICTED = ("view_position", "gender", "ctr", "mtr")


def reference_labels(predictions: Predictions, pairs: pl.DataFrame, images: pl.DataFrame,
                     threshold: float = 0.5) -> VqaLabels:
    """``VqaLabels`` of the predicted images (see the module docstring); ``pairs``: object, attribute,
    category of the label pool; ``images``: image_id plus metadata (its own view/gender/ratios are replaced)."""
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be in [0, 1], got {threshold}")
    positives = predictions.relations.filter(pl.col("prob") >= threshold).select("image_id", "object", "attribute")
    p = predictions.images
    predicted = p.select(
        "image_id",
        view_position=pl.when(pl.col("p_pa") >= 0.5).then(pl.lit("PA")).when(pl.col("p_pa").is_not_null())
        .then(pl.lit("AP")),
        gender=pl.when(pl.col("p_male") >= 0.5).then(pl.lit("M")).when(pl.col("p_male").is_not_null())
        .then(pl.lit("F")),
        ctr=pl.col("ctr").fill_nan(None), mtr=pl.col("mtr").fill_nan(None))
    meta = images.drop([c for c in _PREDICTED if c in images.columns])
    return prepare_labels(pairs, positives, meta.join(predicted, on="image_id", how="inner"))


class ReferenceModule(LabelModule):
    """``LabelModule`` over ``reference_labels(predictions, pairs, images, threshold)``; ``name``: another trained
    model's predictions (``pretrained_<arch>``) answer the same way."""

    def __init__(self, predictions: Predictions, pairs: pl.DataFrame, images: pl.DataFrame, threshold: float = 0.5,
                 name: str = "reference"):
        super().__init__(reference_labels(predictions, pairs, images, threshold), name)
        self.threshold = threshold


def image_refs(image_ids: list[str], images: pl.DataFrame, images_root: str | Path | None = None) -> list[ImageRef]:
    """ImageRef per image id from ``images`` (image_id, subject_id, study_id[, image_path relative to the
    MIMIC-CXR-JPG ``files`` root]); ``path`` is None without a root or when the file is missing."""
    cols = ["image_id", "subject_id", "study_id"] + (["image_path"] if "image_path" in images.columns else [])
    f = pl.DataFrame({"image_id": image_ids}, schema={"image_id": pl.String}).join(
        images.select(cols).unique("image_id"), on="image_id", how="left", maintain_order="left")
    if f["subject_id"].null_count():
        raise ValueError("questions name images that are missing from images")
    out = []
    for row in f.iter_rows(named=True):  # one small object per asked pair: what the module interface takes
        path = None
        if images_root is not None:
            rel = row.get("image_path")
            path = Path(images_root) / rel if rel else image_path(Path(images_root), row["subject_id"],
                                                                  row["study_id"], row["image_id"])
            path = path if path.is_file() else None
        out.append(ImageRef(int(row["study_id"]), row["image_id"], int(row["subject_id"]), path))
    return out


def _answer_with_labels(labels: VqaLabels, questions: pl.DataFrame) -> list[list[str] | None]:
    q = questions.with_row_index("_q").join(labels.images.select("image_id", "_img", "ctr", "mtr"), on="image_id",
                                            how="left", maintain_order="left")
    parts = [pl.DataFrame(schema={"_q": pl.UInt32, "answer": _LIST})]
    for t in TEMPLATES:
        part = q.filter((pl.col("template_key") == t.key) & pl.col("_img").is_not_null())
        if t.key in _RATIO:  # no ratio for the image: abstain, as the oracle does
            part = part.filter(pl.col(_RATIO[t.key]).is_not_null())
        if part.height:
            parts.append(part.select("_q", answers(t, part, labels).alias("answer")))
    got = pl.concat(parts)
    return q.select("_q").join(got, on="_q", how="left", maintain_order="left")["answer"].to_list()


def _list_form(answer) -> list[str] | None:
    if answer is None:
        return None
    if isinstance(answer, bool):
        return ["yes" if answer else "no"]
    return sorted(set(answer))


def answer_mimic_cxr_vqa(module: VqaModule | VqaLabels, questions: pl.DataFrame, *,
                         images: pl.DataFrame | None = None, images_root: str | Path | None = None,
                         batch_size: int = 32) -> list[list[str] | None]:
    """One answer per row of ``questions`` (template_key, image_id, argument columns), in MIMIC-CXR-VQA
    form: ["yes"] / ["no"] for verify, a sorted list otherwise, None where the module abstains.

    ``VqaLabels`` and ``LabelModule``s answer with the template programs (grouped by template); objects with
    ``answer_frame`` (the priors) answer the frame; any other VqaModule is asked the question text
    (``baselines.question_texts``) about the row's image, which needs ``images`` (and ``images_root`` for
    modules that read pixels)."""
    if isinstance(module, VqaLabels):
        return _answer_with_labels(module, questions)
    if isinstance(module, LabelModule):
        return _answer_with_labels(module.labels, questions)
    if hasattr(module, "answer_frame"):
        return module.answer_frame(questions)
    if images is None:
        raise ValueError(f"module {getattr(module, 'name', module)!r} reads images: pass images (and images_root)")
    from ehrxqa_pipeline.vqa.baselines import question_texts

    texts = question_texts(questions).to_list()
    refs = image_refs(questions["image_id"].to_list(), images, images_root if reads_pixels(module) else None)
    out: list[list[str] | None] = []
    for i in range(0, len(texts), batch_size):
        out.extend(_list_form(a) for a in ask(module, refs[i:i + batch_size], texts[i:i + batch_size]))
    return out


# -- OpenAI-compatible vision endpoint -------------------------------------------------------------------
ALLOW_HOSTS = ENVIRONMENT["vqa_allow_hosts"]
PROMPT = ("You answer questions about a chest X-ray image. Reply with 'yes' or 'no' for yes/no questions; "
          "otherwise reply with the answer names only, separated by commas, or 'none' if nothing applies. "
          "No other words.")
MAX_REPLY_WORDS = 8  # per answer item: more is prose, not an answer


class HostNotAllowedError(PermissionError):
    """A VQA endpoint outside the allow-list: images must not be sent there."""


def parse_reply(text) -> Answer:
    """A reply in module form, or None when it is not an answer (see the module docstring)."""
    if not isinstance(text, str):
        return None
    t = text.strip().strip("`'\"").strip().rstrip(".").strip().lower()
    if t in ("yes", "no"):
        return t == "yes"
    if t in ("none", "nothing", "[]"):
        return []
    items = [x.strip().strip("'\"").strip() for x in re.split(r",|\n", t)]
    if not t or any(not x or len(x.split()) > MAX_REPLY_WORDS for x in items) or items[0] in ("yes", "no"):
        return None
    return sorted(set(items))


class OpenAIVisionModule:
    """VqaModule over an OpenAI-compatible ``/chat/completions`` endpoint with image input."""

    name = "openai_vision"

    def __init__(self, base_url: str, model: str, api_key: str = "unused", allow_hosts=None, *,
                 timeout_s: float = 60.0, max_tokens: int = 64, concurrency: int = 4, prompt: str = PROMPT):
        host = (urlsplit(base_url).hostname or "").lower()
        allowed = allowed_hosts(allow_hosts)
        if host not in allowed:
            raise HostNotAllowedError(
                f"VQA endpoint host {host or base_url!r} is not on the allow-list {sorted(allowed)}: chest X-ray "
                "images are PhysioNet record data and may only be sent to hosts covered by the data use "
                f"agreement (README.md, Configuration). Serve the model locally, or add the host to {ALLOW_HOSTS} "
                "(comma-separated) if it is yours to send the images to.")
        import openai

        self.model, self.max_tokens, self.prompt, self.concurrency = model, max_tokens, prompt, max(1, concurrency)
        self.stats: Counter = Counter()  # requests, answered, malformed, errors, no_image
        self._lock = threading.Lock()
        self._openai = openai
        self._client = openai.OpenAI(
            base_url=base_url, api_key=api_key or "unused", timeout=timeout_s, max_retries=0,
            http_client=openai.DefaultHttpxClient(follow_redirects=False, trust_env=False, timeout=timeout_s))

    def _count(self, key: str) -> None:
        with self._lock:
            self.stats[key] += 1

    def _ask_one(self, image: ImageRef | None, question: str) -> Answer:
        if image is None or image.path is None or not Path(image.path).is_file():
            self._count("no_image")
            return None
        url = "data:image/jpeg;base64," + base64.b64encode(Path(image.path).read_bytes()).decode("ascii")
        self._count("requests")
        try:
            r = self._client.chat.completions.create(
                model=self.model, temperature=0, max_tokens=self.max_tokens,
                messages=[{"role": "system", "content": self.prompt},
                          {"role": "user", "content": [{"type": "text", "text": question},
                                                       {"type": "image_url", "image_url": {"url": url}}]}])
            text = r.choices[0].message.content if r.choices else None
        except (self._openai.APIError, ValueError, AttributeError, TypeError, IndexError):
            self._count("errors")
            return None
        answer = parse_reply(text)
        self._count("malformed" if answer is None else "answered")
        return answer

    def __call__(self, images: list[ImageRef], questions: list[str]) -> list[Answer]:
        if len(images) != len(questions):
            raise ValueError(f"{len(images)} images for {len(questions)} questions")
        with ThreadPoolExecutor(self.concurrency) as pool:
            return list(pool.map(self._ask_one, images, questions))
