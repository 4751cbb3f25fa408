/** CPU time of processes and threads, from Linux's /proc stat files. */
import { readFileSync } from "node:fs";

/** CPU seconds (user + system) a thread or process has used so far, from a /proc stat file. */
export function statCpuSeconds(path: string): number {
  const stat = readFileSync(path, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / 100;
}
export const cpuSeconds = (pid: number): number => statCpuSeconds(`/proc/${pid}/stat`);
/** The main (JavaScript) thread's share: the rest is V8's helper threads (optimizing compiler, GC), libuv and workers. */
export const mainThreadCpuSeconds = (pid: number): number => statCpuSeconds(`/proc/${pid}/task/${pid}/stat`);
