# syntax=docker/dockerfile:1
#
# gpu-admission webhook image: `docker build -t registry.example.com/gpu-admission:0.1.0 .`
# Runs as uid/gid 10001 with a read-only root filesystem (the Deployment mounts /tmp, /dev/shm and
# the prometheus multiprocess dir as emptyDirs).
#
# The base image is pinned by version (the Python minor CI runs); pin it by digest as well in your
# registry mirror. Runtime dependencies are pinned below to the versions the test suite ran against;
# keep them in step with pyproject.toml when dependencies change.

ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
COPY <<PINS /tmp/constraints.txt
annotated-types==0.8.0
blinker==1.9.0
certifi==2026.10.19.post1
cffi==2.1.1
charset-normalizer==3.5.3
click==8.5.1
cryptography==50.0.2
durationpy==0.11
flask==3.1.3
gunicorn==27.0.1
idna==3.20
itsdangerous==2.2.0
jinja2==3.1.6
jsonpatch==1.48
jsonpointer==3.12
kubernetes==37.0.2
markupsafe==3.0.4
oauthlib==4.0.1
orjson==3.13.0
prometheus-client==0.26.0
pycparser==3.12
pydantic==2.14.4
pydantic-core==2.50.5
python-dateutil==4.0.0
pyyaml==6.0.4
requests==2.34.2
requests-oauthlib==2.0.0
typing-extensions==4.16.0
typing-inspection==0.4.5
urllib3==2.8.0
websocket-client==1.9.2
werkzeug==3.1.9
PINS
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
