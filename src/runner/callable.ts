/**
 * Makes a class instance callable (upstream's function agents and algorithms are callable objects):
 * a function that calls `fn`, carrying the instance's prototype, own fields and `fn`'s name. A
 * constructor returns the result.
 */
export function callableInstance<I extends object>(instance: I, prototype: object, fn: (...args: never[]) => unknown): I {
  const callable = ((...args: never[]) => fn(...args)) as unknown as I;
  Object.setPrototypeOf(callable, prototype);
  for (const key of Object.keys(instance)) {
    Object.defineProperty(callable, key, {
      value: (instance as Record<string, unknown>)[key],
      writable: true,
      enumerable: true,
      configurable: true,
    });
  }
  Object.defineProperty(callable, "name", { value: fn.name, configurable: true });
  return callable;
}
