# syntax=docker/dockerfile:1
# One image recipe for all five services; pick the service with the APP build arg:
#   docker build --build-arg APP=gateway -t anvil/gateway .
# APP is one of: gateway, inference-proxy, rollout-manager, middleware, trainer.
# The build stage is identical for every APP (the arg is only declared in the runtime stage), so
# BuildKit builds it once and the five images share it.

ARG NODE_IMAGE=node:20-bookworm
ARG NODE_RUNTIME_IMAGE=node:20-bookworm-slim

# ---------------------------------------------------------------------------------------------
FROM ${NODE_IMAGE} AS build
# npm ci's postinstall (tools/build/native.mjs) compiles the engine addon with node-gyp, which
# needs a C++ toolchain, python3 and the OpenBLAS headers.
RUN apt-get update \
 && apt-get install -y --no-install-recommends g++ make python3 libopenblas-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
ENV NX_DAEMON=false \
    NX_NO_CLOUD=true
# The whole tree (minus .dockerignore) goes in before `npm ci`: the postinstall needs the addon
# sources in libs/engine and the build scripts in tools/. The npm cache mount keeps rebuilds fast.
COPY . .
RUN --mount=type=cache,target=/root/.npm npm ci --no-audit --no-fund
RUN npm run build \
 && ls libs/engine/build/Release/*.node \
 && npm prune --omit=dev --no-audit --no-fund

# ---------------------------------------------------------------------------------------------
FROM ${NODE_RUNTIME_IMAGE} AS runtime
ARG APP
# The addon links libopenblas and OpenMP (libgomp) at run time.
RUN apt-get update \
 && apt-get install -y --no-install-recommends libopenblas0 libgomp1 \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /var/lib/anvil/checkpoints \
 && chown -R node:node /var/lib/anvil
WORKDIR /app
ENV NODE_ENV=production \
    APP=${APP} \
    HOST=0.0.0.0
COPY --from=build /app/package.json ./package.json
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY --from=build /app/libs/engine/build/Release/*.node ./libs/engine/build/Release/
# Fail the image build (not the container start) when APP is missing or names no service.
RUN test -n "${APP}" || { echo 'build with --build-arg APP=<service>' >&2; exit 1; }; \
    test -f "dist/apps/${APP}/src/main.js" || { echo "no dist/apps/${APP}/src/main.js" >&2; exit 1; }
USER node
# Every service serves /readyz on $PORT (libs/service-kit); node:20 has fetch, the slim image no curl.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=5 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.PORT||8080)+'/readyz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
# sh -c so that $APP (baked in from the build arg) is expanded; exec so that node replaces the
# shell and receives SIGTERM itself (compose also runs it under an init with `init: true`).
# The node flags are SERVICE_NODE_FLAGS (libs/config/src/node-flags.ts says why).
CMD ["sh", "-c", "exec node --max-semi-space-size=64 \"dist/apps/${APP}/src/main.js\""]
