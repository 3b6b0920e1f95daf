# syntax=docker/dockerfile:1
# ipxbridge appliance image. Run with host networking:
#   docker run --network host --cap-drop ALL --cap-add NET_BIND_SERVICE ipxbridge
# (The hardened non-root entrypoint and HEALTHCHECK arrive with the deployment work.)

FROM python:3.12-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/ipxbridge
COPY pyproject.toml README.md /src/
COPY ipxbridge /src/ipxbridge
RUN /opt/ipxbridge/bin/pip install /src

FROM python:3.12-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PATH=/opt/ipxbridge/bin:$PATH
COPY --from=build /opt/ipxbridge /opt/ipxbridge
EXPOSE 213/udp
ENTRYPOINT ["ipxbridge"]
CMD ["run"]
