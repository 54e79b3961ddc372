"""`python -m pipeline --manifest data.csv --output_dir out/ [Beam options]`."""

from pipeline.cli import convert_main, exit_now

exit_now(convert_main())
