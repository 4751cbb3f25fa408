/** A small SVG line chart (no dependencies): the reward curves of `agl train` and the calc demo. */
export interface Series {
  name: string;
  color: string;
  points: Array<[x: number, y: number]>;
}

const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;");

/** Lines over x in [0, xMax] and y in [0, 1], with axes, ticks and a legend. */
export function lineChartSvg(title: string, series: readonly Series[], xMax: number, xLabel: string, yLabel: string): string {
  const W = 640,
    H = 360,
    L = 56,
    R = 16,
    T = 36,
    B = 44;
  const x = (v: number) => L + (xMax > 0 ? (v / xMax) * (W - L - R) : 0);
  const y = (v: number) => T + (1 - Math.max(0, Math.min(1, v))) * (H - T - B);
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${W / 2}" y="20" text-anchor="middle" font-size="14">${esc(title)}</text>`,
    `<line x1="${L}" y1="${y(0)}" x2="${W - R}" y2="${y(0)}" stroke="black"/>`,
    `<line x1="${L}" y1="${y(0)}" x2="${L}" y2="${y(1)}" stroke="black"/>`,
    `<text x="${(L + W - R) / 2}" y="${H - 8}" text-anchor="middle">${esc(xLabel)}</text>`,
    `<text x="14" y="${(T + H - B) / 2}" text-anchor="middle" transform="rotate(-90 14 ${(T + H - B) / 2})">${esc(yLabel)}</text>`,
  ];
  for (const v of [0, 0.25, 0.5, 0.75, 1]) {
    parts.push(
      `<line x1="${L}" y1="${y(v)}" x2="${W - R}" y2="${y(v)}" stroke="#ddd"/>`,
      `<text x="${L - 6}" y="${y(v) + 4}" text-anchor="end">${v.toFixed(2)}</text>`,
    );
  }
  const ticks = Math.min(10, xMax);
  for (let i = 0; i <= ticks; i++) {
    const v = ticks > 0 ? Math.round((i / ticks) * xMax) : 0;
    parts.push(`<text x="${x(v)}" y="${y(0) + 16}" text-anchor="middle">${v}</text>`);
  }
  series.forEach((s, k) => {
    const pts = s.points.map(([a, b]) => `${x(a).toFixed(1)},${y(b).toFixed(1)}`).join(" ");
    parts.push(`<polyline fill="none" stroke="${s.color}" stroke-width="2" points="${pts}"/>`);
    for (const [a, b] of s.points) parts.push(`<circle cx="${x(a).toFixed(1)}" cy="${y(b).toFixed(1)}" r="2.5" fill="${s.color}"/>`);
    parts.push(
      `<rect x="${L + 12}" y="${T + 6 + k * 18}" width="12" height="3" fill="${s.color}"/>`,
      `<text x="${L + 30}" y="${T + 11 + k * 18}">${esc(s.name)}</text>`,
    );
  });
  parts.push("</svg>");
  return parts.join("\n");
}
