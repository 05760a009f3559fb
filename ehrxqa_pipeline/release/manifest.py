"""release/manifest.json: every release file with its size and SHA-256, the source data versions, the code
version, the seed and configuration, the asset code versions, the published PhysioNet releases the datasets
reproduce and this release's version (``identity``).

The manifest holds no wall-clock time and no absolute path, and its keys and file entries are sorted, so
two builds of the same source, configuration and seed give byte-identical manifests (tested). File
entries (``files``, sorted by path relative to the release folder; ``manifest.json`` itself and hidden
files, e.g. a writer's temporary file, are left out):

* ``{"path", "digest": "bytes", "bytes", "sha256"}``: SHA-256 of the file's bytes;
* ``{"path", "digest": "content", "sha256", "rows"}``: DuckDB databases, whose bytes are not reproducible
  (``digest.duckdb_content_digest``): SHA-256 of their logical content and their total row count.

``SHA256SUMS.txt`` beside it (``sha256sums``), written after the manifest by the same asset, lists every file of
the release folder but itself, the manifest included, in ``sha256sum -c`` format (``<SHA-256>  <relative
path>``, sorted by path): the byte digests are the manifest's entries; the files the manifest lists by content
(DuckDB) and the manifest itself are hashed byte for byte there. So ``cd release && sha256sum -c SHA256SUMS.txt``
checks the folder with standard tools; its DuckDB lines, like the files, differ from build to build.

``verify(release_dir)`` recomputes every entry of the manifest, ``verify_sums(release_dir)`` every line of
SHA256SUMS.txt; ``python -m ehrxqa_pipeline.release.manifest DIR`` runs both. ``sums_problems`` and
``manifest_problems`` say the same per file, and ``not_restored`` which files hold neither their listed bytes nor
(DuckDB) their listed content: `ehrxqa build --changed` writes again what was changed by hand.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Mapping
from importlib import metadata
from pathlib import Path

from ehrxqa_pipeline.hashing import HashCache, combine, file_digest, sha256_file
from ehrxqa_pipeline.names import SEMANTICS
from ehrxqa_pipeline.atomic import write_text
from ehrxqa_pipeline.release.digest import CODE_DIRS, code_files, duckdb_content_digest, tree_digest
from ehrxqa_pipeline.release.identity import identity_section, release_version
from ehrxqa_pipeline.sources.files import origin
from ehrxqa_pipeline.sources.datasets import DATASETS
from ehrxqa_pipeline.sources.layout import SourceLayout, as_layout
from ehrxqa_pipeline.sources.schema import DEMO_MANIFEST, TABLES
from ehrxqa_pipeline.sources.semantics import semantics_paths

MANIFEST_NAME = "manifest.json"
SUMS_NAME = "SHA256SUMS.txt"
FORMAT = 1  # bump when a field changes meaning
PACKAGE = "ehrxqa-pipeline"
CONTENT_DIGESTERS: dict[str, Callable[[Path], tuple[str, int]]] = {".duckdb": duckdb_content_digest}
SYNTHETIC_FIELDS = ("generator", "generator_version", "seed", "scale", "compressed", "images_written")


def release_files(release_dir: Path, left_out: tuple[str, ...] = (MANIFEST_NAME, SUMS_NAME)) -> list[Path]:
    """Every regular file under ``release_dir`` except hidden files and the top-level files ``left_out`` (the
    manifest and SHA256SUMS.txt, which list the others), sorted by relative POSIX path."""
    release_dir = Path(release_dir)
    out = []
    for p in release_dir.rglob("*"):
        rel = p.relative_to(release_dir)
        if p.is_file() and rel.as_posix() not in left_out and not any(s.startswith(".") for s in rel.parts):
            out.append(p)
    return sorted(out, key=lambda p: p.relative_to(release_dir).as_posix())


def file_entry(release_dir: Path, path: Path) -> dict:
    rel = Path(path).relative_to(release_dir).as_posix()
    digester = CONTENT_DIGESTERS.get(Path(path).suffix)
    if digester is not None:
        digest, rows = digester(Path(path))
        return {"path": rel, "digest": "content", "sha256": digest, "rows": rows}
    return {"path": rel, "digest": "bytes", "bytes": Path(path).stat().st_size, "sha256": sha256_file(path)}


def file_entries(release_dir: Path) -> list[dict]:
    return [file_entry(Path(release_dir), p) for p in release_files(release_dir)]


def source_digests(source_dir: Path | SourceLayout, cache: HashCache | None = None,
                   recorded: Mapping[str, str | None] | None = None) -> dict[str, dict]:
    """Per source asset (``sources/<name>``): its files (named ``<dataset>/<release>/<path>``) and its data
    version.

    ``recorded``: name -> the data version the build read (``assets/release.py`` takes it from the ingestion
    that read the file, else from the source observation that drove the build); a name without one is hashed
    now, as ``assets/sources.py`` observes it (content hash of the files, cached by size, mtime, ctime, inode)."""
    layout = as_layout(source_dir)
    digest = cache.digest if cache is not None else file_digest
    recorded = recorded or {}
    out = {}
    for name in (*TABLES, SEMANTICS):
        paths = list(semantics_paths(layout)) if name == SEMANTICS else [origin(layout, name)]
        version = recorded.get(name) or combine(*(digest(p) for p in paths))
        out[name] = {"files": [layout.canonical(p) for p in paths], "data_version": version}
    return out


def source_releases(source_dir: Path | SourceLayout) -> dict:
    """What ``source_section`` says of the source without hashing it: the releases of the three PhysioNet
    sources (those read, and the paper's) and whether the source is the synthetic generator (its seed and scale,
    from the generator's manifest at the root). The Hugging Face dataset cards (``hf``) state these alone."""
    layout = as_layout(source_dir)
    demo = layout.root / DEMO_MANIFEST
    synthetic = None
    if demo.is_file():
        m = json.loads(demo.read_text())
        synthetic = {k: m[k] for k in SYNTHETIC_FIELDS if k in m}
    return {"releases": {k: layout.version(k) for k in DATASETS},
            "paper_releases": {k: d.paper for k, d in DATASETS.items()},
            "synthetic": synthetic is not None, "generator": synthetic}


def source_section(source_dir: Path | SourceLayout, digests: Mapping[str, dict]) -> dict:
    """``source_releases``, each source asset's data version and one digest over all of them. JPEG images are
    not part of it (the sources group observes the tables only)."""
    versions = {name: digests[name]["data_version"] for name in sorted(digests)}
    return {**source_releases(source_dir),
            "data_versions": {name: dict(digests[name]) for name in sorted(digests)},
            "digest": combine(*(f"{k}={v}" for k, v in versions.items()))}


def repository_root() -> Path:
    """The folder that holds the ``ehrxqa_pipeline`` package (the repository in a checkout)."""
    return Path(__file__).resolve().parents[2]


def code_section(root: Path | None = None, dirs: tuple[str, ...] = CODE_DIRS) -> dict:
    """Package version and a SHA-256 over the source files (``digest.code_files``); no git needed.

    For this repository (``root`` None) it is computed once per process, when first asked: the code this
    process runs was read at about that time, and a file edited later does not change what runs here."""
    if root is None:
        return dict(_this_code(dirs))
    try:
        version = metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        version = "unknown"
    files = code_files(Path(root), dirs)
    return {"package": PACKAGE, "version": version, "dirs": [d for d in dirs if (Path(root) / d).is_dir()],
            "files": len(files), "sha256": tree_digest(Path(root), files)}


@functools.cache
def _this_code(dirs: tuple[str, ...]) -> dict:
    return code_section(repository_root(), dirs)


def build_manifest(release_dir: Path, *, sources: dict, code: dict, seed: int, config: Mapping,
                   asset_code_versions: Mapping[str, str | None]) -> dict:
    """The manifest of what is under ``release_dir`` now. ``config``: every setting that changes the
    release besides the seed (JSON values). ``identity``: the published releases it reproduces
    (``identity.PUBLISHED``); ``release_version``: ``identity.release_version(code)``."""
    return {"format": FORMAT, "seed": seed, "config": dict(config), "code": code, "sources": sources,
            "identity": identity_section(), "release_version": release_version(code),
            "asset_code_versions": {k: asset_code_versions[k] for k in sorted(asset_code_versions)},
            "files": file_entries(release_dir)}


def with_file(manifest: Mapping, release_dir: Path, path: Path) -> dict:
    """``manifest`` with the entry of ``path`` (a file under ``release_dir`` written after the manifest was
    built) added or replaced, the other entries as they were (not hashed again)."""
    entry = file_entry(Path(release_dir), Path(path))
    files = [f for f in manifest["files"] if f["path"] != entry["path"]] + [entry]
    return {**manifest, "files": sorted(files, key=lambda f: f["path"])}


def dumps(manifest: Mapping) -> str:
    return json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_manifest(manifest: Mapping, release_dir: Path) -> Path:
    """Write ``release_dir/manifest.json`` atomically."""
    return write_text(Path(release_dir) / MANIFEST_NAME, dumps(manifest))


def sha256sums(release_dir: Path, entries: list[Mapping]) -> str:
    """SHA256SUMS.txt for ``release_dir``: a ``sha256sum -c`` line for each file of the manifest's ``entries`` and
    for the manifest (written first), sorted by path. Byte digests are taken from the entries; content-digest
    entries (DuckDB) and the manifest are hashed here."""
    release_dir = Path(release_dir)
    sums = {e["path"]: e["sha256"] if e["digest"] == "bytes" else sha256_file(release_dir / e["path"])
            for e in entries}
    sums[MANIFEST_NAME] = sha256_file(release_dir / MANIFEST_NAME)
    lines = []
    for rel in sorted(sums):
        if "\n" in rel or "\\" in rel:  # sha256sum escapes such names; the release has none
            raise ValueError(f"{rel!r}: a release file name with a newline or backslash")
        lines.append(f"{sums[rel]}  {rel}\n")
    return "".join(lines)


def write_sha256sums(release_dir: Path, entries: list[Mapping]) -> Path:
    """Write ``release_dir/SHA256SUMS.txt`` (``sha256sums``) atomically; after the manifest."""
    return write_text(Path(release_dir) / SUMS_NAME, sha256sums(release_dir, entries))


def listed_sums(release_dir: Path) -> dict[str, str] | None:
    """Relative path -> SHA-256 of every line of ``release_dir``/SHA256SUMS.txt; None when the file is missing or
    holds a line it was not written with."""
    path = Path(release_dir) / SUMS_NAME
    if not path.is_file():
        return None
    listed = {}
    for line in path.read_text(errors="replace").splitlines():
        digest, sep, rel = line.partition("  ")
        if not sep or len(digest) != 64:
            return None
        listed[rel] = digest
    return listed


def sums_problems(release_dir: Path) -> dict[str, str]:
    """Relative path -> "missing", "changed" or "unlisted": what ``sha256sum -c SHA256SUMS.txt`` in
    ``release_dir`` would report, and the files it does not list; ``{SUMS_NAME: "missing"}`` or ``"changed"``
    when the file is missing or not as it was written (empty: all good). Digests are ``sha256_file``'s
    (remembered: a file whose stat key holds is not read again)."""
    release_dir = Path(release_dir)
    listed = listed_sums(release_dir)
    if listed is None:
        return {SUMS_NAME: "changed" if (release_dir / SUMS_NAME).is_file() else "missing"}
    present = {p.relative_to(release_dir).as_posix(): p for p in release_files(release_dir, left_out=(SUMS_NAME,))}
    return _differences(listed, present, lambda path, digest: sha256_file(path) == digest)


def _differences(listed: Mapping[str, object], present: Mapping[str, Path], same: Callable[[Path, object], bool]
                 ) -> dict[str, str]:
    """Relative path -> "missing" (listed, not present), "unlisted" (present, not listed) or "changed" (both, and
    ``same(file, listed entry)`` is false)."""
    problems = dict.fromkeys(sorted(set(listed) - set(present)), "missing")
    problems.update(dict.fromkeys(sorted(set(present) - set(listed)), "unlisted"))
    problems.update({rel: "changed" for rel in sorted(set(listed) & set(present))
                     if not same(present[rel], listed[rel])})
    return problems


def _lines(problems: Mapping[str, str], text: Mapping[str, str]) -> list[str]:
    """``problems`` (``_differences``) as ``text[why]`` lines: the missing, then the unlisted, then the changed."""
    return [text[why].format(rel) for why in ("missing", "unlisted", "changed")
            for rel, w in problems.items() if w == why]


def not_restored(release_dir: Path, rels: list[str], manifest_sha256: str | None = None) -> list[str]:
    """Of the release files ``rels``, those that hold neither what SHA256SUMS.txt lists (their bytes) nor what
    the manifest lists (``file_entry``: a DuckDB database, whose bytes differ from write to write, by its
    content). The manifest counts when its SHA-256 is ``manifest_sha256`` (the one its step wrote; None: any)."""
    release_dir = Path(release_dir)
    listed = listed_sums(release_dir) or {}
    doc = release_dir / MANIFEST_NAME
    entries = ({e["path"]: e for e in json.loads(doc.read_text())["files"]}
               if doc.is_file() and manifest_sha256 in (None, sha256_file(doc)) else {})
    bad = []
    for rel in rels:
        path = release_dir / rel
        if not path.is_file() or not (sha256_file(path) == listed.get(rel)
                                      or (rel in entries and file_entry(release_dir, path) == entries[rel])):
            bad.append(rel)
    return bad


def verify_sums(release_dir: Path) -> list[str]:
    """``sums_problems`` as lines (empty: all good)."""
    problems = sums_problems(release_dir)
    if problems.get(SUMS_NAME):
        return [f"{problems[SUMS_NAME]}: {SUMS_NAME}"]
    return _lines(problems, {"missing": f"{SUMS_NAME}: missing: {{}}", "unlisted": f"not in {SUMS_NAME}: {{}}",
                             "changed": f"{SUMS_NAME}: changed: {{}}"})


def manifest_problems(release_dir: Path, manifest: Mapping) -> dict[str, str]:
    """Relative path -> "missing", "unlisted" or "changed": the files of ``release_dir`` against ``manifest``'s
    entries (recomputed: a DuckDB database's content digest is read again)."""
    release_dir = Path(release_dir)
    present = {p.relative_to(release_dir).as_posix(): p for p in release_files(release_dir)}
    return _differences({e["path"]: e for e in manifest["files"]}, present,
                        lambda path, entry: file_entry(release_dir, path) == entry)


def verify(release_dir: Path, manifest: Mapping | None = None) -> list[str]:
    """Problems between ``release_dir`` and its manifest: missing, unlisted or changed files (empty: all good)."""
    release_dir = Path(release_dir)
    if manifest is None:
        manifest = json.loads((release_dir / MANIFEST_NAME).read_text())
    return _lines(manifest_problems(release_dir, manifest),
                  {"missing": "missing: {}", "unlisted": "not in the manifest: {}", "changed": "changed: {}"})


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m ehrxqa_pipeline.release.manifest RELEASE_DIR", file=sys.stderr)
        return 2
    problems = verify(Path(args[0])) + verify_sums(Path(args[0]))
    print("\n".join(problems) if problems else f"{args[0]}: every file matches {MANIFEST_NAME} and {SUMS_NAME}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
