"""``python -m ehrxqa_pipeline.cli``: the same command as the ``ehrxqa`` script."""

import sys

from ehrxqa_pipeline.cli import console

if __name__ == "__main__":
    sys.argv[0] = "ehrxqa"  # usage and error lines name the command, not __main__.py
    console()
