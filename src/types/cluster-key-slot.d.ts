// The package ships no types: its one function, as the service uses it.
declare module 'cluster-key-slot' {
  /** The Redis Cluster hash slot (0 to 16383) of a key, hash tags honoured. */
  export default function calculateSlot(key: string): number;
}
