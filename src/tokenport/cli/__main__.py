"""`python -m tokenport.cli` runs the command, as `python -m tokenport` does (cli.py ran as a script too)."""

import sys

from . import main

sys.exit(main())
