import { describe, expect, it, vi } from 'vitest';
import { shedsFor } from '../../src/http/route-table.js';
import { UnauthenticatedShedding } from '../../src/http/unauthenticated-shedding.js';

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

describe("the OpenAPI document's byte budget", () => {
  it('sends about 4 MiB of documents a second, the first always, and starts again the next second', () => {
    vi.useFakeTimers({ toFake: ['performance'] });
    try {
      const shedding = new UnauthenticatedShedding({ utilizationPercent: 50, overloadMaxEventLoopDelayMs: 1_000 });
      const document = 276_666;
      const sent = () => {
        let n = 0;
        while (!shedding.overDocumentBudget(document)) n += 1;
        return n;
      };
      expect(sent()).toBe(Math.floor((4 * 1024 * 1024) / document));
      // A document larger than the whole budget still goes once a second.
      vi.advanceTimersByTime(1_000);
      expect(shedding.overDocumentBudget(5 * 1024 * 1024)).toBe(false);
      expect(shedding.overDocumentBudget(1)).toBe(true);
      vi.advanceTimersByTime(1_000);
      expect(sent()).toBe(15);
    } finally {
      vi.useRealTimers();
    }
  });
});
