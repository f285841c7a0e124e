# Build: a static binary, no cgo.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/gateway .

# Run: nothing but the binary, its example config and CA roots, as non-root.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gateway /usr/local/bin/gateway
COPY gateway.hcl /etc/gateway/gateway.hcl
USER nonroot:nonroot
# 8443/udp: HTTP/3 when listen.http3 is on.
EXPOSE 8080 8443 8443/udp 9901
ENTRYPOINT ["/usr/local/bin/gateway"]
CMD ["run", "-config", "/etc/gateway/gateway.hcl"]
