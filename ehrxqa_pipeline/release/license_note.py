"""release/LICENSE.txt: the terms the release's data files inherit from their PhysioNet sources.

Grain: one note per release folder, written by ``release/datasheet`` beside ``datasheet.md`` (whose
"Distribution" answer names the same license, from the constants here). Source: the releases the build read
(``manifest.source_section``: MIMIC-IV, MIMIC-CXR-JPG, Chest ImaGenome, each under the PhysioNet Credentialed
Health Data License 1.5.0 and its Data Use Agreement) and whether the source was the synthetic one; no time,
no path. It summarises the terms that matter for these files (credentialed users only; no sharing, no posting
to hubs; derived data only through PhysioNet) and points at the license and agreement, which are what bind.
The code that builds the release is licensed separately.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping

from ehrxqa_pipeline.sources.datasets import DATASETS

LICENSE_FILE = "LICENSE.txt"
LICENSE = "PhysioNet Credentialed Health Data License 1.5.0"
LICENSE_URL = "https://physionet.org/about/licenses/physionet-credentialed-health-data-license-150/"
DUA = "PhysioNet Credentialed Health Data Use Agreement 1.5.0"
PROJECT_URL = "https://physionet.org/content/{key}/{version}/"
PROJECT_LICENSE_URL = "https://physionet.org/content/{key}/view-license/{version}/"
PROJECT_DUA_URL = "https://physionet.org/content/{key}/view-dua/{version}/"
WIDTH = 100
TERMS = (
    "Only credentialed PhysioNet users who have signed the data use agreement of each database above may "
    "use these files.",
    "Do not share the files, or any part of them (questions with their answers, queries, databases, image "
    "lists), with anyone else, and do not post them where others can read them: dataset hubs (the Hugging "
    "Face Hub, Kaggle and the like), code repositories, public or shared links. Data derived from these "
    "databases may be shared only through PhysioNet, under the same license and agreement.",
    "Do not send them to an online service that may keep or pass on what it receives (e.g. a hosted LLM).",
    "Do not try to identify any individual or institution in them.",
)


def _wrap(text: str, **indents) -> list[str]:
    return textwrap.wrap(text, WIDTH, break_long_words=False, break_on_hyphens=False, **indents)


def render_license(sources: Mapping, code: Mapping) -> str:
    """The text of LICENSE.txt for a release built from ``sources`` (``manifest.source_section``) by ``code``
    (``manifest.code_section``)."""
    title = "EHRXQA and MIMIC-CXR-VQA: license of the data files in this folder"
    out = [title, "=" * len(title), "", f"License:            {LICENSE}", f"                    {LICENSE_URL}",
           f"Data use agreement: {DUA}", ""]
    if sources.get("synthetic"):
        out += _wrap("This folder was built from the synthetic source (generated records in the PhysioNet "
                     "layout, no real patient), so its files hold no PhysioNet data. A folder built from the "
                     "PhysioNet sources below is bound by the terms of this note, stated here so that every "
                     "release carries them.") + [""]
    out += _wrap("Every file in this folder (questions, answers, queries, databases, image lists, statistics, "
                 "plots) is derived from the credentialed PhysioNet databases below and inherits their "
                 "license and data use agreement:") + [""]
    for key, version in sources["releases"].items():
        d = DATASETS[key]
        out += [f"- {d.title} {version}: {PROJECT_URL.format(key=key, version=version)}",
                f"  license:            {PROJECT_LICENSE_URL.format(key=key, version=version)}",
                f"  data use agreement: {PROJECT_DUA_URL.format(key=key, version=version)}"]
    out += ["", "In short (the license and the agreement are what bind):", ""]
    for term in TERMS:
        out += _wrap(term, initial_indent="- ", subsequent_indent="  ")
    out += [""] + _wrap(f"The code that built this folder ({code['package']} {code['version']}) is licensed "
                        "separately, by its own repository; this note covers the data files only.")
    return "\n".join(out) + "\n"
