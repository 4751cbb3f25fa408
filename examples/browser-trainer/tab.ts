/**
 * The algorithm side of GRPO in a browser tab: the store and the runners run elsewhere (runners.ts). Each
 * step enqueues the tasks (each `nSamples` times) under the current resources, waits for the rollouts,
 * turns the policy server's LLM-call spans into triplets, takes one GRPO update on the tab's WebGPU device
 * (batch and advantages in the Wasm core) and publishes the new weights as the next resources version,
 * which the runners' policy server loads before its next generation.
 */
import {
  type FinishedRollout,
  fromPolicyWeights,
  GpuDeviceLostError,
  GpuPolicyTrainer,
  GpuUnavailableError,
  grpoUpdate,
  LightningStoreClient,
  LlmProxyTraceToTriplet,
  type LoraConfig,
  loraWeightsResource,
  type NamedResources,
  policyWeightsResource,
  StoreConnectionError,
  StoreHttpError,
} from "../../src/browser.ts";

export interface TabOptions {
  storeUrl: string;
  token: string;
  tasks: unknown[];
  steps: number;
  /** Rollouts per task (the GRPO group) [4]. */
  nSamples?: number;
  lr?: number;
  maxPromptLength?: number;
  maxResponseLength?: number;
  /** Seconds to wait for one step's rollouts [120]. */
  rolloutTimeoutSeconds?: number;
  onStep?: (report: TabStepReport) => void;
  /** The resource holding the whole model ["policy"]. */
  weightsResource?: string;
  /** Train a LoRA adapter on the frozen model instead, published as `adapterResource` ["policy_adapter"]. */
  lora?: LoraConfig;
  adapterResource?: string;
}

export interface TabStepReport {
  step: number;
  reward: number;
  rows: number;
  trainedRows: number;
  loss: number;
  /** The resources version published after the step (null when the update was skipped). */
  resourcesId: string | null;
  adapter: string;
  seconds: number;
}

/** What the page shows when the loop cannot go on; `kind` picks the message. */
export class TabError extends Error {
  constructor(
    readonly kind: "no-webgpu" | "device-lost" | "token-refused" | "store-unreachable" | "no-weights" | "rollouts-timeout",
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = "TabError";
  }
}

/** Turns the library's typed errors into the page's messages. */
export function explain(e: unknown): TabError {
  if (e instanceof TabError) return e;
  if (e instanceof GpuUnavailableError)
    return new TabError(
      "no-webgpu",
      `This browser offers no WebGPU adapter: ${e.message.split(". ")[0]}. Use a recent Chrome or Edge (or Chromium with --enable-unsafe-webgpu).`,
      { cause: e },
    );
  if (e instanceof GpuDeviceLostError)
    return new TabError(
      "device-lost",
      `The GPU adapter was lost (${e.reason}). The last published weights are intact in the store: reload the page to resume from them.`,
      { cause: e },
    );
  if (e instanceof StoreHttpError && (e.status === 401 || e.status === 403))
    return new TabError(
      "token-refused",
      `The store server refused the token (HTTP ${e.status}). Check the token the server was started with.`,
      { cause: e },
    );
  if (e instanceof StoreConnectionError)
    return new TabError(
      "store-unreachable",
      `Cannot reach the store server: ${e.message}. Is it running, and does it allow this page's origin (--cors-origin)?`,
      { cause: e },
    );
  return new TabError("rollouts-timeout", e instanceof Error ? e.message : String(e), { cause: e });
}

const FINISHED = new Set(["succeeded", "failed", "cancelled"]);

async function waitAll(client: LightningStoreClient, ids: string[], timeoutSeconds: number): Promise<void> {
  const deadline = performance.now() + timeoutSeconds * 1000;
  const pending = new Set(ids);
  while (pending.size > 0) {
    const left = (deadline - performance.now()) / 1000;
    if (left <= 0)
      throw new TabError("rollouts-timeout", `${pending.size} rollouts did not finish within ${timeoutSeconds} s: are the runners up?`);
    for (const r of await client.waitForRollouts({ rollout_ids: [...pending], timeout: Math.min(left, 5) }))
      if (FINISHED.has(r.status)) pending.delete(r.rollout_id);
  }
}

