"""Where each PhysioNet dataset lives below SOURCE_ROOT, and which release it is.

Users arrive with one of three layouts per dataset (all under the same root, mixed freely):

- ``mimiciv/2.2/``: the PhysioNet path (``wget -r -nH --cut-dirs=1`` or files moved by hand);
- ``physionet.org/files/mimiciv/2.2/``: what a plain ``wget -r`` writes;
- ``mimic-iv-2.2/``: what the "Download the ZIP file" button unpacks to.

Each dataset is read at one release. The default is the release the EHRXQA paper used (MIMIC-IV 2.2,
MIMIC-CXR-JPG 2.0.0, Chest ImaGenome 1.0.0); today's PhysioNet defaults (MIMIC-IV 3.0 / 3.1, MIMIC-CXR-JPG
2.1.0: same file names and columns, other folders and more rows) are accepted only when a setting names
them (``EHRXQA_SOURCE_VERSIONS=mimiciv=3.1``, ``--source-version mimiciv=3.1``), and the manifest and the
datasheet then record the release read. A folder named after the paper's release whose content belongs to
a later one (MIMIC-IV patients in anchor_year_group '2020 - 2022', which only 3.x has; MIMIC-CXR-JPG's
``mimic-cxr-2.1.0-test-set-labeled.csv``, which only 2.1.0 ships) is refused with the fix, so a renamed
folder can never be recorded under the wrong release.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path

from ehrxqa_pipeline.hashing import stat_key

from .datasets import DATASETS, MIMIC_CXR, MIMICIV, Dataset
from .errors import SourceError
from .schema import files_in

VERSIONS_ENV = "EHRXQA_SOURCE_VERSIONS"

# Content that only a later release has: (dataset, relative file, what it shows, the release it implies).
_CXR_LATER_FILE = ("mimic-cxr-2.1.0-test-set-labeled.csv", "2.1.0")
_MIMICIV_LATER_GROUP = ("2020 - 2022", "3.0 or later")


def folder_candidates(root: Path, d: Dataset, version: str) -> tuple[Path, ...]:
    """The folders that may hold release ``version`` of ``d``, in order of preference."""
    return (root / d.key / version, root / "physionet.org" / "files" / d.key / version,
            root / f"{d.zip_name}-{version}")


def _found_versions(root: Path, d: Dataset) -> dict[str, Path]:
    """Known releases of ``d`` present under ``root`` (first matching folder each)."""
    out = {}
    for version in d.known:
        for folder in folder_candidates(root, d, version):
            if folder.is_dir():
                out[version] = folder
                break
    return out


def _other_folders(root: Path, d: Dataset) -> list[str]:
    """Version folders of ``d`` that are not a known release (e.g. mimiciv/2.0), relative to ``root``."""
    seen = []
    for parent in (root / d.key, root / "physionet.org" / "files" / d.key):
        if parent.is_dir():
            seen += [p for p in sorted(parent.iterdir()) if p.is_dir() and p.name not in d.known]
    seen += [p for p in sorted(root.glob(f"{d.zip_name}-*")) if p.is_dir()
             and p.name.removeprefix(f"{d.zip_name}-") not in d.known]
    return [p.relative_to(root).as_posix() for p in seen]


def _rel(root: Path, path: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _setting(d: Dataset, version: str) -> str:
    return f"{VERSIONS_ENV}={d.key}={version} (or --source-version {d.key}={version})"


# (path, size, mtime_ns) -> whether the file shows later content; a file is read once per version of it.
_content_seen: dict[tuple[str, int, int], bool] = {}


def _contains(path: Path, needle: bytes) -> bool:
    st = path.stat()
    state = (str(path.resolve()), *stat_key(st))
    if state not in _content_seen:
        found = False
        try:
            with (gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")) as fh:
                tail = b""
                while block := fh.read(1 << 20):
                    if needle in tail + block:
                        found = True
                        break
                    tail = block[-len(needle):]
        except (OSError, EOFError, zlib.error):
            pass  # damage is reported, with its fix, by the readers
        _content_seen[state] = found
    return _content_seen[state]


def _mimiciv_later_content(folder: Path) -> bool:
    """True when hosp/patients holds the anchor_year_group that only MIMIC-IV 3.x has."""
    for name in ("hosp/patients.csv", "hosp/patients.csv.gz"):
        if (folder / name).is_file():
            return _contains(folder / name, _MIMICIV_LATER_GROUP[0].encode())
    return False


def later_content(d: Dataset, folder: Path) -> str | None:
    """The later release that ``folder``'s content belongs to, or None when nothing says so."""
    if d is MIMIC_CXR and (folder / _CXR_LATER_FILE[0]).is_file():
        return _CXR_LATER_FILE[1]
    if d is MIMICIV and _mimiciv_later_content(folder):
        return _MIMICIV_LATER_GROUP[1]
    return None


