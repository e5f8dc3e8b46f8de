# fieldwatch image: a static binary on a distroless, non-root base; it runs
# with a read-only root filesystem (state goes to --state-dir, a volume).
#   docker build -t fieldwatch:dev .
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/fieldwatch ./cmd/fieldwatch

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/fieldwatch /fieldwatch
USER 65532:65532
ENTRYPOINT ["/fieldwatch"]
CMD ["run", "--rules", "/etc/fieldwatch/rules.yaml"]
