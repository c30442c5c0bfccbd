"""Launcher kept at the repository's top level: `python worker.py --agents module:attr`.

The worker's code is `agentor_temporal.worker` (installed with the package);
this file only runs it, so `python worker.py ...`, the Dockerfile and
docker-compose keep working from a checkout.
"""

# stdlib only, so a stop signal during the worker's own imports (1-2 s) is said in one line
from agentor_temporal._ending import launching

if __name__ == "__main__":
    with launching(worker=True):
        from agentor_temporal.worker import launch

        launch()
