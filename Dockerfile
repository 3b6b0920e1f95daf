# syntax=docker/dockerfile:1
# ipxbridge appliance image: host networking, started as root only long enough for the
# entrypoint to check capabilities and step down to uid 10001 (setpriv, ambient caps).
#
#   docker build -t ipxbridge .
#   docker run -d --name ipxbridge --network host \
#     --cap-drop ALL --cap-add NET_BIND_SERVICE --cap-add NET_RAW \
#     --cap-add SETUID --cap-add SETGID \
#     --security-opt no-new-privileges:true --read-only --tmpfs /tmp \
#     -v /etc/ipxbridge/config.yaml:/etc/ipxbridge/config.yaml:ro \
#     -v ipxbridge-state:/var/lib/ipxbridge ipxbridge
#
# (deploy/docker-compose.yml does the same; deploy/docker/entrypoint.sh says why each
# capability is needed. Add --cap-add NET_ADMIN for the nftables kernel fast path.)
#
# Base image: the tag is pinned. It is not pinned by digest because the digest could not
# be looked up where this file was written (no registry access). Pin it with
# `--build-arg BASE=python:3.12-slim-bookworm@sha256:...` when you build for a release.
# Both stages use the same BASE: the venv's python symlink points at the base's interpreter
# (/usr/local/bin/python3.12 in the official image), which the runtime stage must have too.
# A BASE needs a `python` command with the venv module and util-linux's setpriv; the tests
# build on a Debian bookworm debootstrap with python3.11 (tests/integration/test_container.py).
# Use glibc (Debian), not Alpine: musllinux wheels of netifaces-plus lag behind.
ARG BASE=python:3.12-slim-bookworm

FROM ${BASE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
# For a build from a local wheelhouse, without PyPI: --build-arg PIP_NO_INDEX=1
# --build-arg PIP_FIND_LINKS=http://127.0.0.1:PORT/ with --network host (the tests serve one
# so; a `-v DIR:/wheels` build mount would leave an empty /wheels in the image). Unset by
# default, so pip uses PyPI. They stay in this stage: the runtime stage copies only the venv
# and the config.
ARG PIP_NO_INDEX
ARG PIP_FIND_LINKS
# Every dependency ships manylinux wheels. The compiler is for ipxbridge itself: setup.py
# compiles ipxbridge/wire and ipxbridge/policy with mypyc (the build requirement mypy brings
# it). gcc and libc6-dev, and Python's headers where the base has none (the official python
# images keep theirs in /usr/local/include; a Debian python3 needs python3-dev), stay in this
# stage: the runtime stage copies only the venv. The image must ship the compiled build, so
# the build fails if it is not (ipxbridge --version names the build).
# --build-arg WHEEL=FILE installs that wheel, compiled beforehand for this base's Python, from
# the wheelhouse at PIP_FIND_LINKS instead of building /src here, and needs no compiler (the
# tests install the wheel their run compiled: the same setup.py, built once).
ARG WHEEL
RUN if [ -n "$WHEEL" ]; then exit 0; fi \
    && apt-get update \
    && if python -c 'import pathlib, sys, sysconfig; \
            sys.exit(not pathlib.Path(sysconfig.get_paths()["include"], "Python.h").is_file())'; \
    then \
        apt-get install -y --no-install-recommends 'gcc=4:12.2.*' 'libc6-dev=2.36-*'; \
    else \
        apt-get install -y --no-install-recommends 'gcc=4:12.2.*' 'libc6-dev=2.36-*' \
            'python3-dev=3.11.2-*'; \
    fi \
    && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/ipxbridge
COPY pyproject.toml README.md setup.py /src/
COPY ipxbridge /src/ipxbridge
RUN if [ -n "$WHEEL" ]; then package="$PIP_FIND_LINKS$WHEEL"; else package=/src; fi \
    && /opt/ipxbridge/bin/pip install "$package" \
    && /opt/ipxbridge/bin/ipxbridge --version \
    && /opt/ipxbridge/bin/python -c 'import sys; from ipxbridge import build; \
        sys.exit(build.build() != "compiled")' \
    && mkdir -p /rootfs/etc/ipxbridge \
    && /opt/ipxbridge/bin/ipxbridge print-default-config > /rootfs/etc/ipxbridge/config.yaml \
    && /opt/ipxbridge/bin/ipxbridge check-config /rootfs/etc/ipxbridge/config.yaml

FROM ${BASE}
LABEL org.opencontainers.image.title="ipxbridge" \
      org.opencontainers.image.description="IPX-over-UDP bridge, DirectPlay game list and LAN broadcast relay (host networking)" \
      org.opencontainers.image.licenses="MIT"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PATH=/opt/ipxbridge/bin:$PATH
# nftables is only for the optional kernel fast path (needs --cap-add NET_ADMIN too).
# Build with --build-arg WITH_NFTABLES=0 to leave it out. setpriv comes from util-linux,
# which is Essential in Debian 12 and so already in the base. The version pin keeps the
# upstream release and takes Debian's security revisions (hadolint DL3008).
ARG WITH_NFTABLES=1
RUN if [ "$WITH_NFTABLES" = 1 ]; then \
        apt-get update \
        && apt-get install -y --no-install-recommends 'nftables=1.0.6-*' \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && groupadd --system --gid 10001 ipxbridge \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin ipxbridge \
    && install -d -m 0700 -o 10001 -g 10001 /var/lib/ipxbridge
COPY --from=build /opt/ipxbridge /opt/ipxbridge
COPY --from=build /rootfs/etc/ipxbridge/config.yaml /etc/ipxbridge/config.yaml
COPY --chmod=0755 deploy/docker/entrypoint.sh /usr/local/bin/ipxbridge-entrypoint
COPY --chmod=0644 deploy/docker/healthcheck.py /usr/local/lib/ipxbridge/healthcheck.py
# Documentation only: with --network host these are the host's ports and -p is ignored.
# 213/udp: IPX tunnel; 9213/tcp: HTTP API, metrics and health (127.0.0.1 by default);
# 1900/tcp: browser players (js-dos over a WebSocket); 47624/udp and 6073/udp: the
# DirectPlay 4/8 discovery broadcasts the relay fans out.
EXPOSE 213/udp 9213/tcp 1900/tcp 47624/udp 6073/udp
# The node key (ipx.node_key_file): the bridge creates it on first start and needs it again
# after a restart or an upgrade, so clients keep their nodes. A volume is writable under
# --read-only; name it (docker run -v ipxbridge-state:/var/lib/ipxbridge) so it outlives the
# container. A new named volume starts as this directory: owned by 10001, mode 0700.
VOLUME ["/var/lib/ipxbridge"]
# There is no USER line: the entrypoint must start as root so it can check capabilities,
# then it switches to 10001 (ipxbridge) with setpriv. Started with --user, it just execs.
HEALTHCHECK --interval=30s --timeout=3s --start-period=10s --retries=3 \
    CMD ["/opt/ipxbridge/bin/python", "-I", "/usr/local/lib/ipxbridge/healthcheck.py"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/ipxbridge-entrypoint"]
CMD ["run", "--config", "/etc/ipxbridge/config.yaml"]
