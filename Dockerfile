# tollgate as a static binary in an empty image. See docs/deploy.md.
#
#   docker build -t tollgate .
#   docker run --rm -p 8080:8080 -e TOLLGATE_CHECK_TOKEN=… -e TOLLGATE_ADMIN_TOKEN=… \
#     -e TOLLGATE_METRICS_TOKEN=… -e TOLLGATE_AUTHORIZE_TOKEN=… tollgate
#
# It serves deploy/container/tollgate.yaml on 0.0.0.0:8080, which requires
# all four tokens (random, 16 bytes or more): it does not start open.
#
# The builder is Alpine's Rust, whose native target is
# x86_64-unknown-linux-musl (no `rustup target add`), linked with
# +crt-static; Redis's TLS (native-tls) links OpenSSL built from source into
# the binary (the server's `static-openssl` feature, openssl's `vendored`).
# scripts/static-build builds with the same command and runs the result from
# an empty root where no container engine is at hand.
ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-alpine AS build
RUN apk add --no-cache build-base musl-dev perl ca-certificates
WORKDIR /src
COPY . .
# No debug info in the image's binary (the profile keeps it for profiling).
# An explicit --target keeps RUSTFLAGS off the build scripts and proc macros:
# they are built for the host, and a proc macro cannot link its C runtime
# statically.
ENV RUSTFLAGS="-C target-feature=+crt-static" \
    CARGO_PROFILE_RELEASE_DEBUG=0
RUN cargo build --release --locked --target x86_64-unknown-linux-musl -p tollgate --bin tollgate --features static-openssl \
 && install -D -m 0755 target/x86_64-unknown-linux-musl/release/tollgate /out/tollgate \
 && if readelf -l /out/tollgate | grep -q 'program interpreter'; then echo 'tollgate is not static' >&2; exit 1; fi \
 && if readelf -d /out/tollgate | grep -q '(NEEDED)'; then echo 'tollgate needs shared libraries' >&2; exit 1; fi \
 && /out/tollgate --version

FROM scratch
# For rediss:// stores: the static OpenSSL reads SSL_CERT_FILE.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/tollgate /tollgate
# A config to start with, every endpoint behind its token; mount yours
# over /etc/tollgate.
COPY deploy/container/tollgate.yaml /etc/tollgate/tollgate.yaml
USER 65534:65534
EXPOSE 8080
ENTRYPOINT ["/tollgate"]
CMD ["serve", "--config", "/etc/tollgate/tollgate.yaml", "--listen", "0.0.0.0:8080"]
