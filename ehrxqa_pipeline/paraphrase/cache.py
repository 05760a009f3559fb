"""The LLM answer cache: a DuckDB file keyed by (endpoint base URL, model, prompt version, template,
temperature, seed, count).

It lives under EHRXQA_HOME/cache, apart from the warehouse: LLM answers cost money and time, so a
warehouse rebuild keeps them, and the slow calls never hold the warehouse's write lock. Every answer read is
recorded with its ``status``: ``ok`` (parsed, at least one candidate passed machine validation) or the
failure kind (``refusal``, ``unusable``, ``malformed``, a transport error). Only ``ok`` rows are served
again, so a failed or unusable answer is asked again on the next run; an unchanged template is not. The key
holds the base URL (as a hash only: no URL, no API key is written), so a second server serving a model of
the same name is asked afresh. ``ehrxqa cache clear llm`` deletes the file.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import duckdb
import pyarrow as pa

OK = "ok"
FILE_NAME = "llm_cache.duckdb"
# `llm_cache` (format 1) stored every parsed answer as a success and keyed by model only; it is not read.
_DDL = """CREATE TABLE IF NOT EXISTS llm_answers (
    key VARCHAR PRIMARY KEY, status VARCHAR, model VARCHAR, prompt_version VARCHAR, template_id VARCHAR,
    template_text VARCHAR, temperature DOUBLE, seed BIGINT, count INTEGER, response VARCHAR, paraphrases VARCHAR,
    prompt_tokens BIGINT, completion_tokens BIGINT)"""


# The LLM and embedding caches are small key-value files opened for each lookup: one DuckDB thread, as a
# thread pool per connection costs more than these queries (make test-fast: 130 -> 111 CPU-seconds).
CACHE_FILE_CONFIG = {"threads": 1}


def cache_key(base_url: str, model: str, prompt_version: str, template_id: str, template_text: str,
              temperature: float, seed: int, count: int) -> str:
    parts = [base_url.strip().rstrip("/"), model, prompt_version, template_id, template_text,
             repr(float(temperature)), str(int(seed)), str(int(count))]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


class LlmCache:
    def __init__(self, path: Path):
        self.path = Path(path)

    def _connect(self) -> duckdb.DuckDBPyConnection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        con = duckdb.connect(str(self.path), config=CACHE_FILE_CONFIG)
        con.execute(_DDL)
        return con

    def get(self, keys: list[str]) -> dict[str, list[str]]:
        """key -> cached paraphrases, for the keys present with a usable answer."""
        if not keys or not self.path.exists():
            return {}
        with self._connect() as con:
            con.register("_keys", pa.table({"key": keys}))
            rows = con.execute("SELECT c.key, c.paraphrases FROM llm_answers c JOIN _keys USING (key) "
                               "WHERE c.status = ?", [OK]).fetchall()
        return {k: json.loads(p) for k, p in rows}

    def put(self, key: str, *, status: str, model: str, prompt_version: str, template_id: str,
            template_text: str, temperature: float, seed: int, count: int, response: str | None,
            paraphrases: list[str], usage: dict) -> None:
        with self._connect() as con:
            con.execute("INSERT OR REPLACE INTO llm_answers VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [key, status, model, prompt_version, template_id, template_text, float(temperature),
                         int(seed), int(count), response, json.dumps(paraphrases, ensure_ascii=False),
                         int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)])

    def statuses(self) -> dict[str, int]:
        """Rows per status (``ok`` and each failure kind)."""
        if not self.path.exists():
            return {}
        with self._connect() as con:
            return dict(con.execute("SELECT status, count(*) FROM llm_answers GROUP BY ALL ORDER BY 1").fetchall())

    def clear(self) -> bool:
        """Delete the cache file (and DuckDB's write-ahead log); False when there was none."""
        found = False
        for p in (self.path, self.path.with_name(self.path.name + ".wal")):
            if p.exists():
                p.unlink()
                found = True
        return found

    def __len__(self) -> int:
        return sum(self.statuses().values())
