/**
 * Where a process's main thread spends its time, from V8's sampling CPU profiler (the inspector's
 * `Profiler` domain, in-process): each sample's stack goes to the first part, in a given order, one of
 * whose frames it holds. The samples cover the whole profiled wall time, the event loop's idle time
 * included (V8's `(idle)` node), so the parts add up to it.
 */
import { Session } from "node:inspector/promises";
import { epochSeconds } from "./_timeline.ts";

export interface CallFrame {
  functionName: string;
  url: string;
}

/** The inspector's `Profiler.Profile`, the fields read here. */
export interface CpuProfile {
  nodes: { id: number; callFrame: CallFrame; children?: number[] }[];
  /** Microseconds. */
  startTime: number;
  endTime: number;
  /** The leaf node of each sample, and the microseconds since the previous sample (the first: since startTime). */
  samples: number[];
  timeDeltas: number[];
}

export interface Part {
  name: string;
  /** True for a frame that makes a stack this part's. */
  matches(frame: CallFrame): boolean;
}

/**
 * Starts sampling this thread every `intervalUs`; the returned function stops and gives the profile, and a
 * map from `epochSeconds()` to the profile's microseconds (its clock, set when sampling started).
 */
export async function startProfile(intervalUs = 1000): Promise<() => Promise<{ profile: CpuProfile; at: (epoch: number) => number }>> {
  const session = new Session();
  session.connect();
  await session.post("Profiler.enable");
  await session.post("Profiler.setSamplingInterval", { interval: intervalUs });
  await session.post("Profiler.start");
  const startedAt = epochSeconds();
  return async () => {
    const profile = (await session.post("Profiler.stop")).profile as CpuProfile;
    session.disconnect();
    return { profile, at: (epoch) => profile.startTime + (epoch - startedAt) * 1e6 };
  };
}

/**
 * Seconds of `profile` per part: a sample lasts until the next one (the last until endTime) and goes to
 * the first of `parts` matching a frame of its stack, else to `rest`. Only the time inside `windows`
 * (disjoint [start, end] in the profile's microseconds; the whole profile without them) counts: the seconds add
 * up to the windows' length within the profile.
 */
export function splitProfile(
  profile: CpuProfile,
  parts: readonly Part[],
  options: { rest?: string; windows?: readonly (readonly [number, number])[] } = {},
): { name: string; seconds: number }[] {
  const rest = options.rest ?? "other";
  const windows = options.windows ?? [[profile.startTime, profile.endTime]];
  const overlap = (a: number, b: number): number => windows.reduce((s, [x, y]) => s + Math.max(0, Math.min(b, y) - Math.max(a, x)), 0);
  const parent = new Map<number, number>();
  const frame = new Map<number, CallFrame>();
  for (const node of profile.nodes) {
    frame.set(node.id, node.callFrame);
    for (const child of node.children ?? []) parent.set(child, node.id);
  }
  const owner = new Map<number, number>(); // node -> part index (parts.length: rest)
  const ownerOf = (leaf: number): number => {
    let known = owner.get(leaf);
    if (known !== undefined) return known;
    const stack: CallFrame[] = [];
    for (let id: number | undefined = leaf; id !== undefined; id = parent.get(id)) stack.push(frame.get(id)!);
    known = parts.findIndex((p) => stack.some((f) => p.matches(f)));
    if (known < 0) known = parts.length;
    owner.set(leaf, known);
    return known;
  };
  const micros = new Array<number>(parts.length + 1).fill(0);
  let at = profile.startTime;
  const times = profile.timeDeltas.map((d) => (at += d));
  profile.samples.forEach((leaf, i) => {
    const from = i === 0 ? profile.startTime : times[i]!;
    const to = i + 1 < times.length ? times[i + 1]! : profile.endTime;
    micros[ownerOf(leaf)]! += overlap(from, to);
  });
  return [...parts.map((p, i) => ({ name: p.name, seconds: micros[i]! / 1e6 })), { name: rest, seconds: micros[parts.length]! / 1e6 }];
}
