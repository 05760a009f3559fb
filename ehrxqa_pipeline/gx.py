"""Great Expectations, imported after the environment it reads is set (``config.quiet_third_parties``: no usage
analytics leave the machine, no progress bars in the logs). ``quality.check_gx`` imports it from here. The
forkserver of the runs the UI launches preloads this module (``definitions.START_METHOD``): a check step forked
from it does not import Great Expectations again (about 3 s of CPU a step). So does the worker server that
`ehrxqa build` starts as it begins (``workers``), whose worker then runs the build's contract suites.

Importing Great Expectations imports every built-in expectation, and one of them
(``expect_column_kl_divergence_to_be_less_than``) imports ``scipy.stats`` at module level for use inside its
methods only (``from scipy import stats``). No data contract uses it (``contracts.rules.gx_expectations``), yet
that import was a fifth of the whole: 1.1-1.3 s of 4-6 s on the 2-core machine, paid by every process that runs
a contract check. ``DEFERRED`` modules are registered lazily first
(``importlib.util.LazyLoader``): they load in full on first attribute access, so anything that does use them
gets the real module. Only a submodule bound to its package that way stays deferred: a plain ``import x`` of a
lazy module reads its ``__spec__`` and so loads it at once (the same expectation's ``import altair``)."""

import importlib.util
import sys

from ehrxqa_pipeline.config import quiet_third_parties

DEFERRED = ("scipy.stats",)


def defer(name: str) -> None:
    """Register ``name`` so that its code runs on first attribute access, not on import. Nothing to do when it
    is imported already or not installed."""
    if name in sys.modules:
        return
    parent, _, child = name.rpartition(".")
    try:
        spec = importlib.util.find_spec(name)  # imports the parent package, if any
    except ModuleNotFoundError:  # the parent is not installed
        return
    if spec is None or spec.loader is None:
        return
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    if parent:
        setattr(sys.modules[parent], child, module)  # as the import system binds a submodule to its package


quiet_third_parties()
for _name in DEFERRED:
    defer(_name)

import great_expectations as gx  # noqa: E402
from great_expectations.data_context.types.base import ProgressBarsConfig  # noqa: E402

__all__ = ["ProgressBarsConfig", "gx"]
