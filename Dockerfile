# syntax=docker/dockerfile:1
# hookgate in an image of its own: one static binary (musl, the `dist` profile) and nothing
# else — no shell, no libc, no package manager. README "Install" has the commands:
#
#   docker build -t hookgate .
#   docker run -p 8080:8080 -v hookgate-data:/data -e HOOKGATE_API_KEY=change-me hookgate
#
# The config is /etc/hookgate/hookgate.yaml (packaging/container/hookgate.yaml, which reads the
# key and, for a cluster, the database URL from the environment); mount your own over it.

FROM rust:1.95-bookworm AS build
# wasm32-wasip2: the build compiles the bundled plugins (plugins/) into the binary.
RUN rustup target add x86_64-unknown-linux-musl wasm32-wasip2 \
 && apt-get update \
 && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# A build context without .git names its commit here: --build-arg HOOKGATE_COMMIT=$(git rev-parse --short=12 HEAD)
ARG HOOKGATE_COMMIT=
ENV HOOKGATE_COMMIT=${HOOKGATE_COMMIT}
RUN cargo build --locked --profile dist --target x86_64-unknown-linux-musl -p hookgate --bin hookgate
# What the empty image needs besides the binary, made here because scratch has no shell: a
# non-root user to run as, its data folder, a temp folder for SQLite, and the config.
RUN mkdir -p /rootfs/data/plugins /rootfs/etc/hookgate /rootfs/tmp \
 && echo 'hookgate:x:10001:10001:hookgate:/data:/hookgate' > /rootfs/etc/passwd \
 && echo 'hookgate:x:10001:' > /rootfs/etc/group \
 && chown -R 10001:10001 /rootfs/data \
 && chmod 1777 /rootfs/tmp \
 && cp packaging/container/hookgate.yaml /rootfs/etc/hookgate/hookgate.yaml \
 && cp target/x86_64-unknown-linux-musl/dist/hookgate /rootfs/hookgate

FROM scratch
COPY --from=build /rootfs/ /
USER 10001:10001
WORKDIR /data
VOLUME /data
EXPOSE 8080
ENV HOOKGATE_LOG_FORMAT=json
# Healthy = ready to take events (`GET /readyz`: the store takes writes); a container that is
# not stays running and becomes healthy again once the disk or the database is back.
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 CMD ["/hookgate", "healthcheck", "--ready"]
ENTRYPOINT ["/hookgate"]
CMD ["serve", "--config", "/etc/hookgate/hookgate.yaml"]
