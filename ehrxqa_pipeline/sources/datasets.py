"""The three PhysioNet datasets the pipeline reads, and their releases: what ``layout`` looks for below
SOURCE_ROOT and what ``schema`` files each one's tables under."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Dataset:
    key: str  # the PhysioNet project slug: the folder name in physionet.org/files/<key>/<version>
    title: str
    paper: str  # the release the EHRXQA paper used (the default)
    opt_in: tuple[str, ...]  # later releases with the same files, accepted when a setting names them
    zip_name: str  # the folder the PhysioNet ZIP download unpacks to is <zip_name>-<version>

    @property
    def known(self) -> tuple[str, ...]:
        return (self.paper, *self.opt_in)


MIMICIV = Dataset("mimiciv", "MIMIC-IV", "2.2", ("3.0", "3.1"), "mimic-iv")
MIMIC_CXR = Dataset("mimic-cxr-jpg", "MIMIC-CXR-JPG", "2.0.0", ("2.1.0",), "mimic-cxr-jpg")
IMAGENOME = Dataset("chest-imagenome", "Chest ImaGenome", "1.0.0", (), "chest-imagenome-dataset")
DATASETS: dict[str, Dataset] = {d.key: d for d in (MIMICIV, MIMIC_CXR, IMAGENOME)}
