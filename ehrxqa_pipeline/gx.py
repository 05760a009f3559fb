"""Great Expectations, imported after the environment it reads is set (``config.quiet_third_parties``: no usage
analytics leave the machine, no progress bars in the logs). ``quality.check_gx`` imports it from here. The
forkserver of the runs the UI launches preloads this module (``definitions.START_METHOD``): a check step forked
from it does not import Great Expectations again (about 3 s of CPU a step)."""

from ehrxqa_pipeline.config import quiet_third_parties

quiet_third_parties()

import great_expectations as gx  # noqa: E402
from great_expectations.data_context.types.base import ProgressBarsConfig  # noqa: E402

__all__ = ["ProgressBarsConfig", "gx"]
