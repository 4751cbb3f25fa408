/** Kernel outputs by name, and one digest of their exact values, compared across runtimes. */
export type Out = Record<string, ArrayLike<number>>;

/** FNV-1a over the exact bytes of every output, as float64, in key order. */
export function digest(out: Out): string {
  let h = 0x811c9dc5;
  const buf = new DataView(new ArrayBuffer(8));
  for (const key of Object.keys(out).sort()) {
    for (const ch of key) h = Math.imul(h ^ ch.charCodeAt(0), 0x01000193) >>> 0;
    for (const v of Array.from(out[key]!)) {
      buf.setFloat64(0, v);
      for (let i = 0; i < 8; i++) h = Math.imul(h ^ buf.getUint8(i), 0x01000193) >>> 0;
    }
  }
  return h.toString(16).padStart(8, "0");
}
