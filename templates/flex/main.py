"""The Flex Template's entry point (FLEX_TEMPLATE_PYTHON_PY_FILE): `python -m image_tfrecords`.

The launcher runs this file with every template parameter as --name=value, plus the Beam
options of the launch (--runner, --project, --region, --setup_file, ...). A Flex Template
launch must return once the job is submitted, hence --no_wait_until_finish: the job
writes summary.json itself when it ends. All worker code is in the installed packages,
so nothing of this file's __main__ is needed on a worker.
"""

import sys

from image_tfrecords.pipeline.cli import convert_main, exit_now

if __name__ == "__main__":
    exit_now(convert_main([*sys.argv[1:], "--no_wait_until_finish"]))
