// How the service starts and stops its background loops: through its resources, like its pools
// and clients, so a loop is stopped before anything it uses is closed, on every path (close, a
// signal, a start that fails half way).
import type { Resources } from '../resources.js';

/** A background loop as the service holds it (PollLoop, Housekeeping). */
export interface BackgroundLoop {
  readonly name: string;
  start(): void;
  /** Claims or runs nothing more; resolves once what it waits for has ended. Stopping twice stops once. */
  stop(): Promise<void>;
}

/** Owns each loop in `resources` (released, newest first, before what was owned earlier), then starts it. */
export function startLoops(resources: Resources, loops: readonly BackgroundLoop[]): void {
  for (const loop of loops) {
    resources.own(`${loop.name} loop`, loop, (owned) => owned.stop());
    loop.start();
  }
}
