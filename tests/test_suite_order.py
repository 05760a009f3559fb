"""The order in which `make test` hands files to its two xdist workers (tests/conftest.py): the whole-graph files,
then the long ones, longest first. xdist sets a worker's own --dist option to "no", so the order must be decided
from the controller's command line; until this test it was not, and the long files ran last (one worker idle
for the last 15 s of the suite)."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import FIRST_FILES, LONG_FILES, _dist

ROOT = Path(__file__).resolve().parents[1]


def _worker(*argv: str) -> SimpleNamespace:
    return SimpleNamespace(workerinput={"mainargv": ["pytest", *argv]}, option=SimpleNamespace(dist="no"))


@pytest.mark.parametrize("config, expected", [
    (_worker("-n", "2", "--dist", "loadfile", "-q"), "loadfile"),
    (_worker("-n", "2", "--dist=loadfile"), "loadfile"),
    (_worker("-n", "2", "-m", "not slow"), "no"),  # make test-fast: xdist's default, single tests
    (SimpleNamespace(option=SimpleNamespace(dist="loadfile")), "loadfile"),  # the controller itself
    (SimpleNamespace(option=SimpleNamespace()), "no"),  # no xdist
])
def test_the_dist_mode_is_the_controllers(config, expected):
    assert _dist(config) == expected


def test_make_test_hands_out_whole_files_in_the_order_of_files_that_exist():
    recipe = (ROOT / "Makefile").read_text().split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert "--dist loadfile" in recipe and "--no-loadscope-reorder" in recipe
    ordered = FIRST_FILES + LONG_FILES
    assert len(set(ordered)) == len(ordered)
    assert [p for p in ordered if not (ROOT / p).is_file()] == []  # a renamed file would silently lose its place
