/**
 * Component specs and `buildComponent`. A spec is an instance, a class, a zero-argument
 * factory, a registered name (`"shm"`, `"LitAgentRunner"`, `"agentlightning.adapter.TraceToMessages"`),
 * or a dict `{ type: name, ...options }`. Dict keys may be snake_case as upstream; constructors get
 * camelCase. Classes declare the options they accept in `static acceptedOptions`, which decides
 * which optional defaults (such as `nRunners`) are injected.
 */
import { ValidationError } from "../types/index.ts";

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Ctor<T> = abstract new (...args: any[]) => T;
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type ConcreteCtor<T> = new (options?: any) => T;

export type ComponentSpec<T> =
  | T
  | ConcreteCtor<T>
  | (() => T)
  | string
  | ({ type?: string; name?: string } & Record<string, unknown>)
  | null
  | undefined;

const registry = new Map<string, ConcreteCtor<unknown>>();

/** Registers a class under each name (the class name is always added). */
export function registerComponent(cls: ConcreteCtor<unknown>, ...names: string[]): void {
  for (const n of [cls.name, ...names]) registry.set(n, cls);
}

export function lookupComponent(name: string): ConcreteCtor<unknown> | undefined {
  return registry.get(name) ?? registry.get(name.split(".").pop() ?? name);
}

const toCamel = (k: string): string => k.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());

export const isClass = (v: unknown): v is ConcreteCtor<unknown> =>
  typeof v === "function" && /^class[\s{]/.test(Function.prototype.toString.call(v));

function accepted(cls: ConcreteCtor<unknown>): readonly string[] {
  return (cls as unknown as { acceptedOptions?: readonly string[] }).acceptedOptions ?? [];
}

export type OptionalDefaults = Record<string, unknown | (() => unknown)>;

/** `new cls(options)`, adding each optional default the class accepts and the caller did not give (factories called lazily). */
export function instantiateComponent<T>(cls: ConcreteCtor<T>, provided: Record<string, unknown> = {}, defaults: OptionalDefaults = {}): T {
  const options: Record<string, unknown> = { ...provided };
  const accepts = accepted(cls as ConcreteCtor<unknown>);
  for (const [k, v] of Object.entries(defaults)) {
    if (k in options || !accepts.includes(k)) continue;
    options[k] = typeof v === "function" && !isClass(v) ? (v as () => unknown)() : v;
  }
  return new cls(options);
}

export interface BuildOptions<T> {
  expectedType: Ctor<T>;
  specName: string;
  defaultFactory?: () => T | null;
  allowNone?: boolean;
  optionalDefaults?: OptionalDefaults;
  dictRequiresType?: boolean;
  dictDefaultCls?: ConcreteCtor<T>;
}

function typeName(v: unknown): string {
  if (v === null) return "null";
  if (typeof v === "function") return isClass(v) ? `class ${v.name}` : "function";
  if (typeof v === "object") return (v as object).constructor?.name ?? "object";
  return typeof v;
}

function check<T>(v: unknown, o: BuildOptions<T>, how: string): T {
  if (v instanceof o.expectedType) return v as T;
  throw new TypeError(`${o.specName} ${how} returned ${typeName(v)}, which is not a ${o.expectedType.name} subclass.`);
}

function fromSpec<T>(spec: string | Record<string, unknown>, o: BuildOptions<T>): T {
  if (typeof spec === "string") {
    const cls = lookupComponent(spec);
    if (!cls) throw new ValidationError(`Unknown ${o.specName} '${spec}'; register it with registerComponent()`, [o.specName]);
    return check(instantiateComponent(cls, {}, o.optionalDefaults), o, "spec");
  }
  const { type, ...rest } = spec as { type?: unknown } & Record<string, unknown>;
  let cls: ConcreteCtor<unknown> | undefined;
  if (typeof type === "string") {
    cls = lookupComponent(type);
    if (!cls) throw new ValidationError(`Unknown ${o.specName} type '${type}'`, [o.specName, "type"]);
  } else if (type === undefined && typeof rest.name === "string" && lookupComponent(rest.name)) {
    cls = lookupComponent(rest.name);
    delete rest.name;
  }
  if (!cls) {
    if (o.dictRequiresType ?? true)
      throw new ValidationError(`${o.specName} dict must have a 'type' key with the class full name`, [o.specName, "type"]);
    if (!o.dictDefaultCls)
      throw new ValidationError(`${o.specName} dict is missing 'type' and no default class provided`, [o.specName, "type"]);
    cls = o.dictDefaultCls as ConcreteCtor<unknown>;
  }
  // Nested `{ type }` dicts (a runner's tracer, say) are built too, as fresh instances each time.
  const nested = (v: unknown): unknown =>
    typeof v === "object" &&
    v !== null &&
    Object.getPrototypeOf(v) === Object.prototype &&
    typeof (v as { type?: unknown }).type === "string"
      ? fromSpec(v as Record<string, unknown>, { expectedType: Object as never, specName: o.specName })
      : v;
  const options = Object.fromEntries(Object.entries(rest).map(([k, v]) => [toCamel(k), nested(v)]));
  return check(instantiateComponent(cls, options, o.optionalDefaults), o, "spec");
}

export function buildComponent<T>(spec: ComponentSpec<T>, o: BuildOptions<T> & { allowNone: true }): T | null;
export function buildComponent<T>(spec: ComponentSpec<T>, o: BuildOptions<T>): T;
export function buildComponent<T>(spec: ComponentSpec<T>, o: BuildOptions<T>): T | null {
  if (spec instanceof o.expectedType) return spec as T;
  if (spec === null || spec === undefined) {
    const made = o.defaultFactory?.() ?? null;
    if (made !== null) return check(made, o, "default factory");
    if (o.allowNone) return null;
    throw new ValidationError(`${o.specName} cannot be None.`, [o.specName]);
  }
  if (isClass(spec)) {
    if (spec === (o.expectedType as unknown) || spec.prototype instanceof o.expectedType) {
      return check(instantiateComponent(spec as ConcreteCtor<T>, {}, o.optionalDefaults), o, "class");
    }
    throw new ValidationError(`Invalid ${o.specName} type: ${typeName(spec)}. Expected ${o.expectedType.name}, str, dict, or None.`, [
      o.specName,
    ]);
  }
  if (typeof spec === "function") return check((spec as () => unknown)(), o, "factory");
  if (typeof spec === "string" || (typeof spec === "object" && Object.getPrototypeOf(spec) === Object.prototype)) {
    return fromSpec(spec as string | Record<string, unknown>, o);
  }
  throw new ValidationError(`Invalid ${o.specName} type: ${typeName(spec)}. Expected ${o.expectedType.name}, str, dict, or None.`, [
    o.specName,
  ]);
}
