/**
 * A store with something on every dashboard page, written through the real server's HTTP API by
 * LightningStoreClient: two resource versions, rollouts in every state (one retried), workers, a
 * rollout with a traced LLM call, a reward, an annotation and a `<script>` in an attribute, a multi-turn
 * rollout whose model calls a calculator tool (its calls as the policy server records them), a GRPO
 * bookkeeping rollout with `grpo.step` / `grpo.validation` spans and an APO one with `apo.round` /
 * `apo.candidate` spans.
 */
import { LightningStoreClient } from "../../src/client/index.ts";
import { openAiCallAttributes, type JsonObject } from "../../src/tracer/gen-ai.ts";
import { spanFromAttributes, type Attributes, type Span } from "../../src/types/span.ts";

export const XSS = `<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">`;
export const STEPS = 12;
export const VALIDATIONS = 4;
export const APO_ROUNDS = 3;

export interface Seeded {
  busyRollout: string;
  showcase: string;
  toolRollout: string;
  retried: string;
  metricsRollout: string;
  apoRollout: string;
  resourceIds: string[];
  rollouts: number;
}

function span(rolloutId: string, attemptId: string, seq: number, o: Partial<Span> & { name: string; attributes?: Attributes }): Span {
  return spanFromAttributes({
    rollout_id: rolloutId,
    attempt_id: attemptId,
    sequence_id: seq,
    trace_id: "a".repeat(32),
    span_id: o.span_id,
    parent_id: o.parent_id ?? null,
    name: o.name,
    attributes: o.attributes ?? {},
    start_time: o.start_time ?? 0,
    end_time: o.end_time ?? 0,
    status: o.status,
  });
}

