# tollgate as a static binary in an empty image. See docs/deploy.md.
#
#   docker build -t tollgate .
#   docker run --rm -p 8080:8080 -v "$PWD/examples:/etc/tollgate:ro" tollgate
#
# The builder is Alpine's Rust, whose native target is
# x86_64-unknown-linux-musl (no `rustup target add`), linked with
# +crt-static; Redis's TLS (native-tls) links Alpine's static OpenSSL.
ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-alpine AS build
RUN apk add --no-cache build-base musl-dev openssl-dev openssl-libs-static pkgconf perl ca-certificates
WORKDIR /src
COPY . .
# No debug info in the image's binary (the profile keeps it for profiling).
ENV OPENSSL_STATIC=1 \
    RUSTFLAGS="-C target-feature=+crt-static" \
    CARGO_PROFILE_RELEASE_DEBUG=0
RUN cargo build --release --locked -p tollgate --bin tollgate \
 && install -D -m 0755 target/release/tollgate /out/tollgate \
 && if readelf -l /out/tollgate | grep -q 'program interpreter'; then echo 'tollgate is not static' >&2; exit 1; fi \
 && /out/tollgate --version

FROM scratch
# For rediss:// stores: the static OpenSSL reads SSL_CERT_FILE.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/tollgate /tollgate
# A config to start with; mount yours over /etc/tollgate.
COPY examples/tollgate.yaml /etc/tollgate/tollgate.yaml
USER 65534:65534
EXPOSE 8080
ENTRYPOINT ["/tollgate"]
CMD ["serve", "--config", "/etc/tollgate/tollgate.yaml", "--listen", "0.0.0.0:8080"]
