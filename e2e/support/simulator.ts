import type { APIRequestContext } from '@playwright/test';

export type SimulatorMode = 'ok' | 'fail' | 'hang' | 'slow';

export interface SimulatorRequest {
  campaignIds: string[];
  idempotencyKey: string;
  at: string;
}

/**
 * The spend-management simulator's control routes (src/spend-simulator/simulator.ts): read back
 * what it has paused and switch how it answers. Its mode is global to the whole run: only the
 * specs of the `shared-simulator` project change it.
 */
export class SimulatorControl {
  constructor(private readonly http: APIRequestContext) {}

  private async ok<T>(response: Awaited<ReturnType<APIRequestContext['get']>>, what: string): Promise<T> {
    if (!response.ok()) throw new Error(`simulator ${what} answered ${response.status()}: ${await response.text()}`);
    return (await response.json()) as T;
  }

  async setMode(mode: SimulatorMode, settings: { delayMs?: number; failStatus?: number; failAfter?: number } = {}): Promise<void> {
    await this.ok(await this.http.put('/_simulator/mode', { data: { mode, ...settings } }), `PUT /_simulator/mode ${mode}`);
  }

  /** The ids among `campaignIds` the simulator has paused, in input order. */
  async paused(campaignIds: string[]): Promise<string[]> {
    if (campaignIds.length === 0) return [];
    const body = await this.ok<{ paused: string[] }>(
      await this.http.post('/_simulator/paused/query', { data: { campaignIds } }),
      'POST /_simulator/paused/query',
    );
    const paused = new Set(body.paused);
    return campaignIds.filter((id) => paused.has(id));
  }

  /** The pause requests it received that name any of `campaignIds` (other tests' are left out). */
  async requestsFor(campaignIds: string[]): Promise<SimulatorRequest[]> {
    const mine = new Set(campaignIds);
    const body = await this.ok<{ requests: SimulatorRequest[] }>(await this.http.get('/_simulator/requests'), 'GET /_simulator/requests');
    return body.requests.filter((request) => request.campaignIds.some((id) => mine.has(id)));
  }
}
