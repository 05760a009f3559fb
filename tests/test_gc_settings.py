"""The collector's settings of `ehrxqa build` and the test workers (ehrxqa_pipeline.gc_settings)."""

import json
import subprocess
import sys


def test_many_steps_settings_freeze_what_is_loaded_and_raise_the_thresholds():
    code = ("import gc, json; from ehrxqa_pipeline import gc_settings; before = gc.get_threshold(); "
            "gc_settings.for_many_steps(); "
            "print(json.dumps([before, gc.get_threshold(), gc.get_freeze_count(), list(gc_settings.THRESHOLDS)]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    before, after, frozen, wanted = json.loads(out)
    assert before == [700, 10, 10] and after == wanted and after[0] > before[0]
    assert frozen > 1000  # the interpreter's and the imported modules' objects
