# The agentor-temporal worker image: `docker compose up --scale worker=3`.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

# The package installs from /src as one top-level name, agentor_temporal
# (workflows/, activities/ and store/ map inside it); /app then holds only the
# launcher and the examples, so nothing in the working directory shadows it.
WORKDIR /src
COPY pyproject.toml README.md ./
COPY agentor_temporal ./agentor_temporal
COPY activities ./activities
COPY workflows ./workflows
COPY store ./store
RUN pip install "/src[encryption]" && useradd --create-home --uid 10001 agent \
    && mkdir -p /app/runs && chown agent /app/runs

WORKDIR /app
COPY worker.py ./
COPY examples ./examples
USER agent

# SIGTERM: the worker stops polling and finishes in-flight activities
STOPSIGNAL SIGTERM
CMD ["python", "worker.py"]
