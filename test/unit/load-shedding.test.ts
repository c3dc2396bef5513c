import { describe, expect, it } from 'vitest';
import { shedsFor } from '../../src/http/route-table.js';

describe("load shedding reads under-pressure's verdict", () => {
  it('sheds on a measured delay over the threshold, whatever the threshold', () => {
    expect(shedsFor('eventLoopDelay', 250, 200)).toBe(true);
    expect(shedsFor('eventLoopDelay', 61_000, 60_000)).toBe(true);
  });

  it('takes a second without any sample (reported as an infinite delay) as a delay of a second', () => {
    expect(shedsFor('eventLoopDelay', Number.POSITIVE_INFINITY, 200)).toBe(true);
    expect(shedsFor('eventLoopDelay', Number.POSITIVE_INFINITY, 999)).toBe(true);
    expect(shedsFor('eventLoopDelay', Number.POSITIVE_INFINITY, 1_000)).toBe(false);
    expect(shedsFor('eventLoopDelay', Number.POSITIVE_INFINITY, 60_000)).toBe(false);
  });
});
