/**
 * Rendering a PromptTemplate resource with its engine (docs/training.md#prompt-template-engines):
 * `f-string` is Python's `str.format` for named fields (`{name}`, `{{` and `}}` for literal braces),
 * `jinja` goes through @huggingface/jinja with undefined top-level names refused, and `poml` is
 * refused with UnsupportedTemplateEngineError (it needs Microsoft's POML renderer, which has no
 * JavaScript port).
 */
import { Environment, Interpreter, Template } from "@huggingface/jinja";
import { ValidationError } from "./errors.ts";

/** The fields of a PromptTemplate that rendering reads (structural, so resources.ts can use it too). */
export interface RenderableTemplate {
  template: string;
  engine: string;
}

/** A template engine this library cannot render (`poml`, or an unknown name). */
export class UnsupportedTemplateEngineError extends ValidationError {
  constructor(readonly engine: string) {
    super(`prompt template engine '${engine}' is not supported; use 'f-string' or 'jinja'`, ["engine"]);
  }
}

/** A template field with no value among the variables given. */
export class MissingTemplateVariableError extends ValidationError {
  constructor(readonly variable: string) {
    super(`missing value for template field '${variable}'`, [variable]);
  }
}

/** Python `str.format` for named fields: `{name}` (surrounding spaces ignored), `{{` and `}}` as literal braces. */
export function formatFString(template: string, values: Record<string, unknown>): string {
  return template.replace(/\{\{|\}\}|\{([^{}]*)\}/g, (m, name: string | undefined) => {
    if (m === "{{") return "{";
    if (m === "}}") return "}";
    const key = (name ?? "").trim();
    if (!Object.hasOwn(values, key)) throw new MissingTemplateVariableError(key);
    const v = values[key];
    return typeof v === "string" ? v : JSON.stringify(v);
  });
}

/** The slice of @huggingface/jinja's runtime used here. Its .d.ts re-exports the runtime through an
 * extensionless path that NodeNext resolution does not follow, so the shapes are declared here. */
interface JinjaNode {
  type: string;
  value?: unknown;
  test?: unknown;
  filter?: unknown;
}
interface JinjaScope {
  resolve(name: string): unknown;
  set(name: string, value: unknown): unknown;
}
interface JinjaInterpreter {
  evaluate(node: JinjaNode | undefined, scope: JinjaScope): unknown;
  run(program: unknown): { value: unknown };
}
const InterpreterBase = Interpreter as unknown as new (env: JinjaScope) => JinjaInterpreter;

/** Tests and filters meant for names that may be undefined: `x is defined`, `x | default(...)`. */
const LENIENT_TESTS = new Set(["defined", "undefined"]);
const LENIENT_FILTERS = new Set(["default", "d"]);

/**
 * Jinja with StrictUndefined-like names: a top-level name that is neither given nor set in the
 * template is an error (a typo would otherwise render as nothing and the prompt would silently lose
 * a field), except under `is defined` and `| default`.
 */
class StrictInterpreter extends InterpreterBase {
  private lenient = 0;

  override evaluate(node: JinjaNode | undefined, scope: JinjaScope): unknown {
    if (node?.type === "Identifier" && this.lenient === 0) {
      const name = String(node.value);
      try {
        scope.resolve(name);
      } catch {
        throw new MissingTemplateVariableError(name);
      }
    }
    const lenient =
      (node?.type === "TestExpression" && LENIENT_TESTS.has(nameOf(node.test))) ||
      (node?.type === "FilterExpression" && LENIENT_FILTERS.has(nameOf(node.filter)));
    if (!lenient) return super.evaluate(node, scope);
    this.lenient++;
    try {
      return super.evaluate(node, scope);
    } finally {
      this.lenient--;
    }
  }
}

/** The name of a test or filter node: an identifier, or a call of one (`default("x")`). */
function nameOf(node: unknown): string {
  const n = node as { type?: string; value?: unknown; callee?: { value?: unknown } };
  if (n?.type === "CallExpression") return String(n.callee?.value ?? "");
  return String(n?.value ?? "");
}

function renderJinja(template: string, values: Record<string, unknown>): string {
  let parsed: Template;
  try {
    parsed = new Template(template);
  } catch (e) {
    throw new ValidationError(`jinja template does not parse: ${(e as Error).message}`, ["template"]);
  }
  const env = new (Environment as unknown as new () => JinjaScope)();
  // The same constants Template.render declares, then the caller's values.
  const constants = { true: true, false: false, none: null, True: true, False: false, None: null };
  for (const [k, v] of Object.entries(constants)) if (!Object.hasOwn(values, k)) env.set(k, v);
  for (const [k, v] of Object.entries(values)) env.set(k, v);
  try {
    return String(new StrictInterpreter(env).run(parsed.parsed).value);
  } catch (e) {
    if (e instanceof ValidationError) throw e;
    throw new ValidationError(`jinja template failed to render: ${(e as Error).message}`, ["template"]);
  }
}

/** Renders a prompt template with its engine; a missing variable is a MissingTemplateVariableError. */
export function renderPromptTemplate(template: RenderableTemplate, values: Record<string, unknown>): string {
  switch (template.engine) {
    case "f-string":
      return formatFString(template.template, values);
    case "jinja":
      return renderJinja(template.template, values);
    default:
      throw new UnsupportedTemplateEngineError(template.engine);
  }
}