export async function seedStore(url: string, token?: string): Promise<Seeded> {
  const store = new LightningStoreClient(url, { token, retryDelays: [] });
  try {
    const v1 = await store.addResources({
      prompt: { resource_type: "prompt_template", template: "Compute {a} + {b}.", engine: "f-string" },
      llm: { resource_type: "llm", endpoint: "http://127.0.0.1:8000/v1", model: "policy-v1", sampling_parameters: { temperature: 1 } },
    });
    const v2 = await store.addResources({
      prompt: { resource_type: "prompt_template", template: "What is {a} plus {b}? Answer with a number.", engine: "f-string" },
      llm: { resource_type: "llm", endpoint: "http://127.0.0.1:8000/v1", model: "policy-v2", sampling_parameters: { temperature: 1 } },
    });

    const v3 = await store.updateResources(v2.resources_id, {
      prompt: { resource_type: "prompt_template", template: "What is {a} plus {b}? Answer with a number only.", engine: "f-string" },
      llm: { resource_type: "llm", endpoint: "http://127.0.0.1:8000/v1", model: "policy-v3", sampling_parameters: { temperature: 0.7 } },
    });

    // 24 rollouts: 16 train, 8 val; workers claim some and finish them.
    const enqueued = await store.enqueueManyRollouts(
      Array.from({ length: 24 }, (_, i) => ({ input: { a: i, b: i + 1 }, mode: i % 3 === 2 ? ("val" as const) : ("train" as const) })),
    );
    const claimed = await store.dequeueManyRollouts({ limit: 10, worker_id: "worker-1" });
    const more = await store.dequeueManyRollouts({ limit: 4, worker_id: "worker-2" });
    for (const [i, r] of claimed.entries()) {
      await store.updateAttempt(r.rollout_id, r.attempt.attempt_id, { status: i % 4 === 3 ? "failed" : "succeeded" });
    }
    await store.updateAttempt(more[0]!.rollout_id, more[0]!.attempt.attempt_id, { status: "running" });
    await store.updateWorker("worker-1", { cpu_percent: 12.5, rollouts_done: 10 });
    await store.updateWorker("worker-2", { cpu_percent: 80, rollouts_done: 0 });

    // The showcase: an agent span, an LLM call with messages and token ids, a reward, an annotation, an error, and hostile text.
    const showcase = await store.startRollout(
      { question: "2 + 3" },
      { mode: "train", resources_id: v2.resources_id, worker_id: "worker-3" },
    );
    const rid = showcase.rollout_id;
    const aid = showcase.attempt.attempt_id;
    const t0 = showcase.start_time;
    await store.addManySpans([
      span(rid, aid, 1, { span_id: "0000000000000001", name: "agent.run", start_time: t0, end_time: t0 + 2 }),
      span(rid, aid, 2, {
        span_id: "0000000000000002",
        parent_id: "0000000000000001",
        name: "openai.chat.completion",
        start_time: t0 + 0.1,
        end_time: t0 + 1.2,
        attributes: {
          "gen_ai.request.model": "policy-v2",
          "gen_ai.response.model": "policy-v2",
          "gen_ai.response.id": "chatcmpl-1",
          "gen_ai.prompt.0.role": "system",
          "gen_ai.prompt.0.content": "You add numbers.",
          "gen_ai.prompt.1.role": "user",
          "gen_ai.prompt.1.content": "What is 2 plus 3?",
          "gen_ai.completion.0.role": "assistant",
          "gen_ai.completion.0.content": "5",
          "gen_ai.usage.prompt_tokens": 17,
          "gen_ai.usage.completion_tokens": 1,
          prompt_token_ids: [11, 12, 13, 14],
          response_token_ids: [53],
        },
      }),
      span(rid, aid, 3, {
        span_id: "0000000000000003",
        parent_id: "0000000000000001",
        name: "tool.check",
        start_time: t0 + 1.3,
        end_time: t0 + 1.5,
        attributes: { "tool.input": XSS },
        status: { status_code: "ERROR", description: "the checker failed" },
      }),
      span(rid, aid, 4, {
        span_id: "0000000000000004",
        parent_id: "0000000000000001",
        name: "agentlightning.annotation",
        start_time: t0 + 1.6,
        end_time: t0 + 1.6,
        attributes: { "agentlightning.tag.0": "arithmetic" },
      }),
      span(rid, aid, 5, {
        span_id: "0000000000000005",
        parent_id: "0000000000000001",
        name: "agentlightning.reward",
        start_time: t0 + 1.8,
        end_time: t0 + 1.8,
        attributes: { "agentlightning.reward.0.name": "correct", "agentlightning.reward.0.value": 1 },
      }),
    ]);
    await store.updateAttempt(rid, aid, { status: "succeeded" });

    const toolRollout = await seedToolRollout(store, v2.resources_id, t0);

    // A rollout whose first attempt failed and was retried.
    const retried = await store.startRollout(
      { question: "retry me" },
      { mode: "val", config: { max_attempts: 2, retry_condition: ["failed"] } },
    );
    await store.updateAttempt(retried.rollout_id, retried.attempt.attempt_id, { status: "failed" });
    const second = await store.startAttempt(retried.rollout_id, { worker_id: "worker-2" });
    await store.updateAttempt(retried.rollout_id, second.attempt.attempt_id, { status: "succeeded" });

    // Training metrics as GRPO writes them, plus spans of another algorithm (APO) matched by a pattern.
    const metrics = await store.startRollout({ algorithm: "grpo", steps: STEPS }, { metadata: { kind: "grpo-metrics" } });
    const mid = metrics.rollout_id;
    const maid = metrics.attempt.attempt_id;
    const spans: Span[] = [];
    let seq = 1;
    for (let step = 1; step <= STEPS; step++) {
      spans.push(
        span(mid, maid, seq++, {
          name: "grpo.step",
          start_time: t0 + step,
          end_time: t0 + step,
          attributes: {
            // As GRPO's report() writes a StepReport (a few of its fields).
            "grpo.kind": "step",
            "grpo.step": step,
            "grpo.version": step,
            "grpo.reward": 0.2 + step * 0.05,
            "grpo.accuracy": 0.1 + step * 0.04,
            "grpo.kl": 0.01 * step,
            "grpo.clip_frac": 0.1,
            "grpo.train_tokens_per_second": 1000 + step,
            "grpo.skipped": false,
          },
        }),
      );
      if (step % 3 === 0)
        spans.push(
          span(mid, maid, seq++, {
            name: "grpo.validation",
            start_time: t0 + step,
            end_time: t0 + step,
            attributes: {
              "grpo.kind": "validation",
              "grpo.step": step,
              "grpo.reward": 0.3 + step * 0.03,
              "grpo.accuracy": 0.2 + step * 0.03,
            },
          }),
        );
    }
    await store.addManySpans(spans);

    // An APO run, started later (so the training page shows it first), as APO records its rounds and candidates.
    const apo = await store.startRollout({ algorithm: "apo", beam_rounds: APO_ROUNDS }, { metadata: { kind: "apo-history" } });
    const apoSpans: Span[] = [];
    for (let round = 1; round <= APO_ROUNDS; round++) {
      for (let c = 0; c < 2; c++)
        apoSpans.push(
          span(apo.rollout_id, apo.attempt.attempt_id, apoSpans.length + 1, {
            name: "apo.candidate",
            start_time: t0 + round,
            end_time: t0 + round,
            attributes: {
              "apo.round": round,
              "apo.version": round * 2 + c,
              "apo.score": round / 4 + c / 10,
              "apo.prompt": `prompt ${round}.${c}`,
            },
          }),
        );
      apoSpans.push(
        span(apo.rollout_id, apo.attempt.attempt_id, apoSpans.length + 1, {
          name: "apo.round",
          start_time: t0 + round,
          end_time: t0 + round,
          attributes: {
            "apo.round": round,
            "apo.leader_score": round / 4,
            "apo.best_score": round / 4 + 0.1,
            "apo.improved": true,
            "apo.beam": [1, 2],
          },
        }),
      );
    }
    await store.addManySpans(apoSpans);

    // A worker busy with a rollout right now.
    const [busy] = await store.dequeueManyRollouts({ limit: 1, worker_id: "worker-4" });
    await store.updateAttempt(busy!.rollout_id, busy!.attempt.attempt_id, { status: "running" });
    await store.updateWorker("worker-4", { cpu_percent: 55 });

    return {
      busyRollout: busy!.rollout_id,
      showcase: rid,
      toolRollout,
      retried: retried.rollout_id,
      metricsRollout: mid,
      apoRollout: apo.rollout_id,
      resourceIds: [v1.resources_id, v3.resources_id],
      rollouts: enqueued.length + 5,
    };
  } finally {
    await store.close();
  }
}

