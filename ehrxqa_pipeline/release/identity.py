"""Which published releases this build reproduces, and this build's own release version.

Grain: one constant per released dataset (the PhysioNet project it reproduces, by name and version) and one
version string per build. Source: the PhysioNet project pages of the published datasets (below) and the code
section of the manifest (``manifest.code_section``). Stated once here; the manifest (``identity``,
``release_version``), the datasheet and the release README take them from this module.

The release version is ``<package version>+<first 12 hex of the code digest>`` (a PEP 440 local version): the
package version names the feature set, the code digest pins the exact code (``digest.code_files``, no git
needed). It holds no time, so two builds of the same code keep byte-identical release files; what else a
release depends on (source data versions, seed, configuration) is recorded beside it in the manifest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

DEVIATIONS_DOC = "docs/deviations.md"
DIGEST_CHARS = 12


@dataclass(frozen=True)
class Published:
    """A dataset as PhysioNet publishes it."""

    title: str
    version: str
    url: str
    folder: str  # the folder of this release that holds it

    @property
    def name(self) -> str:
        return f"{self.title} {self.version}"


# Keyed by the release folder's dataset folders (``release/ehrxqa``, ``release/mimic-cxr-vqa``).
PUBLISHED: dict[str, Published] = {
    "ehrxqa": Published("EHRXQA", "1.0.0", "https://physionet.org/content/ehrxqa/1.0.0/", "ehrxqa"),
    "mimic-cxr-vqa": Published("MIMIC-Ext-MIMIC-CXR-VQA", "1.0.0",
                               "https://physionet.org/content/mimic-ext-mimic-cxr-vqa/1.0.0/", "mimic-cxr-vqa"),
}
DIFFERENCES = (f"Where this release knowingly differs from the published one (record fields, fixed defects of "
               f"the published build scripts), with the reason: {DEVIATIONS_DOC} in the pipeline's repository "
               "(also in datasheet.md).")


def release_version(code: Mapping) -> str:
    """``<package version>+<first 12 hex of the code digest>`` for the code section ``code``."""
    return f"{code['version']}+{code['sha256'][:DIGEST_CHARS]}"


def identity_section() -> dict:
    """The manifest's ``identity``: per dataset folder the published release it reproduces; where it differs."""
    return {"reproduces": {k: {"name": p.name, "title": p.title, "version": p.version, "url": p.url}
                           for k, p in sorted(PUBLISHED.items())},
            "deviations": DEVIATIONS_DOC}


def identity_lines() -> str:
    """Markdown list: what each dataset folder reproduces, then where it differs."""
    lines = [f"- `{p.folder}/` reproduces **{p.name}** ({p.url})" for p in PUBLISHED.values()]
    return "\n".join(lines) + f"\n\n{DIFFERENCES}"
