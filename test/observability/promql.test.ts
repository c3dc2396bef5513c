import { describe, expect, it } from 'vitest';
import { allDashboardExpressions, ruleExpressions } from './artifacts.js';
import { metricNamesOf, parsePromQL, promqlOfVariableQuery, stripGrafanaVariables, vectorSelectors } from './promql.js';

describe('reading metric names out of PromQL', () => {
  it('takes vector selectors, never function names, as metric names', () => {
    expect(metricNamesOf('sum(rate(http_requests_total[5m])) / scalar(up)')).toEqual(['http_requests_total', 'up']);
  });

  it('does not take label names in matchers for metric names', () => {
    const [selector] = vectorSelectors('foo_total{route=~"/partner/.+", status_code!="200", le!~`0\\..*`}');
    expect(selector).toEqual({
      name: 'foo_total',
      matchers: [
        { label: 'route', op: '=~', value: '/partner/.+' },
        { label: 'status_code', op: '!=', value: '200' },
        { label: 'le', op: '!~', value: '0\\..*' },
      ],
    });
  });

  it('skips the label lists of by, without, on, ignoring, group_left and group_right', () => {
    const expr = `
      sum by (route, le) (rate(a_bucket[5m]))
      / on (namespace, job) group_left (pod) sum without (instance) (b)
      * ignoring (outcome) group_right c
      and on(namespace) group_left d`;
    expect(metricNamesOf(expr)).toEqual(['a_bucket', 'b', 'c', 'd']);
    expect(metricNamesOf('sum(rate(x[5m])) by (route)')).toEqual(['x']);
  });

  it('skips keywords, numbers, durations, offsets, strings and comments', () => {
    const expr = `
      # a comment naming not_a_metric
      histogram_quantile(0.99, a_bucket offset 1h30m) > bool 0.25
      unless b @ 1700000000 or label_replace(c, "dst", "$1", "src", "(.*)")
      and topk(10, d[5m:1m]) == Inf != NaN + 1e3 - 0x1F`;
    expect(metricNamesOf(expr)).toEqual(['a_bucket', 'b', 'c', 'd']);
  });

  it('reads recording-rule names with colons, __name__ matchers and quoted names', () => {
    expect(metricNamesOf('ns:requests:rate5m > 1')).toEqual(['ns:requests:rate5m']);
    expect(metricNamesOf('{__name__="x_total", job="a"}')).toEqual(['x_total']);
    expect(metricNamesOf('{job="a"}')).toEqual(['{job="a"}']);
    expect(vectorSelectors('{"my.metric", "k8s.pod"=\'a\\tb\'}')).toEqual([
      { name: 'my.metric', matchers: [{ label: 'k8s.pod', op: '=', value: 'a\tb' }] },
    ]);
  });

  it('replaces Grafana variables before reading', () => {
    expect(stripGrafanaVariables('rate(x{ns="$namespace"}[$__rate_interval])')).toBe('rate(x{ns="GRAFANA_VARIABLE_namespace"}[1m])');
    expect(stripGrafanaVariables('increase(x[${__range}]) and y{a="${job:regex}", b="[[pod]]"}')).toBe(
      'increase(x[1m]) and y{a="GRAFANA_VARIABLE_job", b="GRAFANA_VARIABLE_pod"}',
    );
    expect(vectorSelectors('sum(rate(x{job="$job"}[$__rate_interval]))')).toEqual([
      { name: 'x', matchers: [{ label: 'job', op: '=', value: 'GRAFANA_VARIABLE_job' }] },
    ]);
    // a variable in place of a metric name is reported, not silently skipped
    expect(metricNamesOf('rate($metric[5m])')).toEqual(['GRAFANA_VARIABLE_metric']);
  });

  it('reads the PromQL of Grafana variable queries', () => {
    expect(promqlOfVariableQuery('label_values(up{job="a"}, namespace)')).toBe('up{job="a"}');
    expect(promqlOfVariableQuery('label_values(namespace)')).toBe('');
    expect(promqlOfVariableQuery('query_result(topk(5, x))')).toBe('topk(5, x)');
  });

  it('rejects PromQL that Prometheus would not parse, saying where', () => {
    for (const bad of ['x{job="a"', 'x{job=a}', 'rate(x[5m]', 'sum(rate(no_such_function(x)[5m]))', 'a and', 'a b', '']) {
      expect(() => parsePromQL(bad), JSON.stringify(bad)).toThrow(/PromQL syntax error at offset \d+/);
    }
    expect(() => metricNamesOf('sum(x) by (')).toThrow(/syntax error/);
  });
});

describe('the PromQL of the rule file and the dashboards', () => {
  it('parses, every expression', () => {
    const expressions = [...ruleExpressions(), ...allDashboardExpressions()];
    expect(expressions.length).toBeGreaterThan(60);
    const problems = expressions.flatMap(({ where, expr }) => {
      try {
        parsePromQL(expr);
        return [];
      } catch (error) {
        return [`${where}: ${(error as Error).message}`];
      }
    });
    expect(problems, problems.join('\n')).toEqual([]);
  });
});
