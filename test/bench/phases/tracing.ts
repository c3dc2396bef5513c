// Tracing on (`--only=tracing`): the enable in a service process of its own that exports every span
// to the local OTLP sink; its start, memory and the spans that reached the sink.
import type { BenchContext } from '../context.js';
import { phase, startService, stop } from '../context.js';
import { memoryOf } from '../processes.js';
import { checkRateLimitIsOn, measureEnable } from './enable.js';

/**
 * The enable at the chart's default sampling (`--only=tracing`): 10 % of new traces sampled, every
 * instrumentation loaded, exporting to the sink.
 */
export async function sampledEnable(ctx: BenchContext): Promise<void> {
  const service = await startService(ctx, 'sampled', {
    OTEL_SDK_DISABLED: 'false',
    OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
    OTEL_TRACES_SAMPLER_ARG: '0.1',
    OTEL_EXPORTER_OTLP_ENDPOINT: ctx.sink.endpoint,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
  });
  await phase(ctx, 'enable, tracing 10 %', async () => {
    await checkRateLimitIsOn(ctx, service.statusUrl);
    await measureEnable(ctx, 'enable, tracing 10 %', service.statusUrl);
  });
  await stop(ctx, service);
}

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