def parse_versions(text: str | Iterable[str] | None) -> dict[str, str]:
    """``"mimiciv=3.1,mimic-cxr-jpg=2.1.0"`` (or a list of ``key=version``) -> {dataset: version}."""
    if not text:
        return {}
    parts = [p.strip() for p in (text.split(",") if isinstance(text, str) else text) for p in p.split(",")]
    out = {}
    for part in filter(None, parts):
        key, sep, version = part.partition("=")
        key, version = key.strip(), version.strip()
        d = DATASETS.get(key)
        if not sep or d is None or version not in d.known:
            choices = "; ".join(f"{d.key}={'|'.join(d.known)}" for d in DATASETS.values())
            raise ValueError(f"source version setting {part!r} is not one of: {choices}")
        out[key] = version
    return out


def find_dataset(root: Path, d: Dataset, wanted: str | None = None) -> tuple[Path, str]:
    """The folder and release of ``d`` under ``root``; ``SourceError`` with the fix when it cannot be used."""
    found = _found_versions(root, d)
    version = wanted or d.paper
    if version not in found:
        shown = ", ".join(f"{_rel(root, p)} ({d.title} {v})" for v, p in found.items())
        expected = " or ".join(_rel(root, p) for p in folder_candidates(root, d, version))
        if found and wanted is None:
            other = next(iter(found))
            raise SourceError(
                _rel(root, found[other]),
                f"this is {d.title} {other}; the EHRXQA paper used {d.paper}, which is not below the root",
                fix=f"download {d.title} {d.paper} into {d.key}/{d.paper} to rebuild the published dataset, "
                    f"or build on {other} by setting {_setting(d, other)}; the manifest and datasheet then "
                    f"record {other}")
        others = _other_folders(root, d)
        seen = (f"; found {shown}" if shown else "") + (
            f"; found unsupported release folder(s) {', '.join(others)}" if others else "")
        raise SourceError(
            f"{d.key}/{version}", f"dataset folder is missing ({files_in(d.key)} source files expected below "
                                  f"{expected}){seen}",
            fix=f"download {d.title} {version} from PhysioNet (physionet.org/content/{d.key}/{version}) "
                f"into {root / d.key / version}" + ("" if wanted is None else
                                                    f", or drop {d.key} from {VERSIONS_ENV}"))
    folder = found[version]
    later = later_content(d, folder)
    if later is not None and version == d.paper:
        evidence = (f"patients in anchor_year_group {_MIMICIV_LATER_GROUP[0]!r}" if d is MIMICIV
                    else _CXR_LATER_FILE[0])
        raise SourceError(
            _rel(root, folder), f"is named {d.title} {version} but holds {d.title} {later} content "
            f"({evidence}, which {version} does not have)",
            fix=f"download {d.title} {version} to rebuild the published dataset, or rename the folder after "
                f"its release and set {_setting(d, d.opt_in[-1])}")
    return folder, version


class SourceLayout:
    """The release folder of each dataset below ``root``, found on first use (a missing dataset only
    matters to the files that live in it). ``versions`` names the releases wanted where they are not the
    paper's."""

    def __init__(self, root: Path, versions: Mapping[str, str] | None = None, cache_dir: Path | None = None):
        self.root = Path(root)
        self.wanted = dict(versions or {})
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None  # for files made from the source
        self._found: dict[str, tuple[Path, str]] = {}

    def __repr__(self) -> str:
        return f"SourceLayout({str(self.root)!r}, {self.wanted!r})"

    def _get(self, key: str) -> tuple[Path, str]:
        if key not in self._found:
            self._found[key] = find_dataset(self.root, DATASETS[key], self.wanted.get(key))
        return self._found[key]

    def dataset_dir(self, key: str) -> Path:
        return self._get(key)[0]

    def version(self, key: str) -> str:
        return self._get(key)[1]

    def path(self, key: str, rel: str) -> Path:
        """``rel`` inside dataset ``key`` (e.g. ``path("mimiciv", "hosp/patients.csv")``)."""
        return self.dataset_dir(key) / rel

    def relative(self, path: Path) -> str:
        return _rel(self.root, Path(path))

    def canonical(self, path: Path) -> str:
        """``path`` named as in the PhysioNet layout, ``<dataset>/<release>/<path inside it>``, whatever
        the folder layout on disk (so records of what was read do not depend on how it was unpacked)."""
        path = Path(path)
        for key in DATASETS:
            try:
                return f"{key}/{self.version(key)}/{path.relative_to(self.dataset_dir(key)).as_posix()}"
            except (ValueError, SourceError):
                continue
        return self.relative(path)


def as_layout(root: Path | SourceLayout) -> SourceLayout:
    """A layout as given, or the default one (paper releases) of a root folder."""
    return root if isinstance(root, SourceLayout) else SourceLayout(Path(root))


def holds_datasets(folder: Path) -> bool:
    """True when ``folder`` looks like a source root (any dataset in any of the accepted layouts)."""
    return any(_found_versions(folder, d) for d in DATASETS.values())
