/**
 * APO, automatic prompt optimisation (docs/training.md#apo): a beam search over one PromptTemplate
 * resource. Each round, parents are drawn from the beam; for each parent and branch the parent runs on
 * a fresh train batch, a critic model writes a "textual gradient" (a critique) from those rollouts and
 * an editor model applies it, giving a child template. The old beam and the children are scored on one
 * shared validation batch, the best `beamWidth` survive, and the leader is scored on the whole
 * validation set; the best prompt seen so far only changes on a strict improvement.
 *
 * Unlike Agent Lightning v0.3, the best prompt is written back to the store at the end (the initial
 * resources with the optimised template in place of the seed), and every candidate and round is
 * recorded as spans under an `apo` bookkeeping rollout.
 */
import { TraceToMessages } from "../adapter/messages.ts";
import { findFinalReward } from "../adapter/reward.ts";
import { Rng } from "../model/init.ts";
import { getLogger } from "../platform/log.ts";
import { RuntimeError } from "../runner/errors.ts";
import { ValidationError } from "../types/errors.ts";
import { UnsupportedTemplateEngineError } from "../types/prompt-template.ts";
import type { NamedResourcesInput, PromptTemplate } from "../types/resources.ts";
import type { RolloutMode } from "../types/enums.ts";
import type { Rollout, RolloutConfigInput } from "../types/rollout.ts";
import type { Attributes, Span } from "../types/span.ts";
import { completionText, type ChatCompletionsClient } from "./apo-client.ts";
import { CRITIQUE_PROMPTS, EDIT_PROMPTS, type ApoExperiment, type ChatMessage } from "./apo-prompts.ts";
import { Algorithm, batchIterOverDataset, withLlmProxy, type AdapterLike, type Dataset } from "./base.ts";
import { BookkeepingRollout } from "./bookkeeping.ts";

const log = getLogger("agentlightning.algorithm.apo");

export interface ApoOptions {
  /** Model that writes the critiques ["gpt-5-mini"]. */
  gradientModel?: string;
  /** Model that applies a critique to a template ["gpt-4.1-mini"]. */
  applyEditModel?: string;
  /** Sampling temperature of both models [1.0]. */
  diversityTemperature?: number;
  /** Train tasks per gradient batch, and rollouts shown to the critic [4]. */
  gradientBatchSize?: number;
  /** Validation tasks per candidate-scoring batch [16]. */
  valBatchSize?: number;
  /** Prompts kept per round, and parents drawn per round [4]. */
  beamWidth?: number;
  /** Children per parent [4]. */
  branchFactor?: number;
  /** Rounds of the search [3]. */
  beamRounds?: number;
  /** Seconds to wait for one batch of rollouts; afterwards the finished ones are used [3600]. */
  rolloutBatchTimeout?: number;
  /** Score the seed on the whole validation set before the first round [true]. */
  runInitialValidation?: boolean;
  /** Seed of every random choice (parents, batches, prompt variants, critique samples) [0]. */
  seed?: number;
  /** Source of uniform numbers in [0, 1) instead of the seeded generator. */
  random?: () => number;
  /** Seconds between checks of a batch of rollouts [2]. */
  pollInterval?: number;
  /** Waits `seconds` between checks [a timer]. */
  sleep?: (seconds: number) => Promise<void>;
  /** The clock the batch timeout is measured on, in seconds [performance.now()/1000]. */
  now?: () => number;
  /** Config of every rollout APO enqueues (timeouts, retries) [none]. */
  rolloutConfig?: RolloutConfigInput | null;
}

export interface VersionedPromptTemplate {
  /** `v0` (the seed), `v1`, ... in creation order; also the resources id it is evaluated under. */
  version: string;
  promptTemplate: PromptTemplate;
  /** Its latest score (mean reward of a batch); null before it is scored. */
  score: number | null;
}

/** One rollout of a prompt as APO reads it (JSON-serialisable). */
export interface RolloutResultForApo extends ApoExperiment {
  rollout_id: string;
  spans: Span[];
}

