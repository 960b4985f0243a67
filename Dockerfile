# syntax=docker/dockerfile:1
#
# gpu-admission webhook image: `docker build -t registry.example.com/gpu-admission:0.1.0 .`
# Runs as uid/gid 10001 with a read-only root filesystem (the Deployment mounts /tmp, /dev/shm and
# the prometheus multiprocess dir as emptyDirs).
#
# The base image is pinned by version (the Python minor CI runs); pin it by digest as well in your
# registry mirror. Every runtime dependency, direct and transitive, is pinned in constraints.txt to the
# version the test suite ran against (tests/deploy/test_manifests.py keeps it complete).

ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
COPY constraints.txt /tmp/constraints.txt
WORKDIR /src
COPY pyproject.toml README.md ./
COPY webhook ./webhook
# --constraint pins every runtime dependency; the project itself is built from this source tree.
RUN pip install --constraint /tmp/constraints.txt . \
 && pip check

FROM ${PYTHON_IMAGE}
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN groupadd --system --gid 10001 gpu-admission \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin gpu-admission
COPY --from=build /opt/venv /opt/venv
# The shipped default policy; in Kubernetes the ConfigMap mount takes its place.
COPY policies/ /etc/gpu-admission/policy/
USER 10001:10001
EXPOSE 8443 9102
ENTRYPOINT ["gpu-admission"]
CMD ["serve", "--policy", "/etc/gpu-admission/policy", \
     "--tls-cert", "/etc/gpu-admission/tls/tls.crt", "--tls-key", "/etc/gpu-admission/tls/tls.key", \
     "--bind", "0.0.0.0:8443", "--metrics-bind", "0.0.0.0:9102"]
