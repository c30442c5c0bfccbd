"""`python -m agentor_temporal` and the `agentor-temporal` console script: the command line.

Only stdlib is imported before `launching` is on, so a stop signal during the command's
own imports (1-2 s) is said in one line rather than killing it silently.
"""

from __future__ import annotations

import sys
from typing import NoReturn

from agentor_temporal._ending import launching


def main() -> NoReturn:
    """Run the command line (it ends the process itself)."""
    with launching(worker=sys.argv[1:2] == ["worker"]):
        from agentor_temporal.cli import main as run_command

        code = run_command()
    sys.exit(code)


if __name__ == "__main__":
    main()
