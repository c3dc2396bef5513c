/**
 * A network's allowance of disables running at once in this replica (docs/interfaces.md §10): per
 * network, the agents being disabled, each with the requests that hold its place. Nothing here
 * waits: a request of another network never counts against this one.
 */
export class NetworkAllowance {
  /** networkId → agentId → requests of that agent holding the network's allowance. */
  private readonly holders = new Map<string, Map<string, number>>();

  constructor(readonly limit: number) {}

  /**
   * Places for all these agents at once, or none (a bulk change, docs/interfaces.md §16): undefined
   * when the network's free places cannot hold the agents it does not hold yet. Returns each agent's
   * release, in the order given.
   */
  takeAll(networkId: string, agentIds: readonly string[]): Array<() => void> | undefined {
    const held = this.holders.get(networkId);
    const added = agentIds.filter((agentId) => !held?.has(agentId)).length;
    if ((held?.size ?? 0) + added > this.limit) return undefined;
    return agentIds.map((agentId) => this.take(networkId, agentId)!);
  }

  /** Takes a place for the agent (a second request of an agent shares its place); undefined when the network holds its allowance. Returns the release. */
  take(networkId: string, agentId: string): (() => void) | undefined {
    let agentsOfNetwork = this.holders.get(networkId);
    const requests = agentsOfNetwork?.get(agentId) ?? 0;
    if (requests === 0 && (agentsOfNetwork?.size ?? 0) >= this.limit) return undefined;
    if (!agentsOfNetwork) {
      agentsOfNetwork = new Map();
      this.holders.set(networkId, agentsOfNetwork);
    }
    const network = agentsOfNetwork;
    network.set(agentId, requests + 1);
    return () => {
      const left = (network.get(agentId) ?? 1) - 1;
      if (left > 0) network.set(agentId, left);
      else network.delete(agentId);
      if (network.size === 0 && this.holders.get(networkId) === network) this.holders.delete(networkId);
    };
  }
}
