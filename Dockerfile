# fieldwatch image for users with Docker: the static binary on an empty
# base, non-root; it runs with a read-only root filesystem (state goes to
# --state-dir, a volume). `make image` builds the same layout without
# Docker (hack/image) into bin/fieldwatch-image.tar.
#   docker build --build-arg VERSION=$(git describe --tags --always) -t fieldwatch:dev .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/fieldwatch ./cmd/fieldwatch

FROM scratch
ARG VERSION=dev
LABEL org.opencontainers.image.title=fieldwatch \
      org.opencontainers.image.version=${VERSION} \
      org.opencontainers.image.source=https://github.com/fieldwatch/fieldwatch
COPY --from=build /out/fieldwatch /fieldwatch
USER 65532:65532
ENTRYPOINT ["/fieldwatch"]
CMD ["run", "--rules", "/etc/fieldwatch/rules.yaml"]
