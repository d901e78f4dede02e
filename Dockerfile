# syntax=docker/dockerfile:1
# Switchyard container image: `docker build -t switchyard .`
#   docker run --rm -p 8080:8080 switchyard          # serves deploy/switchyard.yaml
#   docker run --rm -p 8080:8080 -e UPSTREAM_BASE_URL=http://host:8000/v1 switchyard
# Mount your own config over /etc/switchyard/switchyard.yaml and policies under
# /etc/switchyard/policies (hot-reloaded on save, as outside a container).

# --- build: the release binary (fat LTO, see Cargo.toml; profile-guided by the profile
# in pgo/, through scripts/rustc-pgo: README "Two commands") ------------------------
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
# .git is not sent (.dockerignore): `docker build --build-arg SWITCHYARD_COMMIT=$(git
# rev-parse --short=12 HEAD) .` names the commit in `switchyard --version`.
ARG SWITCHYARD_COMMIT=unknown
ENV SWITCHYARD_COMMIT=${SWITCHYARD_COMMIT}
# BuildKit cache mounts keep the crate registry and the dependency builds between
# image builds.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked \
    && install -D -m 0755 target/release/switchyard /out/switchyard

# --- runtime: Debian slim, CA roots for HTTPS providers, a non-root user -------------
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home --home-dir /etc/switchyard switchyard
COPY --from=build /out/switchyard /usr/local/bin/switchyard
COPY deploy/switchyard.yaml /etc/switchyard/switchyard.yaml
WORKDIR /etc/switchyard
USER 10001:10001
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["switchyard", "health", "--url", "http://127.0.0.1:8080/health"]
ENTRYPOINT ["switchyard"]
CMD ["serve", "--config", "/etc/switchyard/switchyard.yaml"]
