import { parser } from '@prometheus-io/lezer-promql';

/**
 * PromQL read with the Prometheus project's own grammar (`@prometheus-io/lezer-promql`, the parser
 * behind the Prometheus UI's editor): syntax errors fail, and the vector selectors of an
 * expression come out with their metric names and label matchers. Types (e.g. `rate` of an
 * instant vector) are not checked here: `promtool check rules` does that for the rules, and for
 * the dashboards' expressions through a generated rule file (dashboards.test.ts).
 */

export type LabelMatcher = { label: string; op: '=' | '!=' | '=~' | '!~'; value: string };

export type VectorSelector = {
  /** The metric name, or undefined for a selector like `{job="x"}` that names none. */
  name: string | undefined;
  matchers: LabelMatcher[];
};

type SyntaxNode = ReturnType<typeof parser.parse>['topNode'];

/**
 * Replaces Grafana's variables so that the rest is plain PromQL: the built-in interval and range
 * variables become a duration; any other variable becomes `GRAFANA_VARIABLE_<name>`, harmless
 * inside a quoted label value and reported as an unknown metric name anywhere else.
 */
export function stripGrafanaVariables(expr: string): string {
  return expr
    .replace(/\$\{(__[a-zA-Z_]+)(?::[^}]*)?\}|\$(__[a-zA-Z_]+)|\[\[(__[a-zA-Z_]+)(?::[^\]]*)?\]\]/g, '1m')
    .replace(
      /\$\{([a-zA-Z0-9_]+)(?::[^}]*)?\}|\$([a-zA-Z0-9_]+)|\[\[([a-zA-Z0-9_]+)(?::[^\]]*)?\]\]/g,
      (_match, a?: string, b?: string, c?: string) => `GRAFANA_VARIABLE_${a ?? b ?? c}`,
    );
}

/**
 * The PromQL inside a Grafana Prometheus variable query: `label_values(<expr>, <label>)` and
 * `query_result(<expr>)` hold one; `label_values(<label>)` and `label_names()` hold none ('').
 */
export function promqlOfVariableQuery(query: string): string {
  const trimmed = query.trim();
  const labelValues = /^label_values\(([\s\S]*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)$/.exec(trimmed);
  if (labelValues) return labelValues[1] ?? '';
  if (/^label_values\(\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)$/.test(trimmed)) return '';
  if (/^label_names\(\s*\)$/.test(trimmed)) return '';
  const queryResult = /^query_result\(([\s\S]*)\)$/.exec(trimmed);
  if (queryResult) return queryResult[1] ?? '';
  return trimmed;
}

const escapes: Record<string, string> = { a: '\x07', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t', v: '\v' };

/** The value of a PromQL string literal: "…" and '…' with Go escapes, `…` raw. */
function unquote(literal: string): string {
  const body = literal.slice(1, -1);
  if (literal.startsWith('`')) return body;
  return body.replace(/\\(u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|x[0-9a-fA-F]{2}|[0-7]{3}|.)/g, (_m, e: string) => {
    if (/^[uUx]/.test(e)) return String.fromCodePoint(Number.parseInt(e.slice(1), 16));
    if (/^[0-7]{3}$/.test(e)) return String.fromCodePoint(Number.parseInt(e, 8));
    return escapes[e] ?? e;
  });
}

/** Parses an expression (Grafana variables stripped first); throws on any syntax error. */
export function parsePromQL(expression: string): { text: string; top: SyntaxNode } {
  const text = stripGrafanaVariables(expression);
  const tree = parser.parse(text);
  const errors: number[] = [];
  tree.iterate({
    enter: (node) => {
      if (node.type.isError) errors.push(node.from);
    },
  });
  if (text.trim() === '' || errors.length > 0) {
    const at = errors[0] ?? 0;
    const near = JSON.stringify(text.slice(Math.max(0, at - 20), at + 20));
    throw new Error(`PromQL syntax error at offset ${at} (near ${near}) in: ${text}`);
  }
  return { text, top: tree.topNode };
}

/** Every vector selector of a PromQL expression, in order; throws on a syntax error. */
export function vectorSelectors(expression: string): VectorSelector[] {
  const { text, top } = parsePromQL(expression);
  const source = (node: SyntaxNode | null | undefined) => (node ? text.slice(node.from, node.to) : '');
  const literal = (node: SyntaxNode | null | undefined) => unquote(source(node?.getChild('StringLiteral') ?? node));
  const selectors: VectorSelector[] = [];
  const visit = (node: SyntaxNode) => {
    if (node.name === 'VectorSelector') {
      const identifier = node.getChild('Identifier');
      let name = identifier ? source(identifier) : undefined;
      const matchers: LabelMatcher[] = [];
      for (let m = node.getChild('LabelMatchers')?.firstChild; m; m = m.nextSibling) {
        if (m.name === 'QuotedLabelName') {
          name = literal(m); // {"metric.name", …} (Prometheus 3 quoted names)
        } else if (m.name === 'UnquotedLabelMatcher' || m.name === 'QuotedLabelMatcher') {
          const labelNode = m.getChild('LabelName') ?? m.getChild('QuotedLabelName');
          const label = m.name === 'UnquotedLabelMatcher' ? source(labelNode) : literal(labelNode);
          const op = source(m.getChild('MatchOp')) as LabelMatcher['op'];
          const value = unquote(source(m.getChild('StringLiteral')));
          if (label === '__name__' && op === '=') name = value;
          else matchers.push({ label, op, value });
        }
      }
      selectors.push({ name, matchers });
      return;
    }
    for (let child = node.firstChild; child; child = child.nextSibling) visit(child);
  };
  visit(top);
  return selectors;
}

/** The metric names an expression reads; a selector without a name is reported as `{…}`. */
export function metricNamesOf(expression: string): string[] {
  return vectorSelectors(expression).map((s) => s.name ?? `{${s.matchers.map((m) => `${m.label}${m.op}"${m.value}"`).join(', ')}}`);
}
