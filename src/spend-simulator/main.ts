// The spend-management simulator as its own program: `node dist/spend-simulator/main.js`.
// PORT (default 8081), HOST (default 0.0.0.0), SIMULATOR_TOKEN (optional bearer token to require),
// SIMULATOR_STRICT_KEYS (default true: 422 for an idempotency key reused with other campaigns).
import { createSpendSimulator } from './simulator.js';

const port = Number(process.env.PORT ?? 8081);
if (!Number.isInteger(port) || port < 0 || port > 65_535) {
  console.error('PORT must be a port number');
  process.exit(1);
}
const simulator = createSpendSimulator({
  token: process.env.SIMULATOR_TOKEN || undefined,
  logger: true,
  strictKeys: process.env.SIMULATOR_STRICT_KEYS !== 'false',
});
await simulator.listen({ port, host: process.env.HOST ?? '0.0.0.0' });
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.once(signal, () => {
    void simulator.close().then(() => process.exit(0));
  });
}
