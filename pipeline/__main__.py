"""`python -m pipeline --manifest data.csv --output_dir out/ [Beam options]`."""

import sys

from pipeline.cli import convert_main

sys.exit(convert_main())