export const TOOL_RESULTS = ["3404", "2887"];
const CALCULATOR = {
  type: "function",
  function: {
    name: "calculator",
    description: "Evaluate an arithmetic expression exactly.",
    parameters: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"] },
  },
};

/**
 * A tool-using agent's rollout: three model calls, the first two answered with a calculator call, each
 * result sent back as a `tool` message, the last one the answer; the spans' attributes are what the
 * policy server records for such calls.
 */
async function seedToolRollout(store: LightningStoreClient, resourcesId: string, t0: number): Promise<string> {
  const r = await store.startRollout(
    { question: "23 boxes of 148 pens, 517 sold. How many left?" },
    { mode: "train", resources_id: resourcesId },
  );
  const messages: JsonObject[] = [
    { role: "system", content: "Use the calculator. End with ### ANSWER: <number> ###" },
    { role: "user", content: "23 boxes of 148 pens, 517 sold. How many left?" },
  ];
  const replies: JsonObject[] = [
    { role: "assistant", content: null, tool_calls: [call("call_1", "23*148")] },
    { role: "assistant", content: null, tool_calls: [call("call_2", "3404-517")] },
    { role: "assistant", content: "### ANSWER: 2887 ###" },
  ];
  const spans: Span[] = [];
  replies.forEach((reply, k) => {
    const request = { model: "policy-v2", messages: structuredClone(messages), tools: [CALCULATOR] };
    const response = {
      id: `chatcmpl-tool-${k}`,
      model: "policy-v2",
      choices: [{ index: 0, message: reply, finish_reason: reply.tool_calls ? "tool_calls" : "stop" }],
      usage: { prompt_tokens: 60 + 30 * k, completion_tokens: 20 },
    };
    spans.push(
      span(r.rollout_id, r.attempt.attempt_id, k + 1, {
        name: "litellm_request",
        start_time: t0 + k,
        end_time: t0 + k + 0.5,
        attributes: openAiCallAttributes({ request, response }),
      }),
    );
    messages.push(reply);
    if (k < TOOL_RESULTS.length) messages.push({ role: "tool", tool_call_id: `call_${k + 1}`, content: TOOL_RESULTS[k] });
  });
  await store.addManySpans(spans);
  await store.updateAttempt(r.rollout_id, r.attempt.attempt_id, { status: "succeeded" });
  return r.rollout_id;
}

function call(id: string, expression: string): JsonObject {
  return { id, type: "function", function: { name: "calculator", arguments: JSON.stringify({ expression }) } };
}
