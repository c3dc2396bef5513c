/**
 * The link between the telemetry preload (src/telemetry.ts, loaded with --import) and main.ts,
 * without main importing the preload: importing it would start the SDK too late to instrument.
 */
const handleKey = Symbol.for('partner-agent-status.telemetry');

interface TelemetryHandle {
  shutdown(): Promise<void>;
}

export function registerTelemetry(handle: TelemetryHandle): void {
  (globalThis as Record<symbol, unknown>)[handleKey] = handle;
}

/** Flushes the last spans; a no-op when telemetry was not preloaded or is disabled. */
export async function shutdownTelemetry(): Promise<void> {
  const handle = (globalThis as Record<symbol, unknown>)[handleKey] as TelemetryHandle | undefined;
  await handle?.shutdown().catch(() => undefined);
}
