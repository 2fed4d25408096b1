"""`python -m pkb_env.cli` runs the command line (as the `pkb-env` script does)."""
import sys

from pkb_env.cli import main

sys.exit(main())
