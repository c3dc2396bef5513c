/**
 * Resources a program owns, released in reverse order of acquisition: on close, on a signal, and
 * on every path of a start that fails half way. The service (src/service.ts) and `npm run dev`
 * (src/dev/main.ts) both hold theirs here.
 */
export class Resources {
  private readonly releases: Array<{ name: string; release: () => unknown }> = [];

  /** Takes `resource` into the list; `release` runs once, when all are released. */
  own<T>(name: string, resource: T, release: (resource: T) => unknown): T {
    this.releases.push({ name, release: () => release(resource) });
    return resource;
  }

  /** Releases everything, newest first; a release that fails is reported and the others still run. Whether all were clean. */
  async releaseAll(report: (name: string, reason: string) => void): Promise<boolean> {
    let clean = true;
    for (const { name, release } of this.releases.splice(0).reverse()) {
      try {
        await release();
      } catch (error) {
        clean = false;
        report(name, (error as Error).message);
      }
    }
    return clean;
  }
}
