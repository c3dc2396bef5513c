/**
 * Just enough of a PromQL lexer to find the vector selectors of an expression: the metric names
 * it reads and the label matchers it applies to each. Label names (inside `{}` or in the label
 * lists of by/without/on/ignoring/group_left/group_right), function and aggregation names,
 * keywords, numbers, durations and strings are never taken for metric names.
 */

export type LabelMatcher = { label: string; op: '=' | '!=' | '=~' | '!~'; value: string };

export type VectorSelector = {
  /** The metric name, or undefined for a selector like `{job="x"}` that names none. */
  name: string | undefined;
  matchers: LabelMatcher[];
};

const labelListKeywords = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right']);
const otherKeywords = new Set(['and', 'or', 'unless', 'bool', 'offset', 'inf', 'nan', 'atan2']);
const aggregations = new Set([
  'sum', 'min', 'max', 'avg', 'group', 'stddev', 'stdvar', 'count', 'count_values',
  'bottomk', 'topk', 'quantile', 'limitk', 'limit_ratio',
]);

const identifierPattern = /^[a-zA-Z_:][a-zA-Z0-9_:]*/;
// A number (decimal, hexadecimal, with exponent) or a duration such as 5m or 1h30m.
const numberOrDurationPattern = /^(?:0[xX][0-9a-fA-F]+|[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)[0-9a-zA-Z_]*/;

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
 * `query_result(<expr>)` hold one; `label_values(<label>)` and `label_names()` hold none.
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

class Lexer {
  pos = 0;
  constructor(readonly text: string) {}

  get done() {
    return this.pos >= this.text.length;
  }

  peek(offset = 0) {
    return this.text[this.pos + offset] ?? '';
  }

  fail(message: string): never {
    throw new Error(`${message} at offset ${this.pos} of PromQL: ${this.text}`);
  }

  skipSpaceAndComments() {
    while (!this.done) {
      const c = this.peek();
      if (/\s/.test(c)) this.pos++;
      else if (c === '#') {
        const end = this.text.indexOf('\n', this.pos);
        this.pos = end === -1 ? this.text.length : end + 1;
      } else break;
    }
  }

  readString(): string {
    const quote = this.peek();
    this.pos++;
    let value = '';
    while (!this.done) {
      const c = this.peek();
      if (c === quote) {
        this.pos++;
        return value;
      }
      if (c === '\\' && quote !== '`') {
        value += this.peek(1);
        this.pos += 2;
      } else {
        value += c;
        this.pos++;
      }
    }
    return this.fail('unterminated string');
  }

  readIdentifier(): string {
    const match = identifierPattern.exec(this.text.slice(this.pos));
    if (!match) return this.fail('identifier expected');
    this.pos += match[0].length;
    return match[0];
  }

  /** Skips a parenthesised list of label names after by/without/on/ignoring/group_*. */
  skipLabelList() {
    this.pos++; // (
    while (!this.done && this.peek() !== ')') {
      const c = this.peek();
      if (c === '"' || c === "'" || c === '`') this.readString();
      else this.pos++;
    }
    if (this.done) this.fail('unterminated label list');
    this.pos++; // )
  }

  readMatchers(): { name: string | undefined; matchers: LabelMatcher[] } {
    this.pos++; // {
    let name: string | undefined;
    const matchers: LabelMatcher[] = [];
    for (;;) {
      this.skipSpaceAndComments();
      const c = this.peek();
      if (this.done) this.fail('unterminated label matchers');
      if (c === '}') {
        this.pos++;
        return { name, matchers };
      }
      if (c === ',') {
        this.pos++;
        continue;
      }
      if (c === '"' || c === "'" || c === '`') {
        name = this.readString(); // {"metric.name"} (Prometheus 3 quoted names)
        continue;
      }
      const label = this.readIdentifier();
      this.skipSpaceAndComments();
      const op = /^(=~|!~|!=|=)/.exec(this.text.slice(this.pos))?.[0] as LabelMatcher['op'] | undefined;
      if (!op) this.fail(`matcher operator expected after label ${label}`);
      this.pos += op.length;
      this.skipSpaceAndComments();
      const q = this.peek();
      if (q !== '"' && q !== "'" && q !== '`') this.fail(`quoted value expected for label ${label}`);
      const value = this.readString();
      if (label === '__name__' && op === '=') name = value;
      else matchers.push({ label, op, value });
    }
  }
}

/** Every vector selector of a PromQL expression (Grafana variables are stripped first). */
export function vectorSelectors(expression: string): VectorSelector[] {
  const lexer = new Lexer(stripGrafanaVariables(expression));
  const selectors: VectorSelector[] = [];
  for (;;) {
    lexer.skipSpaceAndComments();
    if (lexer.done) return selectors;
    const c = lexer.peek();
    if (c === '"' || c === "'" || c === '`') {
      lexer.readString();
    } else if (c === '[') {
      // a range or subquery: durations only
      const end = lexer.text.indexOf(']', lexer.pos);
      if (end === -1) lexer.fail('unterminated range');
      lexer.pos = end + 1;
    } else if (c === '{') {
      selectors.push(lexer.readMatchers());
    } else if (/[0-9]/.test(c) || (c === '.' && /[0-9]/.test(lexer.peek(1)))) {
      const match = numberOrDurationPattern.exec(lexer.text.slice(lexer.pos));
      lexer.pos += match ? match[0].length : 1;
    } else if (identifierPattern.test(lexer.text.slice(lexer.pos))) {
      const identifier = lexer.readIdentifier();
      const lower = identifier.toLowerCase();
      lexer.skipSpaceAndComments();
      const next = lexer.peek();
      if (labelListKeywords.has(lower)) {
        // group_left and group_right may stand without a list
        if (next === '(') lexer.skipLabelList();
      } else if (otherKeywords.has(lower)) {
        // an operator, a modifier or a number
      } else if (next === '(') {
        // a function or an aggregation; its arguments are read by the main loop
      } else if (aggregations.has(lower) && /^(by|without)\s*\(/i.test(lexer.text.slice(lexer.pos))) {
        // `sum by (…) (…)`: the label list and the argument follow
      } else if (next === '{') {
        const { name, matchers } = lexer.readMatchers();
        selectors.push({ name: name ?? identifier, matchers });
      } else {
        selectors.push({ name: identifier, matchers: [] });
      }
    } else {
      lexer.pos++; // operators, parentheses, commas, @
    }
  }
}

/** The metric names an expression reads; a selector without a name is reported as `{…}`. */
export function metricNamesOf(expression: string): string[] {
  return vectorSelectors(expression).map(
    (s) => s.name ?? `{${s.matchers.map((m) => `${m.label}${m.op}"${m.value}"`).join(', ')}}`,
  );
}
