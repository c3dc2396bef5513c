/**
 * Inputs of 16 KiB (a header's size) built to make a parser or a regular expression backtrack:
 * long runs of spaces, separators, quotes and key characters, with a character at the end that
 * makes a match fail late. A linear parser takes well under a millisecond on each.
 */
export const worstCaseLength = 16 * 1024;

export function worstCaseInputs(prefixes: readonly string[] = ['', 'x', 'x=', 'x =', 'token', 'api_key', 'bearer']) {
  const n = worstCaseLength;
  const fill = (unit: string) => unit.repeat(Math.ceil(n / unit.length)).slice(0, n);
  const runs = {
    spaces: fill(' '),
    tabs: fill('\t'),
    commas: fill(','),
    semicolons: fill(';'),
    equals: fill('='),
    quotes: fill('"'),
    'escaped quotes': fill('\\"'),
    'space quote': fill(' "'),
    'weak tags': fill('W/'),
    'key characters': fill('a'),
    'key runs of 15': fill(`${'a'.repeat(15)} `),
    'key runs of 16': fill(`${'a'.repeat(16)} `),
    'dotted key runs': fill(`${'a'.repeat(16)}.${'a'.repeat(16)} `),
    'pas_ prefixes': fill('pas_'),
  };
  const inputs: Array<[string, string]> = [];
  for (const prefix of prefixes) {
    for (const [name, run] of Object.entries(runs)) {
      for (const last of ['', 'y', '"'])
        inputs.push([`${JSON.stringify(prefix)} + ${name} + ${JSON.stringify(last)}`, prefix + run + last]);
    }
  }
  return inputs;
}

/** The CPU time this thread has used, in ms (user and system). */
function threadCpuMs(): number {
  const { user, system } = process.threadCpuUsage();
  return (user + system) / 1_000;
}

/**
 * The least CPU time of up to `runs` runs of `work`, in ms: the cost of the algorithm. CPU time,
 * never the clock: on a busy machine (a second test suite beside this one, two cores) a run waits
 * for a core for longer than the work takes, and 25 runs of a 16 KiB parse in a row all measured
 * over 5 ms by the clock (issue 37); the time the thread spent running does not grow with the
 * wait. It stops at the first run within `enoughMs`, and after the first five when even the
 * fastest is ten times that (an algorithm that slow is not noise). A warm-up run first, so that
 * compilation is not counted.
 */
export function bestOfMs(work: () => unknown, runs = 25, enoughMs = 0): number {
  work();
  let best = Number.POSITIVE_INFINITY;
  for (let i = 0; i < runs; i++) {
    const started = threadCpuMs();
    work();
    best = Math.min(best, threadCpuMs() - started);
    if (best < enoughMs || (i >= 4 && best > 10 * enoughMs && enoughMs > 0)) break;
  }
  return best;
}

/** The bound every parser of partner input keeps on each worst case (docs/interfaces.md §3). */
export const parseBoundMs = 5;

/** The worst cases that take longer than the bound, with their times; [] when every one is within. */
export function slowOnes(parse: (input: string) => unknown, inputs = worstCaseInputs()): string[] {
  return inputs.flatMap(([name, input]) => {
    const ms = bestOfMs(() => parse(input), 25, parseBoundMs);
    return ms < parseBoundMs ? [] : [`${name}: ${ms.toFixed(1)} ms`];
  });
}
