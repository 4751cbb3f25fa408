/**
 * The training tab's page: the form, the progress line and the reward chart (plain SVG). The loop itself
 * is tab.ts; serve.ts bundles this file as main.js.
 */
import { runTrainingTab, type TabStepReport } from "./tab.ts";

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const params = new URLSearchParams(location.search);
$<HTMLInputElement>("store").value = params.get("store") ?? "";
$<HTMLInputElement>("token").value = params.get("token") ?? "";

const status = (text: string, error = false): void => {
  const el = $("status");
  el.textContent = text;
  el.className = error ? "error" : "";
};

/** Mean reward per step as a polyline, y from 0 to 1. */
function drawChart(reports: TabStepReport[]): void {
  const svg = $("chart");
  const [w, h, pad] = [720, 240, 30];
  const n = Math.max(2, reports.length);
  const x = (i: number) => pad + ((w - 2 * pad) * i) / (n - 1);
  const y = (r: number) => h - pad - (h - 2 * pad) * Math.max(0, Math.min(1, r));
  const points = reports.map((r, i) => `${x(i).toFixed(1)},${y(r.reward).toFixed(1)}`).join(" ");
  svg.innerHTML =
    `<line x1="${pad}" y1="${h - pad}" x2="${w - pad}" y2="${h - pad}" stroke="#999"/>` +
    `<line x1="${pad}" y1="${pad}" x2="${pad}" y2="${h - pad}" stroke="#999"/>` +
    `<text x="4" y="${pad}" font-size="11">1</text><text x="4" y="${h - pad}" font-size="11">0</text>` +
    `<text x="${w / 2}" y="${h - 6}" font-size="11" text-anchor="middle">step</text>` +
    `<polyline fill="none" stroke="#2364aa" stroke-width="2" points="${points}"/>` +
    reports
      .map(
        (r, i) =>
          `<circle cx="${x(i)}" cy="${y(r.reward)}" r="3" fill="#2364aa"><title>step ${r.step}: ${r.reward.toFixed(3)}</title></circle>`,
      )
      .join("");
}

$<HTMLFormElement>("form").addEventListener("submit", async (event) => {
  event.preventDefault();
  $<HTMLButtonElement>("start").disabled = true;
  const reports: TabStepReport[] = [];
  status("Connecting…");
  try {
    const tasks = (await (await fetch("./tasks.json")).json()) as unknown[];
    await runTrainingTab({
      storeUrl: $<HTMLInputElement>("store").value,
      token: $<HTMLInputElement>("token").value,
      tasks,
      steps: Number($<HTMLInputElement>("steps").value),
      onStep: (r) => {
        reports.push(r);
        drawChart(reports);
        status(
          `step ${r.step}: reward ${r.reward.toFixed(3)}, rows ${r.trainedRows}/${r.rows}, loss ${r.loss.toFixed(4)}, ` +
            `${r.seconds.toFixed(1)} s on ${r.adapter}${r.resourcesId ? `; published ${r.resourcesId}` : "; update skipped"}`,
        );
      },
    });
    status(`Done: ${reports.length} steps. ${$("status").textContent}`);
  } catch (e) {
    status(e instanceof Error ? e.message : String(e), true);
    (window as { tabError?: unknown }).tabError = e;
  } finally {
    $<HTMLButtonElement>("start").disabled = false;
  }
});
