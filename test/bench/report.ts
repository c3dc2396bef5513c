// The benchmark's one table (figure, value, floor, ratio, target, result) and its JSON twin with
// the machine beside the figures.
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, release, totalmem } from 'node:os';
import { join } from 'node:path';

export interface Target {
  /** Whether the value or the ratio to the floor is judged. */
  of: 'value' | 'ratio';
  op: '>=' | '<=' | '=';
  limit: number;
}

export interface Row {
  figure: string;
  value: number;
  unit: string;
  /** Shown after the value, e.g. latency percentiles or round trips. */
  detail?: string;
  floor?: { figure: string; value: number };
  target?: Target;
}

export type Verdict = 'pass' | 'miss' | 'not judged' | 'no target';

export function ratioOf(row: Row): number | undefined {
  return row.floor && row.floor.value > 0 ? Math.round((row.value / row.floor.value) * 100) / 100 : undefined;
}

export function verdictOf(row: Row, judge: boolean): Verdict {
  if (!row.target) return 'no target';
  if (!judge) return 'not judged';
  const judged = row.target.of === 'ratio' ? ratioOf(row) : row.value;
  if (judged === undefined || Number.isNaN(judged)) return 'miss';
  const { op, limit } = row.target;
  const ok = op === '>=' ? judged >= limit : op === '<=' ? judged <= limit : judged === limit;
  return ok ? 'pass' : 'miss';
}

const number = (value: number) => value.toLocaleString('en-US', { maximumFractionDigits: 1 });

function targetText(row: Row): string {
  if (!row.target) return '-';
  const { of, op, limit } = row.target;
  return of === 'ratio' ? `${op} ${limit}x` : `${op} ${number(limit)} ${row.unit}`;
}

export function renderTable(rows: readonly Row[], judge: boolean): string {
  const header = ['figure', 'value', 'floor', 'ratio', 'target', 'result'];
  const lines = rows.map((row) => [
    row.figure,
    `${number(row.value)} ${row.unit}${row.detail ? ` (${row.detail})` : ''}`,
    row.floor ? `${number(row.floor.value)} ${row.unit} (${row.floor.figure})` : '-',
    ratioOf(row) === undefined ? '-' : `${ratioOf(row)}x`,
    targetText(row),
    verdictOf(row, judge),
  ]);
  const widths = header.map((title, i) => Math.max(title.length, ...lines.map((line) => line[i]!.length)));
  const format = (cells: string[]) => `| ${cells.map((cell, i) => cell.padEnd(widths[i]!)).join(' | ')} |`;
  return [format(header), format(widths.map((w) => '-'.repeat(w))), ...lines.map(format)].join('\n');
}

export interface Machine {
  cpuModel: string;
  cpuCount: number;
  node: string;
  kernel: string;
  memoryMiB: number;
  pinned: boolean;
  /** The 1-minute load average when the run began: other work on the machine makes figures noise. */
  loadAverageAtStart: number;
  postgres: string;
  redis: string;
}

export function describeMachine(pinned: boolean, postgres: string, redis: string): Machine {
  const cores = cpus();
  return {
    cpuModel: cores[0]?.model.trim() ?? 'unknown',
    cpuCount: cores.length,
    node: process.version,
    kernel: release(),
    memoryMiB: Math.round(totalmem() / 2 ** 20),
    pinned,
    loadAverageAtStart: Math.round(loadavg()[0]! * 100) / 100,
    postgres,
    redis,
  };
}

/**
 * A full run writes results/latest.json and results/<date>.json; a quick run (CI) writes only
 * results/quick/latest.json, which git ignores, so it never replaces the figures of a full run.
 */
export function writeResults(dir: string, quick: boolean, at: Date, document: unknown): string[] {
  const text = `${JSON.stringify(document, null, 2)}\n`;
  if (quick) {
    mkdirSync(join(dir, 'quick'), { recursive: true });
    const path = join(dir, 'quick', 'latest.json');
    writeFileSync(path, text);
    return [path];
  }
  const dated = join(
    dir,
    `${at
      .toISOString()
      .replace(/:/g, '-')
      .replace(/\.\d+Z$/, 'Z')}.json`,
  );
  const latest = join(dir, 'latest.json');
  writeFileSync(dated, text);
  writeFileSync(latest, text);
  return [latest, dated];
}
