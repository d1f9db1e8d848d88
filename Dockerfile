# The ManagedRunner operator image: `docker build -t <registry>/managed-runner-operator:<version> .`
#
# Two stages: the build stage turns the source into a wheel and installs it with its dependencies
# into a virtual environment; the final stage is a slim Python with that environment only (no
# compiler, no pip cache, no source tree), run as an unprivileged user. The same steps run in a
# clean virtual environment in tests/e2e/test_packaging.py, since no test engine builds images.
ARG PYTHON_IMAGE=python:3.12-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md requirements.lock ./
COPY operator/ operator/
# 1. the wheel; 2. a pip-less virtual environment; 3. the dependencies exactly as locked, every
# file checked against its sha256 (requirements.lock, written by scripts/lock); 4. the wheel alone.
RUN pip wheel --no-deps --wheel-dir /dist . \
 && python -m venv --without-pip /opt/venv \
 && pip --python /opt/venv/bin/python install --no-cache-dir --require-hashes -r requirements.lock \
 && pip --python /opt/venv/bin/python install --no-cache-dir --no-deps /dist/*.whl

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="managed-runner-operator" \
      org.opencontainers.image.description="Kubernetes operator for CoreWeave Sandbox managed runners"
# No .pyc writes at run time (the root filesystem is read-only in the chart), unbuffered logs.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH
RUN groupadd --system --gid 10001 runner-operator \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin runner-operator
COPY --from=build /opt/venv /opt/venv
USER 10001:10001
WORKDIR /tmp
# 8080: liveness (/healthz), 9090: Prometheus /metrics.
EXPOSE 8080 9090
ENTRYPOINT ["runner-operator", "run"]
CMD ["--all-namespaces", "--liveness=http://0.0.0.0:8080/healthz"]
