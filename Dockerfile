# Static binary on distroless, running as the non-root user 65532.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd ./cmd
COPY internal ./internal
COPY templates ./templates
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/flux-deploy-notifier ./cmd/flux-deploy-notifier

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/flux-deploy-notifier /flux-deploy-notifier
USER 65532:65532
EXPOSE 8080
VOLUME ["/data"]
ENTRYPOINT ["/flux-deploy-notifier"]
CMD ["serve", "--listen", "0.0.0.0:8080", "--data-dir", "/data", "--hmac-token-file", "/etc/flux-deploy-notifier/token"]
