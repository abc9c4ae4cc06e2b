# minirag appliance: offline, CPU-only document search for AI agents, served over MCP.
#
# Hermetic build: nothing in here touches the network. On the host, first
#   make wheelhouse   # wheels for requirements-runtime.lock (hash-checked) + the project's own wheel
#   make models       # bakes the embedding model into models/baked
# then `make image` (or: docker build --build-arg BASE_IMAGE=... -t minirag:latest .).
#
# BASE_IMAGE: python:3.11-slim for users; on hosts without a registry, the local
# Debian bookworm base made by scripts/make_base_image.sh (Python 3.11 + tesseract).
# It must provide python3 3.11 with the venv module.
#
# LOCK: the dependency lock the virtualenv installs. requirements-runtime.lock is the
# appliance; requirements-cluster.lock adds Ray for `minirag sync --ray` and `ray start`
# (`make image-cluster`: minirag:cluster, its wheels from `make wheelhouse-cluster`).
#
# Behind a TLS-inspecting proxy: put the proxy's CA certificate(s) as *.crt files in
# docker/ca-certificates/ (git-ignored). They are trusted for the one networked step,
# the apt line that installs tesseract on a public base. The hermetic parts need none.
ARG BASE_IMAGE=python:3.11-slim
# The build stages' image: BASE_IMAGE itself, or (local base) the same plus binutils,
# so the virtualenv's shared libraries can be stripped of their symbol tables.
ARG BUILD_IMAGE=${BASE_IMAGE}
ARG MODEL_DIR=intfloat__multilingual-e5-small
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG UID=1000
ARG LOCK=requirements-runtime.lock

# ---------------------------------------------------------------------------
# wheels: the application in a virtualenv, from the host's wheelhouse only.
FROM ${BUILD_IMAGE} AS wheels
ARG LOCK
COPY ${LOCK} /build/requirements.lock
COPY wheelhouse/*.whl /build/wheelhouse/
# A self-contained virtualenv that the runtime stage copies as one directory.
RUN python3 -m venv /opt/minirag
# The locked dependencies, every file checked against its sha256; no index, no network.
RUN /opt/minirag/bin/pip install --no-cache-dir --no-index --find-links /build/wheelhouse \
        --require-hashes -r /build/requirements.lock
# The application itself (its own layer, so a code change does not reinstall the rest).
COPY wheelhouse/project/ /build/project/
RUN /opt/minirag/bin/pip install --no-cache-dir --no-index --no-deps /build/project/minirag_appliance-*.whl
# Nothing at run time installs packages; and what the appliance never loads goes (about 200 MB).
COPY docker/slim-venv.sh docker/strip-libs.sh /build/
RUN /opt/minirag/bin/pip uninstall -y -q pip \
    && sh /build/slim-venv.sh /opt/minirag/lib/python3.11/site-packages \
    && sh /build/strip-libs.sh /opt/minirag/lib/python3.11/site-packages

# ---------------------------------------------------------------------------
# models: the baked embedding model and dictionaries, verified against models/manifest.toml with
# the same code the application loads it with.
FROM wheels AS models
ARG MODEL_DIR
COPY models/baked/manifest.toml /models/manifest.toml
COPY models/baked/${MODEL_DIR}/ /models/${MODEL_DIR}/
# the cross-language dictionaries (13 MB of sorted text lookups, README "Cross-language keyword search")
COPY models/baked/debian__xling-dictionaries/ /models/debian__xling-dictionaries/
# A corrupt or half-baked model fails the build here, not the first query. Then make
# the files read-only for everyone (directories 555, files 444); COPY keeps the modes.
RUN /opt/minirag/bin/minirag models verify --models-dir /models && chmod -R a-w /models
# Smoke test of the slimmed virtualenv with the real parts: convert (worker process),
# embed, LanceDB write + BM25 + vector search, and the imports of the MCP server and of a fold (pylance).
RUN mkdir -p /tmp/smoke/docs \
    && printf '# Smoke test\n\nThe appliance indexes this sentence about wind turbines.\n' > /tmp/smoke/docs/a.md \
    && /opt/minirag/bin/minirag sync --base-dir /tmp/smoke/docs --db-path /tmp/smoke/index --models-dir /models >/dev/null \
    && /opt/minirag/bin/minirag query "wind turbines" --base-dir /tmp/smoke/docs --db-path /tmp/smoke/index \
         --models-dir /models --json | grep -q '/tmp/smoke/docs/a.md' \
    && /opt/minirag/bin/python -c "import appliance.adapters.mcp_server, appliance.adapters.http_server, lance" \
    && rm -rf /tmp/smoke

# ---------------------------------------------------------------------------
# runtime: what ships. No compilers, no pip, a non-root user, read-only models.
FROM ${BASE_IMAGE} AS runtime
ARG UID

# Extra CA certificates (TLS-inspecting proxies) for the apt step below.
COPY docker/ca-certificates/ /tmp/extra-ca/
RUN if ls /tmp/extra-ca/*.crt >/dev/null 2>&1; then \
        cp /tmp/extra-ca/*.crt /usr/local/share/ca-certificates/ && update-ca-certificates; \
    fi; rm -rf /tmp/extra-ca

# OCR for scanned PDFs and images, and jemalloc (below). The local debootstrap base
# already has them (installed with --include); a public base gets them from Debian here.
RUN if ! command -v tesseract >/dev/null || ! ls /usr/lib/*/libjemalloc.so.2 >/dev/null 2>&1; then \
        apt-get update \
        && apt-get install -y --no-install-recommends \
             tesseract-ocr tesseract-ocr-eng tesseract-ocr-deu tesseract-ocr-rus libjemalloc2 \
        && rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/* /usr/share/locale/*; \
    fi \
    && ln -sf "$(ls /usr/lib/*/libjemalloc.so.2 | head -n 1)" /usr/local/lib/libjemalloc.so.2 \
    && test -e /usr/local/lib/libjemalloc.so.2