/** How a candidate came about: the seed, an applied edit, or its parent's text kept because the critic said nothing. */
export type CandidateOrigin = "seed" | "edited" | "critique_empty";

/** One candidate of the search, as recorded in the `apo.candidate` spans. */
export interface ApoCandidate {
  version: string;
  template: string;
  engine: PromptTemplate["engine"];
  /** 0 for the seed, otherwise the round that created it (1-based). */
  round: number;
  parentVersion: string | null;
  origin: CandidateOrigin;
  /** The train tasks its parent ran on, whose rollouts the critic read (empty for the seed). */
  batch: unknown[];
  /** The parent's mean reward on that batch. */
  batchScore: number | null;
  critique: string | null;
  /** Score on the round's validation batch (the seed: on the whole validation set, when run). */
  score: number | null;
}

/** One round, as recorded in the `apo.round` spans. */
export interface ApoRound {
  round: number;
  beam: { version: string; score: number | null }[];
  leaderVersion: string;
  /** The leader's score on the whole validation set. */
  leaderScore: number;
  bestVersion: string;
  bestScore: number;
  improved: boolean;
  /** Children skipped because the editor answered nothing. */
  skipped: number;
  /** Rollouts enqueued so far. */
  rollouts: number;
}

/** A call to the critic or editor model failed (endpoint down, bad key, unknown model...). */
export class ApoModelError extends RuntimeError {
  override readonly errorType: string = "ApoModelError";
}

type ResolvedApoOptions = Required<Omit<ApoOptions, "random" | "sleep" | "now" | "rolloutConfig" | "seed">>;

const POSITIVE_INTEGERS = ["gradientBatchSize", "valBatchSize", "beamWidth", "branchFactor", "beamRounds"] as const;
const RENDERABLE = new Set(["f-string", "jinja"]);

/** `k` distinct items drawn uniformly (a partial Fisher-Yates shuffle), as Python's random.sample. */
function sample<T>(items: readonly T[], k: number, random: () => number): T[] {
  const pool = [...items];
  for (let i = 0; i < k; i++) {
    const j = i + Math.floor(random() * (pool.length - i));
    [pool[i], pool[j]] = [pool[j]!, pool[i]!];
  }
  return pool.slice(0, k);
}

const mean = (xs: readonly (number | null)[]): number => xs.reduce<number>((a, x) => a + (x ?? 0), 0) / Math.max(1, xs.length);
const toList = <T>(d: Dataset<T>): T[] => Array.from({ length: d.length }, (_, i) => d[i]!);

export class APO<T = unknown> extends Algorithm {
  readonly options: ResolvedApoOptions;
  /** Every candidate in creation order (the `apo.candidate` spans carry the same). */
  readonly candidates: ApoCandidate[] = [];
  readonly rounds: ApoRound[] = [];
  /** Rollouts enqueued so far. */
  rolloutCount = 0;
  /** The resources id the best prompt was written back under (after `run`). */
  bestResourcesId: string | null = null;

  private readonly random: () => number;
  private readonly sleep: (seconds: number) => Promise<void>;
  private readonly now: () => number;
  private readonly rolloutConfig: RolloutConfigInput | null;
  private versionCounter = 0;
  private bestPrompt: VersionedPromptTemplate | null = null;
  private bestScore = Number.NEGATIVE_INFINITY;
  private history: BookkeepingRollout | null = null;

