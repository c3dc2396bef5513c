import { randomUUID } from 'node:crypto';
import { newApiKey } from '../support/data.js';
import { statusPath } from '../support/partner.js';
import { startTestService } from '../support/service.js';

/**
 * The metric names a Prometheus text exposition offers to queries: every sample's name, plus the
 * names each `# TYPE` line promises even before its first sample (a labelled counter or histogram
 * shows no sample until it is first used): `_bucket`, `_sum` and `_count` for a histogram, `_sum`
 * and `_count` for a summary, `_total` for an OpenMetrics-style counter family.
 */
export function metricNamesFromExposition(text: string): Set<string> {
  const names = new Set<string>();
  for (const rawLine of text.split('\n')) {
    const line = rawLine.trim();
    if (line === '') continue;
    if (line.startsWith('#')) {
      const type = /^#\s+TYPE\s+([a-zA-Z_:][a-zA-Z0-9_:]*)\s+(\w+)/.exec(line);
      if (!type) continue;
      const [, name = '', kind = ''] = type;
      switch (kind) {
        case 'histogram':
          for (const suffix of ['_bucket', '_sum', '_count']) names.add(name + suffix);
          break;
        case 'gaugehistogram':
          for (const suffix of ['_bucket', '_gsum', '_gcount']) names.add(name + suffix);
          break;
        case 'summary':
          for (const suffix of ['', '_sum', '_count']) names.add(name + suffix);
          break;
        case 'counter':
          names.add(name.endsWith('_total') ? name : `${name}_total`);
          break;
        default:
          names.add(name);
      }
      continue;
    }
    const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{|\s)/.exec(line);
    if (sample?.[1]) names.add(sample[1]);
  }
  return names;
}

/**
 * The metric names the service exports, scraped from a live `/metrics`: the real service (as
 * main.ts wires it) with its metrics server listening, after one partner request so the per-request
 * series exist too.
 */
export async function exportedMetricNames(): Promise<Set<string>> {
  const service = await startTestService({ partners: [{ key: newApiKey(), networkId: randomUUID(), name: 'metrics-scrape' }] });
  try {
    await service.app.inject({
      method: 'POST',
      url: statusPath,
      headers: { 'content-type': 'application/json' },
      payload: '{}',
    });
    await service.service.metricsServer.listen({ port: 0, host: '127.0.0.1' });
    const { port } = service.service.metricsServer.server.address() as { port: number };
    const response = await fetch(`http://127.0.0.1:${port}/metrics`);
    if (!response.ok) throw new Error(`/metrics answered ${response.status}`);
    return metricNamesFromExposition(await response.text());
  } finally {
    await service.close();
  }
}
