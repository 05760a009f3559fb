"""Validation results: each problem (severity, file, column, message, fix) and the printed report."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .errors import SourceError


@dataclass(frozen=True)
class Problem:
    severity: str  # "error" | "warning" | "note" (a count to know, e.g. rows out of scope; never a problem)
    file: str  # relative to the source root
    column: str | None
    message: str
    fix: str

    @classmethod
    def from_error(cls, err: SourceError, severity: str = "error") -> Problem:
        return cls(severity, err.file, err.column, err.detail, err.fix)


@dataclass
class ValidationReport:
    root: Path
    problems: list[Problem] = field(default_factory=list)
    stats: dict = field(default_factory=dict)
    files: dict[str, dict] = field(default_factory=dict)  # relative path -> {"table", "rows", "status"}

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]

    @property
    def notes(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "note"]

    def status(self, rel: str) -> str:
        entry = self.files.get(rel, {})
        if entry.get("status"):
            return entry["status"]
        severities = {p.severity for p in self.problems if p.file == rel}
        return "ERROR" if "error" in severities else "warning" if "warning" in severities else "ok"

    def format(self) -> str:
        lines = [f"Source root: {self.root}"]
        for r in self.stats.get("releases", {}).values():
            paper = "the paper's release" if r["version"] == r["paper"] else f"the paper used {r['paper']}"
            lines.append(f"  {r['title']} {r['version']} in {r['folder']}/ ({paper})")
        lines += ["", f"  {'status':<8} {'rows':>12}  file"]
        for rel, entry in self.files.items():
            rows = "-" if entry.get("rows") is None else f"{entry['rows']:,}"
            lines.append(f"  {self.status(rel):<8} {rows:>12}  {rel}")
        if self.stats.get("images_found") is not None:
            lines.append(f"\n  {self.stats['images_found']:,} JPEG images under "
                         f"{self.stats.get('images_dir', 'files/')}")
        for severity, title in (("error", "Errors"), ("warning", "Warnings"), ("note", "Notes")):
            group = [p for p in self.problems if p.severity == severity]
            if group:
                lines += ["", f"{title} ({len(group)}):"]
                for p in group:
                    lines.append(f"  - {p.file}: {p.message}")
                    lines.append(f"    fix: {p.fix}")
        n_err, n_warn = len(self.errors), len(self.warnings)
        lines += ["", f"Result: {'OK' if self.ok else 'FAILED'} ({n_err} error{'s' * (n_err != 1)}, "
                      f"{n_warn} warning{'s' * (n_warn != 1)})"]
        return "\n".join(lines)
