import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import yaml from 'js-yaml';
import { describe, expect, it } from 'vitest';
import {
  allDashboardExpressions,
  allPanels,
  type Dashboard,
  dashboardExpressions,
  dashboardFiles,
  type GrafanaDatasource,
} from './artifacts.js';
import { stripGrafanaVariables, vectorSelectors } from './promql.js';
import { promtoolRun } from './promtool.js';

const files = dashboardFiles();
const parsed = files.flatMap(({ file, dashboard }) => (dashboard instanceof Error ? [] : [{ file, dashboard }]));

const usesDatasourceVariable = (ds: GrafanaDatasource) =>
  typeof ds === 'object' && ds !== null && ds.type === 'prometheus' && (ds.uid === '${datasource}' || ds.uid === '$datasource');

/** Every `datasource` property anywhere in the JSON, with its path. */
function datasourceRefs(value: unknown, path: string, out: { path: string; ds: GrafanaDatasource }[] = []) {
  if (Array.isArray(value)) {
    for (const [i, v] of value.entries()) datasourceRefs(v, `${path}[${i}]`, out);
  } else if (typeof value === 'object' && value !== null) {
    for (const [key, v] of Object.entries(value)) {
      if (key === 'datasource') out.push({ path: `${path}.${key}`, ds: v as GrafanaDatasource });
      else datasourceRefs(v, `${path}.${key}`, out);
    }
  }
  return out;
}

const panelsWithQueries = (d: Dashboard) => allPanels(d).filter((p) => p.type !== 'row' && p.type !== 'text');