  constructor(
    readonly client: ChatCompletionsClient,
    options: ApoOptions = {},
  ) {
    super();
    if (typeof client?.chat?.completions?.create !== "function")
      throw new ValidationError("APO needs a client with chat.completions.create (e.g. an openai client)", ["client"]);
    this.options = {
      gradientModel: options.gradientModel ?? "gpt-5-mini",
      applyEditModel: options.applyEditModel ?? "gpt-4.1-mini",
      diversityTemperature: options.diversityTemperature ?? 1.0,
      gradientBatchSize: options.gradientBatchSize ?? 4,
      valBatchSize: options.valBatchSize ?? 16,
      beamWidth: options.beamWidth ?? 4,
      branchFactor: options.branchFactor ?? 4,
      beamRounds: options.beamRounds ?? 3,
      rolloutBatchTimeout: options.rolloutBatchTimeout ?? 3600,
      runInitialValidation: options.runInitialValidation ?? true,
      pollInterval: options.pollInterval ?? 2.0,
    };
    for (const k of POSITIVE_INTEGERS) {
      const v = this.options[k];
      if (!(Number.isInteger(v) && v >= 1)) throw new ValidationError(`${k} must be a positive integer, got ${v}`, [k]);
    }
    for (const k of ["rolloutBatchTimeout", "pollInterval", "diversityTemperature"] as const) {
      const v = this.options[k];
      if (!(typeof v === "number" && v >= 0)) throw new ValidationError(`${k} must be a non-negative number, got ${v}`, [k]);
    }
    const rng = new Rng(options.seed ?? 0);
    this.random = options.random ?? (() => rng.uniform());
    this.sleep = options.sleep ?? ((s) => new Promise((r) => setTimeout(r, s * 1000)));
    this.now = options.now ?? (() => performance.now() / 1000);
    this.rolloutConfig = options.rolloutConfig ?? null;
  }

  /** The first PromptTemplate of the initial resources, with its name. */
  getSeedPromptTemplate(): [string, PromptTemplate] {
    const resources = this.getInitialResources();
    if (resources === null) throw new ValidationError("APO needs initial resources holding a PromptTemplate", ["initial_resources"]);
    for (const [name, r] of Object.entries(resources)) if (r.resource_type === "prompt_template") return [name, r as PromptTemplate];
    throw new ValidationError("the initial resources hold no PromptTemplate for APO to optimise", ["initial_resources"]);
  }

  /** The adapter, which must be a TraceToMessages (the critic reads conversations). */
  override getAdapter(): TraceToMessages & AdapterLike {
    const adapter = super.getAdapter();
    if (!(adapter instanceof TraceToMessages))
      throw new ValidationError(`APO needs a TraceToMessages adapter, got ${adapter?.constructor?.name ?? typeof adapter}`, ["adapter"]);
    return adapter;
  }

  /** The best prompt found so far. */
  getBestPrompt(): PromptTemplate {
    if (this.bestPrompt === null) throw new ValidationError("No best prompt found", ["best_prompt"]);
    return this.bestPrompt.promptTemplate;
  }

  /** The best prompt's score on the whole validation set (-Infinity when never scored). */
  getBestScore(): number {
    return this.bestScore;
  }

  async run(trainDataset?: Dataset<T> | null, valDataset?: Dataset<T> | null): Promise<void> {
    await withLlmProxy(this, () => this.search(trainDataset ?? null, valDataset ?? null));
  }

