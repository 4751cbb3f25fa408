/** String keys (uids, rollout ids) to dense integer ids 0..K-1 in first-appearance order, as kernels take them. */
export function denseIds(keys: readonly string[]): { ids: Int32Array; keys: string[] } {
  const order: string[] = [];
  const index = new Map<string, number>();
  const ids = Int32Array.from(keys, (k) => {
    let i = index.get(k);
    if (i === undefined) {
      i = order.length;
      index.set(k, i);
      order.push(k);
    }
    return i;
  });
  return { ids, keys: order };
}