describe('Grafana dashboards', () => {
  it('are the overview, dependencies and business dashboards, each valid JSON', () => {
    expect(files.map((f) => f.file)).toEqual(['business.json', 'dependencies.json', 'overview.json']);
    for (const { file, dashboard } of files) {
      expect(dashboard instanceof Error ? `${file}: ${dashboard.message}` : 'ok').toBe('ok');
    }
  });

  it('have stable, unique uids, a title, tags and schema version 39', () => {
    const uids = parsed.map(({ dashboard }) => dashboard.uid);
    expect(uids.sort()).toEqual(['pas-business', 'pas-dependencies', 'pas-overview']);
    for (const { file, dashboard } of parsed) {
      expect(dashboard.title, file).toMatch(/^Partner agent status \/ /);
      expect(dashboard.schemaVersion, file).toBe(39);
      expect(dashboard.tags, file).toContain('partner-agent-status');
      expect(dashboard.id ?? null, `${file}: an instance-specific id`).toBeNull();
    }
  });

  it('declare a Prometheus data source variable and namespace/job variables', () => {
    for (const { file, dashboard } of parsed) {
      const variables = dashboard.templating?.list ?? [];
      const ds = variables.find((v) => v.name === 'datasource');
      expect(ds, `${file}: $datasource`).toMatchObject({ type: 'datasource', query: 'prometheus' });
      for (const name of ['namespace', 'job']) {
        const variable = variables.find((v) => v.name === name);
        expect(variable?.type, `${file}: $${name}`).toBe('query');
      }
    }
  });

  it('use the data source variable on every panel and target, and never a fixed data source', () => {
    const problems: string[] = [];
    for (const { file, dashboard } of parsed) {
      for (const panel of panelsWithQueries(dashboard)) {
        const where = `${file} panel ${panel.id} "${panel.title}"`;
        if (!usesDatasourceVariable(panel.datasource)) problems.push(`${where}: datasource ${JSON.stringify(panel.datasource)}`);
        if (!panel.targets?.length) problems.push(`${where}: no targets`);
        for (const target of panel.targets ?? []) {
          if (!usesDatasourceVariable(target.datasource)) {
            problems.push(`${where} target ${target.refId}: datasource ${JSON.stringify(target.datasource)}`);
          }
        }
      }
      // anywhere else too (variables, annotations, links): no hard-coded uid
      for (const { path, ds } of datasourceRefs(dashboard, file)) {
        if (!usesDatasourceVariable(ds)) problems.push(`${path}: ${JSON.stringify(ds)}`);
      }
    }
    expect(problems, `panels or targets without \${datasource}:\n${problems.join('\n')}`).toEqual([]);
  });

  it('have unique panel ids and unique target refIds per panel', () => {
    for (const { file, dashboard } of parsed) {
      const ids = allPanels(dashboard).map((p) => p.id);
      expect(
        ids.every((id) => Number.isInteger(id)),
        `${file}: every panel has an id`,
      ).toBe(true);
      expect(new Set(ids).size, `${file}: duplicate panel ids in ${ids.join(', ')}`).toBe(ids.length);
      for (const panel of allPanels(dashboard)) {
        const refIds = (panel.targets ?? []).map((t) => t.refId);
        expect(new Set(refIds).size, `${file} panel ${panel.id}: duplicate refIds`).toBe(refIds.length);
      }
    }
  });

  it('give every panel a unit', () => {
    const missing = parsed.flatMap(({ file, dashboard }) =>
      panelsWithQueries(dashboard)
        .filter((p) => !p.fieldConfig?.defaults?.unit)
        .map((p) => `${file} panel ${p.id} "${p.title}"`),
    );
    expect(missing, missing.join('\n')).toEqual([]);
  });

  it('scope every query of a panel to the selected namespace and job', () => {
    const problems: string[] = [];
    for (const { file, dashboard } of parsed) {
      for (const { where, expr, kind } of dashboardExpressions(file, dashboard)) {
        if (kind !== 'target') continue;
        for (const selector of vectorSelectors(expr)) {
          const has = (label: string) =>
            selector.matchers.some((m) => m.label === label && m.op === '=' && m.value === `GRAFANA_VARIABLE_${label}`);
          if (!has('namespace') || !has('job')) problems.push(`${where}: ${selector.name} lacks namespace="$namespace", job="$job"`);
        }
      }
    }
    expect(problems, problems.join('\n')).toEqual([]);
  });

  it('lay panels out on the 24-column grid without overlap', () => {
    for (const { file, dashboard } of parsed) {
      const taken = new Set<string>();
      for (const panel of allPanels(dashboard)) {
        const g = panel.gridPos as { x: number; y: number; w: number; h: number } | undefined;
        expect(g, `${file} panel ${panel.id}: gridPos`).toBeDefined();
        if (!g) continue;
        expect(g.x + g.w, `${file} panel ${panel.id}: beyond column 24`).toBeLessThanOrEqual(24);
        for (let x = g.x; x < g.x + g.w; x++) {
          for (let y = g.y; y < g.y + g.h; y++) {
            expect(taken.has(`${x},${y}`), `${file} panel ${panel.id} overlaps at ${x},${y}`).toBe(false);
            taken.add(`${x},${y}`);
          }
        }
      }
    }
  });

  it('show the durable disables and the limits, each in its own row, reading the metrics made for them', () => {
    const expected: Record<string, { file: string; metrics: string[] }> = {
      'Durable disables': {
        file: 'business.json',
        metrics: [
          'pending_disables',
          'pending_disables_oldest_age_seconds',
          'disable_worker_attempts_total',
          'campaigns_not_confirmed_total',
        ],
      },
      'API versions': {
        file: 'business.json',
        metrics: ['partner_api_version_answers_total'],
      },
      'Bulk status changes': {
        file: 'business.json',
        metrics: ['agent_status_batch_size_bucket', 'agent_status_batch_size_count', 'agent_status_batch_items_total'],
      },
      'Partner events feed': {
        file: 'business.json',
        metrics: [
          'partner_events_feed_streams_open',
          'partner_events_feed_events_streamed_total',
          'partner_events_feed_reads_total',
          'partner_events_feed_streams_refused_total',
          'partner_events_feed_streams_ended_total',
          'partner_events_feed_stream_lag_seconds_bucket',
          'partner_events_feed_listening',
        ],
      },
      Limits: {
        file: 'overview.json',
        metrics: [
          'partner_requests_limited_total',
          'requests_shed_total',
          'rate_limit_store_errors_total',
          'spend_management_auth_failures_total',
        ],
      },
    };
    for (const [title, { file, metrics }] of Object.entries(expected)) {
      const dashboard = parsed.find((d) => d.file === file)?.dashboard;
      const panels = dashboard?.panels ?? [];
      const start = panels.findIndex((p) => p.type === 'row' && p.title === title);
      expect(start, `${file}: a row "${title}"`).toBeGreaterThanOrEqual(0);
      const row = panels[start];
      expect(row?.collapsed, `${file}: row "${title}" open, its panels beside it`).toBe(false);
      const next = panels.findIndex((p, i) => i > start && p.type === 'row');
      const inRow = panels.slice(start + 1, next === -1 ? undefined : next);
      const rowY = (row?.gridPos as { y: number } | undefined)?.y ?? 0;
      for (const panel of inRow)
        expect((panel.gridPos as { y: number }).y, `${file} panel ${panel.id} below its row`).toBeGreaterThan(rowY);
      const read = new Set(
        inRow.flatMap((p) => (p.targets ?? []).flatMap((t) => (t.expr ? vectorSelectors(t.expr).map((v) => v.name) : []))),
      );
      expect([...read].sort(), `${file}: metrics of row "${title}"`).toEqual([...metrics].sort());
    }
  });

  it('hold only expressions that Prometheus itself accepts, types included (promtool check rules)', async () => {
    // Each expression becomes a recording rule of a throwaway file, so that Prometheus's own parser
    // checks what the grammar alone cannot, such as rate() of an instant vector.
    const expressions = allDashboardExpressions();
    const rules = expressions.map(({ expr }, i) => ({ record: `dashboard:expression_${i}`, expr: stripGrafanaVariables(expr) }));
    const dir = mkdtempSync(join(tmpdir(), 'pas-dashboards-'));
    try {
      const file = join(dir, 'dashboards.rules.yaml');
      writeFileSync(file, yaml.dump({ groups: [{ name: 'dashboards', rules }] }));
      const output = await promtoolRun('check', 'rules', file).catch((error: Error) => {
        // name the panel behind promtool's "group 0, rule N" in the failure
        const where = expressions.map((e, i) => `rule ${i + 1}: ${e.where}`).join('\n');
        throw new Error(`${error.message}\n${where}`);
      });
      expect(output).toContain(`SUCCESS: ${rules.length} rules found`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
