"""The LLM answer cache: a DuckDB file keyed by (model, prompt version, template, temperature, seed, count).

It lives under EHRXQA_HOME/cache, apart from the warehouse: LLM answers cost money and time, so a
warehouse rebuild keeps them, and the slow calls never hold the warehouse's write lock. Only successful
answers are stored, so a failed request is asked again on the next run; an unchanged template is not.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import duckdb
import pyarrow as pa

_DDL = """CREATE TABLE IF NOT EXISTS llm_cache (
    key VARCHAR PRIMARY KEY, model VARCHAR, prompt_version VARCHAR, template_id VARCHAR, template_text VARCHAR,
    temperature DOUBLE, seed BIGINT, count INTEGER, response VARCHAR, paraphrases VARCHAR,
    prompt_tokens BIGINT, completion_tokens BIGINT)"""


def cache_key(model: str, prompt_version: str, template_id: str, template_text: str, temperature: float,
              seed: int, count: int) -> str:
    parts = [model, prompt_version, template_id, template_text, repr(float(temperature)), str(int(seed)),
             str(int(count))]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


class LlmCache:
    def __init__(self, path: Path):
        self.path = Path(path)

    def _connect(self) -> duckdb.DuckDBPyConnection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        con = duckdb.connect(str(self.path))
        con.execute(_DDL)
        return con

    def get(self, keys: list[str]) -> dict[str, list[str]]:
        """key -> cached paraphrases, for the keys present."""
        if not keys:
            return {}
        with self._connect() as con:
            con.register("_keys", pa.table({"key": keys}))
            rows = con.execute("SELECT c.key, c.paraphrases FROM llm_cache c JOIN _keys USING (key)").fetchall()
        return {k: json.loads(p) for k, p in rows}

    def put(self, key: str, *, model: str, prompt_version: str, template_id: str, template_text: str,
            temperature: float, seed: int, count: int, response: str, paraphrases: list[str],
            usage: dict) -> None:
        with self._connect() as con:
            con.execute("INSERT OR REPLACE INTO llm_cache VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [key, model, prompt_version, template_id, template_text, float(temperature), int(seed),
                         int(count), response, json.dumps(paraphrases, ensure_ascii=False),
                         int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)])

    def __len__(self) -> int:
        if not self.path.exists():
            return 0
        with self._connect() as con:
            return con.execute("SELECT count(*) FROM llm_cache").fetchone()[0]
