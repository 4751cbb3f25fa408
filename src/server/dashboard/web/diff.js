// A line diff (longest common subsequence) of two texts, for comparing resource versions.

/** [{ op: " " | "-" | "+", line }] turning `a` into `b`. */
export function diffLines(a, b) {
  const x = a.split("\n");
  const y = b.split("\n");
  // Common head and tail first: versions usually differ in a few lines, so the table below stays small.
  let head = 0;
  while (head < x.length && head < y.length && x[head] === y[head]) head++;
  let tail = 0;
  while (tail < x.length - head && tail < y.length - head && x[x.length - 1 - tail] === y[y.length - 1 - tail]) tail++;
  const xs = x.slice(head, x.length - tail);
  const ys = y.slice(head, y.length - tail);
  const n = xs.length;
  const m = ys.length;
  const out = x.slice(0, head).map((line) => ({ op: " ", line }));
  if (n * m > 4_000_000) {
    // Too large to align line by line: show the middle as removed, then added.
    for (const line of xs) out.push({ op: "-", line });
    for (const line of ys) out.push({ op: "+", line });
  } else {
    const lcs = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
    for (let i = n - 1; i >= 0; i--)
      for (let j = m - 1; j >= 0; j--) lcs[i][j] = xs[i] === ys[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    let i = 0;
    let j = 0;
    while (i < n && j < m) {
      if (xs[i] === ys[j]) out.push({ op: " ", line: xs[i++] }), j++;
      else if (lcs[i + 1][j] >= lcs[i][j + 1]) out.push({ op: "-", line: xs[i++] });
      else out.push({ op: "+", line: ys[j++] });
    }
    while (i < n) out.push({ op: "-", line: xs[i++] });
    while (j < m) out.push({ op: "+", line: ys[j++] });
  }
  for (const line of x.slice(x.length - tail)) out.push({ op: " ", line });
  return out;
}
