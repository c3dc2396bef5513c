/**
 * The networks with a status change under way in this replica, and how many each: what a bulk
 * change asks before it takes more of the replica's spend-management slots (see SharedCalls).
 */
export class ActiveNetworks {
  private readonly changes = new Map<string, number>();

  /** Counts the network's change until `work` settles. */
  async during<T>(networkId: string, work: () => Promise<T>): Promise<T> {
    this.changes.set(networkId, (this.changes.get(networkId) ?? 0) + 1);
    try {
      return await work();
    } finally {
      const left = this.changes.get(networkId)! - 1;
      if (left === 0) this.changes.delete(networkId);
      else this.changes.set(networkId, left);
    }
  }

  /** Whether a network other than this one has a change under way. */
  othersThan(networkId: string): boolean {
    return this.changes.size > (this.changes.has(networkId) ? 1 : 0);
  }
}