  private async search(train: Dataset<T> | null, val: Dataset<T> | null): Promise<void> {
    const [resourceName, seed] = this.getSeedPromptTemplate();
    if (!train || train.length === 0) throw new ValidationError("APO needs a non-empty train dataset", ["train_dataset"]);
    if (!val || val.length === 0) throw new ValidationError("APO needs a non-empty validation dataset", ["val_dataset"]);
    if (!RENDERABLE.has(seed.engine)) throw new UnsupportedTemplateEngineError(seed.engine);
    this.getAdapter();
    const o = this.options;
    const store = this.getStore();
    this.history = await BookkeepingRollout.start(
      store,
      {
        algorithm: "apo",
        resource_name: resourceName,
        beam_width: o.beamWidth,
        branch_factor: o.branchFactor,
        beam_rounds: o.beamRounds,
        gradient_batch_size: o.gradientBatchSize,
        val_batch_size: o.valBatchSize,
      },
      "apo-history",
    );
    await this.history.around(async () => {
      const gradBatches = batchIterOverDataset(train, o.gradientBatchSize, this.random);
      const valBatches = batchIterOverDataset(val, o.valBatchSize, this.random);
      const valAll = toList(val);
      const seedVersion = this.versioned(seed);
      this.bestPrompt = seedVersion;
      this.bestScore = Number.NEGATIVE_INFINITY;
      let beam = [seedVersion];
      let seedScore: number | null = null;
      if (o.runInitialValidation) {
        seedScore = (await this.evaluate(seedVersion, resourceName, valAll, "val")).score;
        this.bestScore = seedScore;
        log.info(`APO: seed ${seedVersion.version} scores ${seedScore.toFixed(3)} on the whole validation set`);
      }
      await this.recordCandidate({ ...this.candidateOf(seedVersion, 0, null, "seed", [], null, null), score: seedScore });

      for (let round = 1; round <= o.beamRounds; round++) {
        const parents = this.sampleParents(beam);
        const { children, skipped } = await this.generateChildren(parents, gradBatches, resourceName, round);
        beam = await this.selectBeam([...beam, ...children.map((c) => c.prompt)], valBatches.next().value as T[], resourceName);
        for (const c of children) await this.recordCandidate({ ...c.candidate, score: c.prompt.score });
        const leader = beam[0]!;
        const leaderScore = (await this.evaluate(leader, resourceName, valAll, "val")).score;
        const improved = leaderScore > this.bestScore;
        if (improved) {
          this.bestPrompt = leader;
          this.bestScore = leaderScore;
          log.info(`APO round ${round}: new best ${leader.version} with ${leaderScore.toFixed(3)} on the whole validation set`);
        } else
          log.warn(
            `APO round ${round}: leader ${leader.version} scores ${leaderScore.toFixed(3)}, not above the best ${this.bestScore.toFixed(3)}; keeping ${this.bestPrompt.version}`,
          );
        await this.recordRound({
          round,
          beam: beam.map((p) => ({ version: p.version, score: p.score })),
          leaderVersion: leader.version,
          leaderScore,
          bestVersion: this.bestPrompt.version,
          bestScore: this.bestScore,
          improved,
          skipped,
          rollouts: this.rolloutCount,
        });
      }
      await this.writeBack(resourceName);
    });
  }

  private versioned(promptTemplate: PromptTemplate): VersionedPromptTemplate {
    return { version: `v${this.versionCounter++}`, promptTemplate, score: null };
  }

  private candidateOf(
    p: VersionedPromptTemplate,
    round: number,
    parent: string | null,
    origin: CandidateOrigin,
    batch: unknown[],
    batchScore: number | null,
    critique: string | null,
  ): ApoCandidate {
    const { template, engine } = p.promptTemplate;
    return { version: p.version, template, engine, round, parentVersion: parent, origin, batch, batchScore, critique, score: null };
  }

  /** `beamWidth` parents: the beam repeated in order while it is smaller, else a random draw without replacement. */
  private sampleParents(beam: VersionedPromptTemplate[]): VersionedPromptTemplate[] {
    const w = this.options.beamWidth;
    if (beam.length < w) return Array.from({ length: w }, (_, i) => beam[i % beam.length]!);
    return sample(beam, w, this.random);
  }

  /**
   * For each parent and branch: a new train batch, the parent's rollouts on it, then critique and edit.
   * The rollouts of all branches run at once; the model calls follow in parent and branch order, so
   * the random choices do not depend on which rollouts finish first.
   */
  private async generateChildren(
    parents: VersionedPromptTemplate[],
    gradBatches: Generator<T[]>,
    resourceName: string,
    round: number,
  ): Promise<{ children: { prompt: VersionedPromptTemplate; candidate: ApoCandidate }[]; skipped: number }> {
    const jobs = parents.flatMap((parent) =>
      Array.from({ length: this.options.branchFactor }, () => ({ parent, batch: gradBatches.next().value as T[] })),
    );
    const evaluations = await Promise.all(jobs.map((j) => this.evaluate(j.parent, resourceName, j.batch, "train")));
    const children: { prompt: VersionedPromptTemplate; candidate: ApoCandidate }[] = [];
    let skipped = 0;
    for (const [k, { parent, batch }] of jobs.entries()) {
      const { results, score } = evaluations[k]!;
      const { text, critique } = await this.critiqueAndEdit(parent, results);
      if (!text) {
        skipped++;
        log.error(`APO round ${round}: the editor returned nothing for parent ${parent.version}; no child from this branch`);
        await this.history?.record("apo.skipped", {
          "apo.round": round,
          "apo.parent_version": parent.version,
          "apo.critique": critique ?? "",
          "apo.reason": "edit_empty",
        });
        continue;
      }
      const prompt = this.versioned({ resource_type: "prompt_template", template: text, engine: parent.promptTemplate.engine });
      const origin: CandidateOrigin = critique ? "edited" : "critique_empty";
      children.push({ prompt, candidate: this.candidateOf(prompt, round, parent.version, origin, batch, score, critique) });
    }
    return { children, skipped };
  }

