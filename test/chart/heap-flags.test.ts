import { readFileSync } from 'node:fs';
import { load } from 'js-yaml';
import { describe, expect, it } from 'vitest';

// The heap bounds (and --expose-gc, for src/main.ts's collection before ready) are one decision written in three places that cannot share a file: npm start,
// the image's default NODE_OPTIONS and the chart's nodeOptions (which overrides the image's).
const read = (path: string) => readFileSync(new URL(`../../${path}`, import.meta.url), 'utf8');
const heapFlags = (text: string) => (text.match(/--max-(?:old|semi)-space-size=\d+|--expose-gc/g) ?? []).sort();

describe('the heap flags', () => {
  const start = (JSON.parse(read('package.json')) as { scripts: { start: string } }).scripts.start;
  const image = read('Dockerfile').match(/^ENV NODE_OPTIONS="([^"]*)"$/m)?.[1] ?? '';
  const chart = (load(read('charts/partner-agent-status/values.yaml')) as { nodeOptions: string }).nodeOptions;

  it('bound both the old space and the semi-space (the old space alone shrinks the young generation), and expose gc for the collection before ready', () => {
    expect(heapFlags(start)).toEqual(['--expose-gc', '--max-old-space-size=256', '--max-semi-space-size=16']);
  });

  it('are the same for npm start, the image and the chart', () => {
    expect(heapFlags(image)).toEqual(heapFlags(start));
    expect(heapFlags(chart)).toEqual(heapFlags(start));
  });
});
