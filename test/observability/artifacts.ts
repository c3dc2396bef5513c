import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import yaml from 'js-yaml';
import { promqlOfVariableQuery } from './promql.js';

/** The observability files of the repository, read from the working tree (never from outside). */
const repo = (path: string) => fileURLToPath(new URL(`../../${path}`, import.meta.url));

export const paths = {
  dashboards: repo('charts/partner-agent-status/dashboards'),
  rules: repo('charts/partner-agent-status/rules/partner-agent-status.rules.yaml'),
  ruleTests: repo('test/observability/rules.promtool.yaml'),
  runbook: repo('docs/runbook.md'),
};

// ------------------------------------------------------------------------------------ dashboards

export type GrafanaDatasource = { type?: string; uid?: string } | string | null | undefined;

export interface GrafanaTarget {
  refId?: string;
  expr?: string;
  datasource?: GrafanaDatasource;
  [key: string]: unknown;
}

export interface GrafanaPanel {
  id?: number;
  type?: string;
  title?: string;
  datasource?: GrafanaDatasource;
  targets?: GrafanaTarget[];
  panels?: GrafanaPanel[];
  fieldConfig?: { defaults?: { unit?: string } };
  [key: string]: unknown;
}

export interface GrafanaVariable {
  name: string;
  type: string;
  query?: string | { query?: string };
  datasource?: GrafanaDatasource;
  [key: string]: unknown;
}

export interface Dashboard {
  uid?: string;
  title?: string;
  schemaVersion?: number;
  panels?: GrafanaPanel[];
  templating?: { list?: GrafanaVariable[] };
  [key: string]: unknown;
}

export interface DashboardFile {
  file: string;
  text: string;
  /** The parsed JSON, or the parse error. */
  dashboard: Dashboard | Error;
}

export function dashboardFiles(): DashboardFile[] {
  return readdirSync(paths.dashboards)
    .filter((file) => file.endsWith('.json'))
    .sort()
    .map((file) => {
      const text = readFileSync(`${paths.dashboards}/${file}`, 'utf8');
      let dashboard: Dashboard | Error;
      try {
        dashboard = JSON.parse(text) as Dashboard;
      } catch (error) {
        dashboard = error as Error;
      }
      return { file, text, dashboard };
    });
}

/** Every panel, rows' nested panels included, in order. */
export function allPanels(dashboard: Dashboard): GrafanaPanel[] {
  const out: GrafanaPanel[] = [];
  const visit = (panels: GrafanaPanel[] | undefined) => {
    for (const panel of panels ?? []) {
      out.push(panel);
      visit(panel.panels);
    }
  };
  visit(dashboard.panels);
  return out;
}

/** Every PromQL expression of a dashboard, with where it is. */
export function dashboardExpressions(file: string, dashboard: Dashboard) {
  const out: { where: string; expr: string; kind: 'target' | 'variable' }[] = [];
  for (const panel of allPanels(dashboard)) {
    for (const target of panel.targets ?? []) {
      if (typeof target.expr === 'string') {
        out.push({ where: `${file} panel ${panel.id} "${panel.title}" target ${target.refId}`, expr: target.expr, kind: 'target' });
      }
    }
  }
  for (const variable of dashboard.templating?.list ?? []) {
    if (variable.type !== 'query') continue;
    const query = typeof variable.query === 'string' ? variable.query : variable.query?.query;
    if (query) out.push({ where: `${file} variable $${variable.name}`, expr: query, kind: 'variable' });
  }
  return out;
}

/**
 * Every PromQL expression of every dashboard, the PromQL inside variable queries unwrapped
 * (variable queries that hold none, such as `label_values(namespace)`, left out).
 */
export function allDashboardExpressions(): { where: string; expr: string }[] {
  return dashboardFiles().flatMap(({ file, dashboard }) =>
    dashboard instanceof Error
      ? []
      : dashboardExpressions(file, dashboard).flatMap(({ where, expr, kind }) => {
          const promql = kind === 'variable' ? promqlOfVariableQuery(expr) : expr;
          return promql === '' && kind === 'variable' ? [] : [{ where, expr: promql }];
        }),
  );
}

// ------------------------------------------------------------------------------------------ rules

export interface Rule {
  alert?: string;
  record?: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

export interface RuleFile {
  groups: { name: string; rules: Rule[] }[];
}

export function ruleFile(): RuleFile {
  return yaml.load(readFileSync(paths.rules, 'utf8')) as RuleFile;
}

export function allRules(file: RuleFile = ruleFile()): Rule[] {
  return file.groups.flatMap((group) => group.rules);
}

export function ruleExpressions(rules: Rule[] = allRules()): { where: string; expr: string }[] {
  return rules.map((r) => ({ where: `rule ${r.alert ?? r.record}`, expr: r.expr }));
}

export interface PromtoolTestFile {
  rule_files: string[];
  tests: {
    name?: string;
    alert_rule_test?: { alertname: string; eval_time: string; exp_alerts?: unknown[] | null }[];
  }[];
}

export function ruleTestFile(): PromtoolTestFile {
  return yaml.load(readFileSync(paths.ruleTests, 'utf8')) as PromtoolTestFile;
}

// ---------------------------------------------------------------------------------------- runbook

/** GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces to hyphens. */
export function headingAnchor(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

export function runbookAnchors(): Set<string> {
  const text = readFileSync(paths.runbook, 'utf8');
  const anchors = new Set<string>();
  let inFence = false;
  for (const line of text.split('\n')) {
    if (line.startsWith('```')) inFence = !inFence;
    const heading = inFence ? null : /^#{1,6}\s+(.+?)\s*#*\s*$/.exec(line);
    if (heading?.[1]) anchors.add(headingAnchor(heading[1]));
  }
  return anchors;
}

export function runbookAlertSections(): string[] {
  const text = readFileSync(paths.runbook, 'utf8');
  return [...text.matchAll(/^##\s+(PartnerAgentStatus\w+)\s*$/gm)].map((m) => m[1] ?? '');
}
