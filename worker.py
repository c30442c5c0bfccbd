"""Launcher kept at the repository's top level: `python worker.py --agents module:attr`.

The worker's code is `agentor_temporal.worker` (installed with the package);
this file only runs it, so `python worker.py ...`, the Dockerfile and
docker-compose keep working from a checkout.
"""

from agentor_temporal.worker import launch

if __name__ == "__main__":
    launch()
