import { beforeAll, describe, expect, it } from 'vitest';
import { allDashboardExpressions, allRules, ruleExpressions } from './artifacts.js';
import { exportedMetricNames, metricNamesFromExposition } from './exported-metric-names.js';
import { metricNamesOf } from './promql.js';

/**
 * Series the rules may read although the service does not export them: kube-state-metrics for the
 * pod alerts, and Prometheus's own `up`. Dashboards get no such allowance.
 */
const ruleOnlyAllowlist = new Set([
  'kube_deployment_spec_replicas',
  'kube_deployment_status_replicas_available',
  'kube_pod_status_ready',
  'up',
]);

let exported: Set<string>;
beforeAll(async () => {
  exported = await exportedMetricNames();
});

function unknownNames(expressions: { where: string; expr: string }[], known: (name: string) => boolean): string[] {
  const problems: string[] = [];
  for (const { where, expr } of expressions) {
    let names: string[];
    try {
      names = metricNamesOf(expr);
    } catch (error) {
      problems.push(`${where}: cannot read the PromQL (${(error as Error).message})`);
      continue;
    }
    for (const name of names) if (!known(name)) problems.push(`${name}  (in ${where})`);
  }
  return problems;
}

describe('metric names in dashboards and rules', () => {
  it('knows what the service exports, histogram series and default Node metrics included', () => {
    for (const name of [
      'http_request_duration_seconds_bucket',
      'http_request_duration_seconds_count',
      'agent_status_changes_total',
      'dependency_request_duration_seconds_sum',
      'circuit_breaker_state',
      'partner_keys_loaded',
      'service_ready',
      'process_cpu_seconds_total',
      'nodejs_eventloop_lag_p99_seconds',
      // durable disables and limits: zero-initialised or declared, so present before any event
      'pending_disables',
      'pending_disables_oldest_age_seconds',
      'disable_worker_attempts_total',
      'campaigns_not_confirmed_total',
      'spend_management_auth_failures_total',
      'partner_requests_limited_total',
      'rate_limit_store_errors_total',
      'requests_shed_total',
      'log_lines_suppressed_total',
      'suspicious_requests_total',
    ]) {
      expect(exported, name).toContain(name);
    }
    expect(exported).not.toContain('http_request_duration_seconds');
  });

  it('every dashboard query reads only metrics the service exports', () => {
    const expressions = allDashboardExpressions();
    expect(expressions.length).toBeGreaterThan(30);
    const problems = unknownNames(expressions, (name) => exported.has(name));
    expect(problems, `unknown metric names in dashboards:\n${problems.join('\n')}`).toEqual([]);
  });

  it('every rule reads only exported metrics, series recorded by the file, or the short allowlist', () => {
    const rules = allRules();
    const recorded = new Set(rules.flatMap((r) => (r.record ? [r.record] : [])));
    const expressions = ruleExpressions(rules);
    const problems = unknownNames(expressions, (name) => exported.has(name) || recorded.has(name) || ruleOnlyAllowlist.has(name));
    expect(problems, `unknown metric names in rules:\n${problems.join('\n')}`).toEqual([]);
  });
});

describe('metricNamesFromExposition', () => {
  it('reads sample names and the series each TYPE promises', () => {
    const text = [
      '# HELP http_request_duration_seconds Requests.',
      '# TYPE http_request_duration_seconds histogram',
      '# HELP jobs_total Jobs.',
      '# TYPE jobs_total counter',
      'jobs_total{kind="a"} 3',
      '# TYPE om_events counter',
      '# TYPE rpc_seconds summary',
      '# TYPE temperature gauge',
      'temperature 21.5 1700000000000',
      'untyped_thing 1',
      '',
    ].join('\n');
    expect([...metricNamesFromExposition(text)].sort()).toEqual(
      [
        'http_request_duration_seconds_bucket',
        'http_request_duration_seconds_count',
        'http_request_duration_seconds_sum',
        'jobs_total',
        'om_events_total',
        'rpc_seconds',
        'rpc_seconds_count',
        'rpc_seconds_sum',
        'temperature',
        'untyped_thing',
      ].sort(),
    );
  });
});
