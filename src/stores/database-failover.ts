import type { DriverClient, DriverFactory } from 'slonik';

/**
 * Why a connection's server is taken for gone (docs/interfaces.md §13, "PostgreSQL failover"):
 * - `read_only`: it answered 25006, or readiness found it refusing writes (a demoted primary, a
 *   standby, the old address after an Aurora-style failover);
 * - `terminated`: 57P01-57P03 (an administrator's or a shutdown's termination, a server starting or
 *   stopping);
 * - `connection_lost`: class 08, a closed or reset socket, or a connection that stopped answering
 *   (the client-side statement limit).
 */
export type FailoverReason = 'read_only' | 'terminated' | 'connection_lost';

export interface Retirement {
  reason: FailoverReason;
  /** The SQLSTATE or socket error code that told it, when there was one. */
  code: string | undefined;
  /** Connections of the service's pools closed at once (idle) or marked to close when released. */
  retired: number;
}

const socketCodes = /^(ECONNRESET|ECONNREFUSED|EPIPE|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH)$/;

function codeOf(error: unknown): string | undefined {
  const own = (error as { code?: unknown }).code;
  const cause = (error as { cause?: { code?: unknown } }).cause?.code;
  const code = own ?? cause;
  return typeof code === 'string' ? code : undefined;
}

/** What a driver error says about the server behind the connection; undefined: nothing (a row's error, a timeout the server sent). */
export function failoverReasonOf(error: unknown): { reason: FailoverReason; code: string | undefined } | undefined {
  const code = codeOf(error);
  if (code === '25006') return { reason: 'read_only', code };
  if (code === '57P01' || code === '57P02' || code === '57P03') return { reason: 'terminated', code };
  if (code?.startsWith('08') || (code && socketCodes.test(code))) return { reason: 'connection_lost', code };
  const message = `${(error as Error)?.message ?? ''} ${((error as { cause?: Error }).cause as Error | undefined)?.message ?? ''}`;
  if (/connection terminated|terminated unexpectedly|not queryable|query read timeout/i.test(message)) {
    return { reason: 'connection_lost', code };
  }
  return undefined;
}

/**
 * Asked once on each new connection, before its first statement: a connection opened after the old
 * server turned read-only but before the address switched (it would only read there, stale) serves
 * that one statement and is closed, and retires with it every connection opened before.
 */
const readOnlyCheck = `SELECT pg_is_in_recovery() OR current_setting('transaction_read_only')::boolean AS read_only`;

/**
 * One per replica, shared by all of its pools: once any connection has shown that its server is
 * gone or read-only, every connection opened before that is retired, in every pool (idle ones are
 * closed at once, busy ones when they are released, never returned to their pool), so the next
 * statements open new connections to whatever DATABASE_URL resolves to now. A connection that only
 * read there is no exception: it would keep answering from the old server. A new connection that
 * finds its server read-only (readOnlyCheck) retires again, as does each write refused or probe
 * answered read-only, so nothing stays on the old server once the address has switched.
 */
export class ServerFailover {
  #generation = 0;
  readonly #clients = new Map<DriverClient, number>();
  readonly #listeners: ((retirement: Retirement) => void)[] = [];

  /** Called after each retirement (a log line, a metric). */
  onRetire(listener: (retirement: Retirement) => void): void {
    this.#listeners.push(listener);
  }

  /** Retires every connection opened so far; returns how many. */
  retire(reason: FailoverReason, code?: string): number {
    this.#generation += 1;
    let retired = 0;
    for (const [client, generation] of [...this.#clients]) {
      if (generation >= this.#generation) continue;
      retired += 1;
      // A busy connection is closed by its release (below). An idle one is closed now; closing it
      // may hand another idle one to a waiting caller, so each is checked just before.
      if (client.state() === 'IDLE') client.destroy().catch(() => undefined);
    }
    for (const listener of this.#listeners) listener({ reason, code, retired });
    return retired;
  }

  /** The pg driver of slonik with every connection it opens watched and retired as above. */
  wrap(inner: DriverFactory): DriverFactory {
    return async (setup) => {
      const driver = await inner(setup);
      return {
        createClient: async () => {
          const client = await driver.createClient();
          this.#clients.set(client, this.#generation);
          client.on('destroy', () => this.#clients.delete(client));
          const observe = (error: unknown) => {
            const failover = failoverReasonOf(error);
            if (!failover) return;
            // This connection is never reused, whatever a later retirement does.
            this.#clients.set(client, -1);
            this.retire(failover.reason, failover.code);
          };
          // An idle connection's server going away reaches the driver as an error event.
          client.on('error', observe);
          let checked = false;
          const retiredSince = () => (this.#clients.get(client) ?? -1) < this.#generation;
          // A connection on its way back to the pool when it was retired (its release had begun) is
          // closed as it arrives, before the pool's own listener could hand it out again.
          client.on('release', () => {
            if (retiredSince()) client.destroy().catch(() => undefined);
          });
          return {
            ...client,
            query: async (...args: Parameters<DriverClient['query']>) => {
              try {
                if (!checked) {
                  checked = true;
                  const { rows } = await client.query(readOnlyCheck);
                  if (rows[0]?.read_only === true) {
                    this.#clients.set(client, -1);
                    this.retire('read_only');
                  }
                }
                return await client.query(...args);
              } catch (error) {
                observe(error);
                throw error;
              }
            },
            release: () => (retiredSince() ? client.destroy() : client.release()),
          };
        },
      };
    };
  }
}
