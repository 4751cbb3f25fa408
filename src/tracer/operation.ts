/**
 * `operation`: an `agentlightning.operation` span around a function or a block, recording inputs, output
 * and errors (docs/tracing.md#span-names-attributes-and-emitters).
 *
 *   const add = operation(function add(a, b) { return a + b });        // wrapper
 *   await operation({ name: "fetch" }, async (op) => { op.setInput(url); ...; op.setOutput(x) }); // scoped
 *
 * Options other than `name` and `propagate` become initial attributes (flattened), as upstream's
 * keyword arguments do. Inputs are named after the function's parameters when they can be read from
 * its source, else recorded positionally as `…input.args.<i>`.
 */
import type { Attributes, SpanCoreFields } from "../types/index.ts";
import { AGL_OPERATION, LightningError, LightningSpanAttributes as A, ValidationError } from "../types/index.ts";
import { flatten, sanitizeAttributes } from "./attributes.ts";
import { DummyTracer, requireActiveTracer, type OperationRecorder, type Tracer } from "./base.ts";
import { parameterInfo } from "./params.ts";

export interface OperationOptions {
  /** Sets `agentlightning.operation.name` (the function's name by default for the wrapper). */
  name?: string;
  /** Send the span to the active tracer (default true). */
  propagate?: boolean;
  /** Anything else: initial attributes. */
  [attribute: string]: unknown;
}

const localTracer = new DummyTracer();

function initialAttributes(options: OperationOptions, defaultName: string | null): Attributes {
  const { name, propagate: _p, ...rest } = options;
  if (name !== undefined && A.OPERATION_NAME in rest) {
    throw new ValidationError(`Do not specify both 'name' and '${A.OPERATION_NAME}'`, ["name"]);
  }
  const attrs: Record<string, unknown> = {};
  if (defaultName !== null) attrs[A.OPERATION_NAME] = defaultName;
  Object.assign(attrs, rest);
  if (name !== undefined) attrs[A.OPERATION_NAME] = name;
  return sanitizeAttributes(flatten(attrs));
}

const encode = (key: string, value: unknown): Attributes => sanitizeAttributes(flatten({ [key]: value }));
const inputKey = (k: string) => `${A.OPERATION_INPUT}.${k}`;

function inputAttributes(fn: (...a: never[]) => unknown, args: unknown[]): Attributes {
  const info = parameterInfo(fn);
  const out: Attributes = {};
  args.forEach((v, i) => {
    const name = info?.names[i];
    let key: string;
    if (name) key = inputKey(name);
    else if (info && i >= info.names.length && info.rest) key = inputKey(`${info.rest}.${i - info.names.length}`);
    else key = inputKey(`args.${i}`);
    Object.assign(out, encode(key, v));
  });
  return out;
}

/** What a scoped operation block can record. */
export class OperationHandle {
  private open = true;
  constructor(private readonly recorder: OperationRecorder) {}

  private check(what: string): void {
    if (!this.open) throw new LightningError(`${what} must be called inside the operation block`);
  }
  /** Positional inputs: `…input.args.<i>`. */
  setInput(...args: unknown[]): void {
    this.check("setInput");
    args.forEach((v, i) => this.recorder.recordAttributes(encode(inputKey(`args.${i}`), v)));
  }
  /** Named inputs: `…input.<k>`. */
  setNamedInput(values: Record<string, unknown>): void {
    this.check("setNamedInput");
    for (const [k, v] of Object.entries(values)) this.recorder.recordAttributes(encode(inputKey(k), v));
  }
  setOutput(value: unknown): void {
    this.check("setOutput");
    this.recorder.recordAttributes(encode(A.OPERATION_OUTPUT, value));
  }
  /** The recorded span; only after the block has exited. */
  span(): SpanCoreFields {
    if (this.open) throw new LightningError("The operation span is available only after the block exits");
    return this.recorder.getRecordedSpan();
  }
  /** @internal */
  close(): void {
    this.open = false;
  }
}

const tracerFor = (propagate: unknown): Tracer => (propagate === false ? localTracer : requireActiveTracer());

type AnyFn = (...args: never[]) => unknown;

export function operation<F extends AnyFn>(fn: F, options?: OperationOptions): F;
export function operation<T>(options: OperationOptions, body: (op: OperationHandle) => T): T;
export function operation(a: unknown, b?: unknown): unknown {
  if (typeof a === "string") {
    throw new ValidationError("operation() takes no positional span name; the span is always 'agentlightning.operation' (use { name })", [
      "name",
    ]);
  }
  if (typeof a === "function") return wrap(a as AnyFn, (b ?? {}) as OperationOptions);
  if (typeof b !== "function") throw new TypeError("operation(options, body) needs a body function");
  return scoped((a ?? {}) as OperationOptions, b as (op: OperationHandle) => unknown);
}

function scoped<T>(options: OperationOptions, body: (op: OperationHandle) => T): T {
  const attributes = initialAttributes(options, null);
  let handle: OperationHandle | null = null;
  const result = tracerFor(options.propagate).operationContext(AGL_OPERATION, { attributes }, (rec) => {
    handle = new OperationHandle(rec);
    const h = handle;
    try {
      const r = body(h);
      if (r instanceof Promise) return r.finally(() => h.close()) as T;
      h.close();
      return r;
    } catch (err) {
      h.close();
      throw err;
    }
  });
  return result;
}

function wrap<F extends AnyFn>(fn: F, options: OperationOptions): F {
  const attributes = initialAttributes(options, fn.name || "anonymous");
  const wrapped = function (this: unknown, ...args: unknown[]): unknown {
    return tracerFor(options.propagate).operationContext(AGL_OPERATION, { attributes }, (rec) => {
      rec.recordAttributes(inputAttributes(fn, args));
      const result = (fn as unknown as (...a: unknown[]) => unknown).apply(this, args);
      if (result instanceof Promise) {
        return result.then((v) => {
          rec.recordAttributes(encode(A.OPERATION_OUTPUT, v));
          return v;
        });
      }
      rec.recordAttributes(encode(A.OPERATION_OUTPUT, result));
      return result;
    });
  };
  Object.defineProperty(wrapped, "name", { value: fn.name });
  return wrapped as unknown as F;
}
