// OpenTelemetry preload: `node --import ./dist/telemetry.js dist/main.js`. It must run before the
// app's module graph loads, because pg and ioredis are patched as they are imported.
//
// ESM needs a loader hook for that (require-in-the-middle never sees `import`). Node 24 has
// synchronous in-thread hooks (module.registerHooks), which import-in-the-middle installs through
// `register-hooks.mjs`; older runtimes fall back to the off-thread `module.register` hook that
// @opentelemetry/instrumentation ships. `--import @opentelemetry/instrumentation/hook.mjs` alone
// does not register anything, and `--experimental-loader` hangs on Node 24: do not use either.
// test/integration/tracing.test.ts fails if pg or ioredis spans go missing.
import module from 'node:module';
import { register as registerSyncHooks, supportsSyncHooks } from 'import-in-the-middle/register-hooks.mjs';
import { registerTelemetry } from './observability/telemetry-handle.js';

const disabled = process.env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true';

if (!disabled) {
  if (supportsSyncHooks()) registerSyncHooks();
  else module.register('@opentelemetry/instrumentation/hook.mjs', import.meta.url);

  // Defaults for this service; every one can be overridden with the standard variable.
  process.env.OTEL_SERVICE_NAME ??= 'partner-agent-status';
  // Metrics go to Prometheus (prom-client) and logs to stdout (pino): export only traces.
  process.env.OTEL_METRICS_EXPORTER ??= 'none';
  process.env.OTEL_LOGS_EXPORTER ??= 'none';
  // Only what this service calls; the full set costs start-up time and adds noise (fs, dns, net).
  process.env.OTEL_NODE_ENABLED_INSTRUMENTATIONS ??= 'http,pg,ioredis,aws-sdk';

  // Imported after the hook is in place, so the instrumentations' own imports are seen too.
  const [{ NodeSDK }, { getNodeAutoInstrumentations }, { FastifyOtelInstrumentation }] = await Promise.all([
    import('@opentelemetry/sdk-node'),
    import('@opentelemetry/auto-instrumentations-node'),
    import('@fastify/otel'),
  ]);

  const unobserved = new Set(['/livez', '/readyz', '/metrics']);
  const sdk = new NodeSDK({
    instrumentations: [
      getNodeAutoInstrumentations({
        '@opentelemetry/instrumentation-http': {
          // Probes and scrapes would drown the traces of partner requests.
          ignoreIncomingRequestHook: (request) => unobserved.has((request.url ?? '').split('?')[0] ?? ''),
          // Never record request or response headers (x-api-key, authorization).
          headersToSpanAttributes: { client: { requestHeaders: [], responseHeaders: [] }, server: { requestHeaders: [], responseHeaders: [] } },
        },
        // Queries and commands outside a request (pool warm-up, readiness pings) are not traced.
        '@opentelemetry/instrumentation-pg': { requireParentSpan: true, enhancedDatabaseReporting: false },
        '@opentelemetry/instrumentation-ioredis': { requireParentSpan: true },
      }),
      new FastifyOtelInstrumentation({
        registerOnInitialization: true,
        ignorePaths: (options) => unobserved.has(options.url),
      }),
    ],
  });
  sdk.start();
  registerTelemetry({ shutdown: () => sdk.shutdown() });
}
