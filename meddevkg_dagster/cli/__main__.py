"""`python -m meddevkg_dagster.cli`: the `meddevkg` command where its entry point is not installed."""

import sys

from meddevkg_dagster.cli.command_line import main

if __name__ == "__main__":
    sys.exit(main())
