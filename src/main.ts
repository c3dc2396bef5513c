// Process entry (npm start): configuration, the service, listening, and the drain on SIGTERM.
// Telemetry is preloaded with `--import ./dist/telemetry.js` before this module loads.
import closeWithGrace from 'close-with-grace';
import { type Config, ConfigError, loadConfig } from './config.js';
import { createLogger } from './observability/logger.js';
import { shutdownTelemetry } from './observability/telemetry-handle.js';
import { createService, type Service } from './service.js';

let config: Config;
try {
  config = loadConfig();
} catch (error) {
  if (!(error instanceof ConfigError)) throw error;
  console.error(`configuration error: ${error.message}`);
  process.exit(1);
}

const logger = createLogger(config.logLevel);
let service: Service;
try {
  service = await createService(config, { logger });
} catch (error) {
  logger.fatal({ reason: (error as Error).message, kind: (error as Error).name }, 'service could not start');
  await shutdownTelemetry();
  process.exit(1);
}

// Before taking traffic, one full collection that returns memory to the operating system: start-up
// leaves garbage and a young generation grown towards its maximum (--max-semi-space-size) behind,
// a sizeable part of an idle replica's RSS (the benchmark's memory figure). It runs once, and needs
// --expose-gc, which npm start, the Dockerfile and the chart set with the heap flags; without the
// flag it is skipped. Under load the young generation grows back to the size the flags allow.
// The servers are made ready first: compiling the routes' schemas and serializers is start-up's
// largest allocation, and after the collection it grew the young generation back (4 MiB of RSS).
await service.app.ready();
await service.metricsServer.ready();
(globalThis as { gc?: (options: object) => void }).gc?.({ type: 'major', execution: 'sync', flavor: 'last-resort' });

await service.app.listen({ port: config.port, host: config.host });
await service.metricsServer.listen({ port: config.metricsPort, host: config.host });
logger.info({ port: config.port, metricsPort: config.metricsPort, keys: service.keyStore.size }, 'service started');

const running = service;
closeWithGrace({ delay: config.drainDelayMs + config.shutdownTimeoutMs, logger }, async ({ signal, err }) => {
  if (err) logger.error({ reason: err.message, kind: err.name }, 'shutting down after an uncaught error');
  logger.info({ signal, drainDelayMs: config.drainDelayMs }, 'draining: readiness off, still serving');
  running.startDraining();
  // Let the endpoints controller and the ingress stop sending new requests here first.
  await new Promise((resolve) => setTimeout(resolve, config.drainDelayMs));
  logger.info('closing: finishing requests in flight');
  // Everything, trace flush included, within SHUTDOWN_TIMEOUT_MS: close-with-grace exits 1 after it.
  await running.close(Math.max(1_000, config.shutdownTimeoutMs - 1_500));
  logger.info('closed');
  await shutdownTelemetry();
});