  /**
   * The critique of `parent` from its rollouts and the edited template. An empty critique keeps the
   * parent's text (as upstream); an empty edit gives null.
   */
  private async critiqueAndEdit(
    parent: VersionedPromptTemplate,
    results: RolloutResultForApo[],
  ): Promise<{ text: string | null; critique: string | null }> {
    const o = this.options;
    const template = parent.promptTemplate.template;
    const critiquePrompt = CRITIQUE_PROMPTS[Math.floor(this.random() * CRITIQUE_PROMPTS.length)]!;
    if (results.length < o.gradientBatchSize)
      log.warn(
        `APO: only ${results.length} finished rollouts for a critique of ${parent.version} (gradientBatchSize ${o.gradientBatchSize})`,
      );
    const shown = results.length < o.gradientBatchSize ? results : sample(results, o.gradientBatchSize, this.random);
    const experiments: ApoExperiment[] = shown.map((r) => ({
      status: r.status,
      final_reward: r.final_reward,
      spans: r.spans,
      messages: r.messages,
    }));
    const critique = await this.chat(o.gradientModel, critiquePrompt(template, experiments), "critique");
    if (!critique?.trim()) {
      log.error(`APO: the critic returned no critique for ${parent.version}; keeping its text`);
      return { text: template, critique: null };
    }
    const editPrompt = EDIT_PROMPTS[Math.floor(this.random() * EDIT_PROMPTS.length)]!;
    const edited = await this.chat(o.applyEditModel, editPrompt(template, critique), "edit");
    return { text: edited?.trim() ? edited.trim() : null, critique };
  }

  private async chat(model: string, messages: ChatMessage[], what: "critique" | "edit"): Promise<string | null> {
    let response: unknown;
    try {
      response = await this.client.chat.completions.create({ model, messages, temperature: this.options.diversityTemperature });
    } catch (e) {
      throw new ApoModelError(`APO: the ${what} call to model '${model}' failed: ${(e as Error)?.message ?? String(e)}`, { cause: e });
    }
    return completionText(response);
  }

  /** Scores every candidate on one shared validation batch and keeps the best `beamWidth` (a stable sort: ties keep their order). */
  private async selectBeam(candidates: VersionedPromptTemplate[], valBatch: T[], resourceName: string): Promise<VersionedPromptTemplate[]> {
    const scores = await Promise.all(candidates.map((c) => this.evaluate(c, resourceName, valBatch, "val")));
    candidates.forEach((c, i) => {
      c.score = scores[i]!.score;
    });
    const kept = [...candidates].sort((a, b) => (b.score ?? 0) - (a.score ?? 0)).slice(0, this.options.beamWidth);
    if (kept.length === 0) throw new RuntimeError("No beam candidates any more");
    return kept;
  }

  /** The initial resources with `template` in place of the seed. */
  private resourcesWith(resourceName: string, template: PromptTemplate): NamedResourcesInput {
    return { ...(this.getInitialResources() ?? {}), [resourceName]: template };
  }

