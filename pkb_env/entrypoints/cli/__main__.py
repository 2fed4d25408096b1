"""`python -m pkb_env.entrypoints.cli` runs the command line (as the `pkb-env` script does)."""
import sys

from pkb_env.entrypoints.cli import main

sys.exit(main())
