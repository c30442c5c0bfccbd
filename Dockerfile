# The agentor-temporal worker image: `docker compose up --scale worker=3`.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app

# dependencies first, so code edits do not reinstall them
COPY pyproject.toml README.md ./
COPY agentor_temporal ./agentor_temporal
COPY activities ./activities
COPY workflows ./workflows
COPY store ./store
COPY worker.py ./
RUN pip install . && useradd --create-home --uid 10001 agent \
    && mkdir -p /app/runs && chown agent /app/runs

COPY examples ./examples
USER agent

# SIGTERM: the worker stops polling and finishes in-flight activities
STOPSIGNAL SIGTERM
CMD ["python", "worker.py"]
