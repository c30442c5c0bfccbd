"""`python -m agentor_temporal`: the `agentor-temporal` command line."""

import sys

from agentor_temporal.cli import main

sys.exit(main())
