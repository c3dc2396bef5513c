# syntax=docker/dockerfile:1
#
# partner-agent-status image.
#   build     - all dependencies (esbuild and the other dev tools), bundles src/ into dist/
#   prod-deps - production dependencies only
#   runtime   - distroless Node 24: node and the app, no shell, no package manager, non-root
#
# The image holds no key, credential or configuration: everything comes from the environment and
# the mounted partner-keys file at run time (see charts/partner-agent-status).
#
# Pin the bases by digest in your registry mirror when you can (e.g. via Renovate); the tags
# below are the readable pin.
ARG BUILD_IMAGE=node:24.21.0-bookworm-slim
ARG RUNTIME_IMAGE=gcr.io/distroless/nodejs24-debian12:nonroot

FROM ${BUILD_IMAGE} AS build
WORKDIR /app
ENV NPM_CONFIG_UPDATE_NOTIFIER=false NPM_CONFIG_FUND=false NPM_CONFIG_AUDIT=false
COPY package.json package-lock.json ./
# Install scripts run here on purpose: package.json's allowScripts approves the `node`
# devDependency, whose script fetches the Node 24 binary that npm scripts run on.
RUN --mount=type=cache,target=/root/.npm npm ci
COPY tsconfig.json ./
COPY scripts/build.ts ./scripts/
COPY src ./src
RUN npm run build \
 && test -f dist/main.js \
 && test -f dist/telemetry.js \
 && test -f dist/db/migrate-cli.js \
 && test -f dist/keys.js \
 && ls dist/db/migrations/*.sql >/dev/null

FROM ${BUILD_IMAGE} AS prod-deps
WORKDIR /app
ENV NPM_CONFIG_UPDATE_NOTIFIER=false NPM_CONFIG_FUND=false NPM_CONFIG_AUDIT=false
COPY package.json package-lock.json ./
# No install scripts: production dependencies are plain JavaScript, and the `node` binary
# package is a devDependency that must not end up in the image.
RUN --mount=type=cache,target=/root/.npm npm ci --omit=dev --ignore-scripts

FROM ${RUNTIME_IMAGE} AS runtime
WORKDIR /app
ENV NODE_ENV=production
# Heap bounds for the chart's default 512Mi memory limit, the same as `npm start` sets. The semi-space
# is set with the old-space limit: a small old space alone shrinks the young generation and
# throughput collapses. --expose-gc lets the service return start-up's memory before it takes
# traffic (src/main.ts). The chart's nodeOptions value overrides this.
ENV NODE_OPTIONS="--max-old-space-size=256 --max-semi-space-size=16 --expose-gc"
# package.json is needed at run time: its "type": "module" makes dist/*.js ES modules.
# Files stay owned by root and read-only for the service's user.
COPY package.json ./
COPY --from=prod-deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
# The distroless "nonroot" user, numerically, so Kubernetes can verify runAsNonRoot.
USER 65532:65532
# 8080: partner API and /livez, /readyz. 9464: Prometheus /metrics.
EXPOSE 8080 9464
# The entrypoint is node itself. Other commands of the same image:
#   migrations: args ["dist/db/migrate-cli.js"]
#   the operator's key tool: args ["dist/keys.js", "list", "--secret-id", "<secret>"] (README, For SREs)
ENTRYPOINT ["/nodejs/bin/node"]
CMD ["--import", "./dist/telemetry.js", "dist/main.js"]
