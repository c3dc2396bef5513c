// Tracing on (`--only=tracing`): the enable in a service process of its own that exports every span
// to the local OTLP sink; its start, memory and the spans that reached the sink.
import type { BenchContext } from '../context.js';
import { phase, startService, stop } from '../context.js';
import { memoryOf } from '../processes.js';
import { checkRateLimitIsOn, measureEnable } from './enable.js';

export async function tracedEnable(ctx: BenchContext): Promise<void> {
  const { results, sink } = ctx;
  const service = await startService(ctx, 'traced', {
    OTEL_SDK_DISABLED: 'false',
    OTEL_TRACES_SAMPLER: 'always_on',
    OTEL_EXPORTER_OTLP_ENDPOINT: sink.endpoint,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
  });
  results.processes['tracing on'] = { startToReadyMs: service.startToReadyMs, rssAtReadyMiB: service.rssAtReadyMiB };
  console.log(`  tracing on: start to ready ${service.startToReadyMs} ms, RSS at ready ${service.rssAtReadyMiB} MiB`);
  await phase(ctx, 'enable, tracing on', async () => {
    await checkRateLimitIsOn(ctx, service.statusUrl);
    await measureEnable(ctx, 'enable, tracing on', service.statusUrl);
  });
  const memory = memoryOf(service.child.pid!);
  results.processes['tracing on'] = { ...results.processes['tracing on']!, rssAfterLoadMiB: memory.rssMiB, peakRssMiB: memory.peakMiB };
  console.log(`  tracing on: RSS after the load ${memory.rssMiB} MiB (peak ${memory.peakMiB} MiB)`);
  await stop(ctx, service); // flushes the last spans
  results.exported = { ...sink.received };
  console.log(`  spans exported: ${results.exported.exports} OTLP requests, ${results.exported.bytes} bytes`);
  if (results.exported.exports === 0) results.failures.push('tracing on: no span reached the OTLP sink');
}
