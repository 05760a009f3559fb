"""Size presets of the synthetic PhysioNet source."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Scale:
    name: str
    cxr_patients: int  # patients with at least one chest X-ray study (MIMIC-CXR subjects)
    ehr_only_patients: int  # MIMIC-IV patients without any X-ray
    gold_patients: int  # Chest ImaGenome gold patients (500 in the real release)
    mean_studies: float  # mean studies per CXR patient (real: 227k / 65k = 3.5)
    heavy_patients: int  # CXR patients with more than 20 studies
    event_density: float  # multiplier on EHR event rows per admission
    images: bool  # write phantom JPEGs
    image_min: int = 320  # phantom image side lengths in pixels (metadata Rows/Columns match)
    image_max: int = 400
    # share of the CXR patients withheld from MIMIC-IV (absent from every MIMIC-IV table; their CXR metadata
    # and Chest ImaGenome labels stay), as MIMIC-IV 2.2 withholds about 5 % of the MIMIC-CXR patients
    withheld_share: float = 0.05

    def with_patients(self, n: int) -> Scale:
        """Override the CXR patient count, keeping the other proportions."""
        ratio = n / self.cxr_patients
        return replace(
            self,
            cxr_patients=n,
            ehr_only_patients=max(1, round(self.ehr_only_patients * ratio)),
            gold_patients=max(4, min(self.gold_patients, n // 8)),
            heavy_patients=max(1, round(self.heavy_patients * ratio)),
        )


SCALES: dict[str, Scale] = {
    "demo": Scale("demo", cxr_patients=300, ehr_only_patients=60, gold_patients=40, mean_studies=3.5,
                  heavy_patients=6, event_density=1.0, images=True),
    "full": Scale("full", cxr_patients=65_000, ehr_only_patients=5_000, gold_patients=500,
                  mean_studies=3.5, heavy_patients=650, event_density=0.25, images=False),
}
