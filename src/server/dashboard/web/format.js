// Small formatting helpers: every result is plain text for a text node.

export function fmtTime(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const d = new Date(seconds * 1000);
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function fmtDuration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "–";
  if (seconds === 0) return "0 s";
  if (seconds < 0.001) return `${(seconds * 1e6).toFixed(0)} µs`;
  if (seconds < 1) return `${(seconds * 1000).toFixed(seconds < 0.01 ? 2 : 0)} ms`;
  if (seconds < 60) return `${seconds.toFixed(seconds < 10 ? 2 : 1)} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
  return `${Math.floor(seconds / 3600)} h ${Math.round((seconds % 3600) / 60)} min`;
}

export function fmtAge(seconds, now = Date.now() / 1000) {
  if (seconds === null || seconds === undefined) return "never";
  return `${fmtDuration(Math.max(0, now - seconds))} ago`;
}

export function fmtBytes(n) {
  if (typeof n !== "number") return "–";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) (n /= 1024), i++;
  return `${n.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

export const fmtInt = (n) => (typeof n === "number" ? n.toLocaleString("en-US") : "–");

export function fmtNumber(n) {
  if (typeof n !== "number") return String(n);
  if (Number.isInteger(n)) return fmtInt(n);
  if (!Number.isFinite(n)) return String(n);
  if (Math.abs(n) >= 1e15 || (n !== 0 && Math.abs(n) < 0.001)) return n.toExponential(3);
  return n.toLocaleString("en-US", { maximumFractionDigits: Math.abs(n) >= 1000 ? 1 : 4 });
}

/**
 * JSON, indented, for a <pre>; strings stay strings. A list of numbers (token ids) stays on one line,
 * `[11, 12, 13]`, which the <pre> wraps as text, instead of one number per line.
 */
export function pretty(value) {
  if (typeof value === "string") return value;
  try {
    return indented(value, "");
  } catch {
    return String(value);
  }
}

function indented(value, indent) {
  if (value === null || typeof value !== "object") return JSON.stringify(value) ?? String(value);
  const inner = `${indent}  `;
  if (Array.isArray(value)) {
    if (value.length === 0) return "[]";
    if (value.every((v) => typeof v === "number")) return `[${value.map((v) => JSON.stringify(v)).join(", ")}]`;
    return `[\n${value.map((v) => inner + indented(v, inner)).join(",\n")}\n${indent}]`;
  }
  const entries = Object.entries(value);
  if (entries.length === 0) return "{}";
  return `{\n${entries.map(([k, v]) => `${inner}${JSON.stringify(k)}: ${indented(v, inner)}`).join(",\n")}\n${indent}}`;
}

/**
 * A statistic by the unit its key ends in: `_bytes` scaled (B to TB), `_gb` and `_mb` as given (the
 * system snapshot's memory, disk and network), `_pct` as a percentage; other numbers plain.
 */
export function fmtStat(key, value) {
  if (typeof value !== "number") return preview(value, 120);
  if (key.endsWith("_bytes")) return fmtBytes(value);
  if (key.endsWith("_gb")) return `${fmtNumber(value)} GB`;
  if (key.endsWith("_mb")) return `${fmtNumber(value)} MB`;
  if (key.endsWith("_pct")) return `${fmtNumber(value)} %`;
  return fmtNumber(value);
}

/** A short one-line preview of any value. */
export function preview(value, max = 80) {
  const text = typeof value === "string" ? value : (JSON.stringify(value) ?? String(value));
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}
