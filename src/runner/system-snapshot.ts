/**
 * `systemSnapshot()`: worker telemetry for heartbeats (docs/runner.md#heartbeats), built from `node:os`,
 * `node:fs` and `/proc` (Node, Deno and Bun all provide them). Fields that cannot be read are null.
 */
import * as os from "node:os";
import * as fs from "node:fs";

const round2 = (x: number): number => Math.round(x * 100) / 100;
const GiB = 1024 ** 3;
const MiB = 1024 ** 2;

function safe<T>(f: () => T): T | null {
  try {
    return f();
  } catch {
    return null;
  }
}

function cpuTimes(): { idle: number; total: number } | null {
  return safe(() => {
    let idle = 0;
    let total = 0;
    for (const c of os.cpus()) {
      const t = c.times;
      idle += t.idle;
      total += t.user + t.nice + t.sys + t.idle + t.irq;
    }
    return { idle, total };
  });
}

// CPU usage is the busy share since the previous snapshot (or since this module loaded).
let lastCpu = cpuTimes();

function cpuUsagePct(): number | null {
  const now = cpuTimes();
  const prev = lastCpu;
  lastCpu = now;
  if (!now || !prev || now.total <= prev.total) return null;
  return round2((1 - (now.idle - prev.idle) / (now.total - prev.total)) * 100);
}

function netBytes(): { sent: number; recv: number } | null {
  return safe(() => {
    const lines = fs.readFileSync("/proc/net/dev", "utf8").split("\n").slice(2);
    let sent = 0;
    let recv = 0;
    for (const line of lines) {
      const [, rest] = line.split(":");
      if (!rest) continue;
      const f = rest.trim().split(/\s+/).map(Number);
      recv += f[0] ?? 0;
      sent += f[8] ?? 0;
    }
    return { sent, recv };
  });
}

function disk(): { used: number; total: number } | null {
  return safe(() => {
    const s = (fs as unknown as { statfsSync?: (p: string) => { blocks: number; bsize: number; bfree: number } }).statfsSync?.("/");
    if (!s) return null;
    const total = s.blocks * s.bsize;
    return { used: total - s.bfree * s.bsize, total };
  });
}

export interface GpuInfo {
  gpu: string;
  util_pct: number | null;
  mem_used_mb: number | null;
  mem_total_mb: number | null;
  temp_c: number | null;
}

export function systemSnapshot(includeGpu = false): Record<string, unknown> {
  const cpus = safe(() => os.cpus()) ?? [];
  const memTotal = safe(() => os.totalmem());
  const memFree = safe(() => os.freemem());
  const memUsed = memTotal !== null && memFree !== null ? memTotal - memFree : null;
  const d = disk();
  const net = netBytes();
  const snapshot: Record<string, unknown> = {
    timestamp: new Date().toISOString().slice(0, 19),
    host: safe(() => os.hostname()),
    os: safe(() => `${os.type()} ${os.release()}`),
    cpu_name: cpus[0]?.model ?? null,
    cpu_cores: safe(() => os.availableParallelism?.() ?? cpus.length) ?? null,
    cpu_threads: cpus.length || null,
    cpu_usage_pct: cpuUsagePct(),
    mem_used_gb: memUsed === null ? null : round2(memUsed / GiB),
    mem_total_gb: memTotal === null ? null : round2(memTotal / GiB),
    mem_pct: memUsed === null || !memTotal ? null : round2((memUsed / memTotal) * 100),
    disk_used_gb: d ? round2(d.used / GiB) : null,
    disk_total_gb: d ? round2(d.total / GiB) : null,
    disk_pct: d && d.total ? round2((d.used / d.total) * 100) : null,
    bytes_sent_mb: net ? round2(net.sent / MiB) : null,
    bytes_recv_mb: net ? round2(net.recv / MiB) : null,
  };
  // No portable GPU query exists without a vendor tool; the list is empty rather than guessed.
  if (includeGpu) snapshot.gpus = [] as GpuInfo[];
  return snapshot;
}