/** Runs the loop; resolves with every step's report, or rejects with a TabError. */
export async function runTrainingTab(o: TabOptions): Promise<TabStepReport[]> {
  const client = new LightningStoreClient(o.storeUrl, { token: o.token, retryDelays: [], healthRetryDelays: [] });
  const weightsName = o.weightsResource ?? "policy";
  let trainer: GpuPolicyTrainer | null = null;
  const reports: TabStepReport[] = [];
  try {
    const latest = await client.getLatestResources();
    const weights = latest?.resources[weightsName];
    if (!latest || weights?.resource_type !== "model_weights")
      throw new TabError(
        "no-weights",
        `The store's latest resources hold no model_weights named "${weightsName}": start the runners' side first.`,
      );
    let resources: NamedResources = latest.resources;
    let resourcesId = latest.resources_id;
    const initial = fromPolicyWeights(weights);
    const adapterName = o.adapterResource ?? "policy_adapter";
    trainer = await GpuPolicyTrainer.create({
      config: initial.config,
      ...(o.lora ? { lora: { config: o.lora, base: initial.params } } : { params: initial.params }),
      lr: o.lr ?? 1e-2,
      weightDecay: 0,
    });
    const report = trainer.ctx.handle?.report;
    const adapter = report ? `${report.vendor} ${report.architecture}${report.software ? " (software)" : ""}` : "unknown";
    const adapt = new LlmProxyTraceToTriplet();
    const first = (o.lora ? latest.resources[adapterName] : weights) as { step?: number } | undefined;
    const start = first?.step ?? initial.step;
    for (let step = start + 1; step <= start + o.steps; step++) {
      const t0 = performance.now();
      const requests = o.tasks.flatMap((input, i) =>
        Array.from({ length: o.nSamples ?? 4 }, () => ({
          input,
          mode: "train" as const,
          resources_id: resourcesId,
          metadata: { data_id: `s${step}-${i}` },
        })),
      );
      const enqueued = await client.enqueueManyRollouts(requests);
      await waitAll(
        client,
        enqueued.map((r) => r.rollout_id),
        o.rolloutTimeoutSeconds ?? 120,
      );
      const finished: FinishedRollout[] = [];
      for (const [k, r] of enqueued.entries()) {
        const spans = (await client.querySpans(r.rollout_id, { attempt_id: "latest" })).items;
        finished.push({
          rollout_id: r.rollout_id,
          data_id: requests[k].metadata.data_id,
          triplets: spans.length > 0 ? adapt.adapt(spans) : [],
        });
      }
      const rewards = finished.map((f) => f.triplets.at(-1)?.reward ?? 0);
      const u = await grpoUpdate(trainer, finished, {
        maxPromptLength: o.maxPromptLength ?? 16,
        maxResponseLength: o.maxResponseLength ?? 8,
      });
      let published: string | null = null;
      if (u.changed) {
        // Read back whole before publishing: a device lost here publishes nothing, the last version stays.
        const { params } = await trainer.getState();
        resources = o.lora
          ? { ...resources, [adapterName]: loraWeightsResource(initial.config, { config: o.lora, params }, step) }
          : { ...resources, [weightsName]: policyWeightsResource(initial.config, params, step) };
        published = (await client.addResources(resources)).resources_id;
        resourcesId = published;
      }
      const r: TabStepReport = {
        step,
        reward: rewards.reduce((a, b) => a + b, 0) / Math.max(1, rewards.length),
        rows: u.rows,
        trainedRows: u.trainedRows,
        loss: u.metrics?.loss ?? 0,
        resourcesId: published,
        adapter,
        seconds: (performance.now() - t0) / 1000,
      };
      reports.push(r);
      o.onStep?.(r);
    }
    return reports;
  } catch (e) {
    throw explain(e);
  } finally {
    trainer?.destroy();
    await client.close();
  }
}