# The unprivileged user everything runs as; /index is its only writable place.
RUN useradd --uid ${UID} --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin minirag \
    && mkdir -p /index /docs /etc/minirag \
    && chown minirag:minirag /index

COPY --from=wheels /opt/minirag /opt/minirag
COPY --from=models --chown=root:root /models /models
COPY docker/supervisord-stdio.conf docker/supervisord-daemon.conf /etc/minirag/

# Every process allocates with jemalloc: at 1M chunks glibc's malloc was a fifth of a query's CPU
# (appliance/platform/native_memory.py). A sync's rounds start without it and index under glibc.
ENV PATH=/opt/minirag/bin:$PATH \
    LD_PRELOAD=/usr/local/lib/libjemalloc.so.2 \
    LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MINIRAG_CONTAINER=1 \
    MODELS_DIR=/models \
    BASE_DIR=/docs \
    DB_PATH=/index \
    SYNC_INTERVAL=900 \
    MCP_HTTP_ADDRESS=0.0.0.0:8080 \
    HOME=/tmp \
    XDG_CACHE_HOME=/tmp/.cache \
    TMPDIR=/tmp \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    HF_DATASETS_OFFLINE=1 \
    HF_HUB_DISABLE_TELEMETRY=1 \
    DISABLE_TELEMETRY=1 \
    DO_NOT_TRACK=1 \
    HF_HUB_DISABLE_UPDATE_CHECK=1 \
    HF_HUB_DISABLE_IMPLICIT_TOKEN=1 \
    ORT_DISABLE_TELEMETRY=1

VOLUME ["/index"]
USER minirag
WORKDIR /tmp
EXPOSE 8080
STOPSIGNAL SIGTERM
# Daemon mode: the MCP HTTP endpoint answers and the index is readable. In stdio and
# one-shot modes the check is `status` alone (it answers even when misconfigured).
HEALTHCHECK --interval=60s --timeout=30s --start-period=60s --retries=3 \
    CMD ["python3", "-m", "appliance.adapters.entrypoint", "healthcheck"]
# No command: the MCP server on stdio plus the sync scheduler. `daemon`: MCP over HTTP
# plus the scheduler under supervisord. Anything else is a `minirag` subcommand.
ENTRYPOINT ["python3", "-m", "appliance.adapters.entrypoint"]
CMD []

# Last, so a new revision does not invalidate the layers above.
ARG VERSION
ARG REVISION
LABEL org.opencontainers.image.title="minirag appliance" \
      org.opencontainers.image.description="Offline, CPU-only document search for AI agents (hybrid vector + BM25 over LanceDB, MCP on stdio or HTTP)" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.vendor="minirag"
