/** For the scripts the cross-runtime tests run under Node, Deno and Bun: exiting, and a device or a skip line. */
import { GpuContext } from "../../src/gpu/context.ts";
import { GpuUnavailableError } from "../../src/gpu/device.ts";
import { detectRuntime } from "../../src/gpu/navigator.ts";

export function exit(code: number): never {
  const g = globalThis as { Deno?: { exit(c: number): never }; process?: { exit(c: number): never } };
  if (g.Deno) g.Deno.exit(code);
  return g.process!.exit(code);
}

/** A GPU context, or (no adapter in this runtime) prints {"runtime", "skip": reason} and exits with code 3. */
export async function contextOrSkip(): Promise<GpuContext> {
  try {
    return await GpuContext.create();
  } catch (e) {
    if (!(e instanceof GpuUnavailableError)) throw e;
    console.log(JSON.stringify({ runtime: detectRuntime(), skip: e.message }));
    return exit(3);
  }
}