  /**
   * Runs `tasks` under `prompt` (resources id = its version) and waits for them, up to
   * `rolloutBatchTimeout`; the score is the mean final reward of the finished ones (0 for none).
   */
  async evaluate(
    prompt: VersionedPromptTemplate,
    resourceName: string,
    tasks: readonly T[],
    mode: RolloutMode,
  ): Promise<{ results: RolloutResultForApo[]; score: number }> {
    const store = this.getStore();
    await store.updateResources(prompt.version, this.resourcesWith(resourceName, prompt.promptTemplate));
    const enqueued = await store.enqueueManyRollouts(
      tasks.map((input) => ({ input, mode, resources_id: prompt.version, ...(this.rolloutConfig ? { config: this.rolloutConfig } : {}) })),
    );
    this.rolloutCount += enqueued.length;
    const ids = enqueued.map((r) => r.rollout_id);
    const deadline = this.now() + this.options.rolloutBatchTimeout;
    let finished: Rollout[];
    for (;;) {
      finished = await store.waitForRollouts({ rollout_ids: ids, timeout: 0 });
      if (finished.length >= ids.length) break;
      if (this.now() > deadline) {
        log.warn(
          `APO: ${ids.length - finished.length} of ${ids.length} rollouts of ${prompt.version} did not finish within ${this.options.rolloutBatchTimeout} s; using the finished ones`,
        );
        break;
      }
      await this.sleep(this.options.pollInterval);
    }
    const byId = new Map(finished.map((r) => [r.rollout_id, r]));
    const results = await this.rolloutResults(ids.flatMap((id) => (byId.has(id) ? [byId.get(id)!] : [])));
    return { results, score: mean(results.map((r) => r.final_reward)) };
  }

  /** Spans of every attempt, the adapter's conversations and the final reward of each rollout. */
  private async rolloutResults(rollouts: Rollout[]): Promise<RolloutResultForApo[]> {
    const store = this.getStore();
    const adapter = this.getAdapter();
    return Promise.all(
      rollouts.map(async (r) => {
        const spans = (await store.querySpans(r.rollout_id)).items;
        return { rollout_id: r.rollout_id, status: r.status, final_reward: findFinalReward(spans), spans, messages: adapter.adapt(spans) };
      }),
    );
  }

  /** The initial resources with the best template, as a new resources version (it becomes the latest). */
  private async writeBack(resourceName: string): Promise<void> {
    const best = this.bestPrompt!;
    const update = await this.getStore().addResources(this.resourcesWith(resourceName, best.promptTemplate));
    this.bestResourcesId = update.resources_id;
    log.info(`APO: best prompt ${best.version} (score ${this.bestScore.toFixed(3)}) written back as resources ${update.resources_id}`);
    await this.history?.record("apo.best", {
      "apo.version": best.version,
      "apo.prompt": best.promptTemplate.template,
      "apo.engine": best.promptTemplate.engine,
      "apo.resources_id": update.resources_id,
      "apo.resource_name": resourceName,
      ...(Number.isFinite(this.bestScore) ? { "apo.score": this.bestScore } : {}),
    });
  }

  private async recordCandidate(c: ApoCandidate): Promise<void> {
    this.candidates.push(c);
    const attributes: Attributes = {
      "apo.version": c.version,
      "apo.prompt": c.template,
      "apo.engine": c.engine,
      "apo.round": c.round,
      "apo.origin": c.origin,
      "apo.batch": JSON.stringify(c.batch),
      "apo.batch_size": c.batch.length,
    };
    if (c.parentVersion !== null) attributes["apo.parent_version"] = c.parentVersion;
    if (c.batchScore !== null) attributes["apo.batch_score"] = c.batchScore;
    if (c.critique !== null) attributes["apo.critique"] = c.critique;
    if (c.score !== null) attributes["apo.score"] = c.score;
    await this.history?.record("apo.candidate", attributes);
  }

  private async recordRound(r: ApoRound): Promise<void> {
    this.rounds.push(r);
    await this.history?.record("apo.round", {
      "apo.round": r.round,
      "apo.beam": r.beam.map((b) => b.version),
      "apo.beam_scores": r.beam.map((b) => b.score ?? 0),
      "apo.leader_version": r.leaderVersion,
      "apo.leader_score": r.leaderScore,
      "apo.best_version": r.bestVersion,
      "apo.improved": r.improved,
      "apo.skipped": r.skipped,
      "apo.rollouts": r.rollouts,
      ...(Number.isFinite(r.bestScore) ? { "apo.best_score": r.bestScore } : {}),
    });
  }
}
