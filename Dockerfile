# creditgate, production image: `docker build -t creditgate .`; run it with PostgreSQL and Redis through
# docker-compose.yml (README "Running with Docker"). The service runs as the unprivileged `node` user,
# listens on 0.0.0.0:8080, and keeps the embedded database (when DATABASE_URL is unset) in /data.

# Node 24 LTS; package.json's `engines` also allows 22.12 or later (NODE_IMAGE=node:22-bookworm-slim).
ARG NODE_IMAGE=node:24-bookworm-slim

# ---- build: every dependency (TypeScript, types, vite), then dist/ with the console ---------------
FROM ${NODE_IMAGE} AS build
WORKDIR /app
# The workspace manifests first: the dependency layer stays cached until one of them changes.
COPY package.json package-lock.json ./
COPY packages/client/package.json packages/client/
COPY examples/hosted-server/package.json examples/hosted-server/
COPY examples/stdio-server/package.json examples/stdio-server/
# --ignore-scripts: the root "prepare" would build before the sources are copied; the build below runs it.
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src src
COPY packages/client packages/client
# The console (docs/console.md): built by vite into dist/console, its size checked by the budget script.
COPY console console
COPY scripts/console-budget.mjs scripts/
RUN npm run build

# ---- production dependencies only ------------------------------------------------------------------
FROM ${NODE_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json ./
COPY packages/client/package.json packages/client/
COPY examples/hosted-server/package.json examples/hosted-server/
COPY examples/stdio-server/package.json examples/stdio-server/
# The lock file covers the workspaces, so their manifests must be present; --workspaces=false leaves out
# the links to them (the service imports neither the SDK nor the examples).
RUN npm ci --omit=dev --workspaces=false --ignore-scripts --no-audit --no-fund && npm cache clean --force

# ---- runtime -------------------------------------------------------------------------------------------
FROM ${NODE_IMAGE}
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=8080 \
    DATA_DIR=/data
WORKDIR /app
# Owned by root and read-only to the service: only /data is writable.
COPY --from=deps /app/node_modules node_modules
COPY package.json LICENSE ./
COPY migrations migrations
COPY --from=build /app/dist dist
RUN mkdir -p /data && chown node:node /data && chmod 0700 /data
USER node
VOLUME ["/data"]
EXPOSE 8080
# No curl in the slim image: Node's own fetch asks /healthz.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 8080) + '/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# `serve` runs the migrations first (instances starting together take turns through an advisory lock).
# The Node flags are the start script's (package.json; docs/operations-memory.md, "V8's heap").
CMD ["node", "--heap-growing-percent=50", "dist/cli.js", "serve"]
