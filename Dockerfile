# syntax=docker/dockerfile:1
# dra-extender image: a kube-scheduler HTTP extender for DRA (resource.k8s.io/v1).
# Default command serves the embedded demo cluster (examples/cluster) on :8888. In a cluster the manifests
# (manifests/, `kubectl apply -k manifests/`) run it as a sidecar of a dedicated kube-scheduler with
# `serve --in-cluster --host=127.0.0.1 --port=8888 --scheduler-lease=dra-extender/dra-scheduler`.
#
# Build:  docker build -t dra-extender:0.1.0 --build-arg GIT_COMMIT=$(git rev-parse HEAD) .
# Run:    docker run --rm -p 8888:8888 dra-extender:0.1.0
#
# Reproducible: the base image is pinned by digest (same image in both stages: the venv's interpreter symlinks
# and console-script shebangs point at /usr/local/bin/python3.11 and /opt/venv), and every Python package by
# version and file hash (requirements-runtime.lock, `make lock`; pip refuses a file whose hash differs).
# Tag: python:3.11.11-slim-bookworm. The digest is the one public Dockerfiles pin for that tag (the tag is no
# longer updated); check it with `docker buildx imagetools inspect python:3.11.11-slim-bookworm` and change
# both together.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm@sha256:081075da77b2b55c23c088251026fb69a7b2bf92471e491ff5fd75c192fd38e5

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# Dependencies first (own layer, rebuilt only when the lock file changes). All pinned wheels are binary for
# CPython 3.11 manylinux x86_64, so no compiler is needed.
COPY requirements-runtime.lock ./
RUN pip install --require-hashes --no-deps -r requirements-runtime.lock
# Then the project itself, without touching the pinned dependency set. pyproject.toml names README.md as the
# package readme, so it must be in the build context.
COPY pyproject.toml README.md LICENSE ./
COPY app ./app
COPY allocator ./allocator
RUN pip install --no-deps . \
 && python -c "import app, allocator" \
 && dra-extender --help > /dev/null

FROM ${PYTHON_IMAGE} AS runtime
# The commit shown by `dra-extender --version` and dra_extender_build_info (app/config/buildinfo.py).
ARG GIT_COMMIT=unknown
LABEL org.opencontainers.image.title="dra-extender" \
      org.opencontainers.image.description="kube-scheduler extender that allocates Kubernetes DRA devices (resource.k8s.io/v1)" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="0.1.0"
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    DRA_EXTENDER_GIT_COMMIT=${GIT_COMMIT}
COPY --from=builder /opt/venv /opt/venv
WORKDIR /app
COPY LICENSE /app/LICENSE
COPY examples/ /app/examples/
# Non-root, numeric (works with runAsNonRoot without a passwd entry); nothing in the image needs to be writable.
USER 65532:65532
EXPOSE 8888
ENTRYPOINT ["dra-extender"]
CMD ["serve", "--state", "/app/examples/cluster", "--host", "0.0.0.0", "--port", "8888"]
