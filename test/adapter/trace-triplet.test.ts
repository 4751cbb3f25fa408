import { describe, expect, it } from "vitest";
import { buildTree, getRewardValue, TraceTripletAdapter, agentName } from "../../src/adapter/index.ts";
import { referenceKernels } from "../../src/wasm/index.ts";
import { ValidationError } from "../../src/types/errors.ts";
import { llm, reward, sp, LLM } from "./spans.ts";

const ids = (ts: { metadata: Record<string, unknown> }[]) => ts.map((t) => t.metadata.response_id);
const rewards = (ts: { reward: number | null }[]) => ts.map((t) => t.reward);

describe("trace tree (docs/adapters.md#tracetripletadapter)", () => {
  it("rejects an empty span list", () => {
    expect(() => buildTree([])).toThrow(ValidationError);
  });
  it("adds a virtual node per missing parent (times from its children) and a virtual root ending at the last root's end", () => {
    const tree = buildTree([
      sp({ id: "a", start: 0, end: 5 }),
      sp({ id: "b", parent: "gone", start: 2, end: 3 }),
      sp({ id: "c", parent: "gone", start: 1, end: 9 }),
      sp({ id: "d", start: 4, end: 6 }),
    ]);
    expect(tree.ids).toEqual(["a", "b", "c", "d", "gone", "virtual-root"]);
    const virt = tree.spans[4];
    expect([virt.name, virt.start_time, virt.end_time, virt.rollout_id]).toEqual(["agentlightning.virtual", 1, 9, "ro-1"]);
    expect(Array.from(tree.parent)).toEqual([5, 4, 4, 5, 5, -1]);
    expect(tree.spans[5].end_time).toBe(9); // last root ("gone") ends at 9
    expect(tree.spans[5].start_time).toBe(0);
  });
});

describe("TraceTripletAdapter (docs/adapters.md#tracetripletadapter)", () => {
  const kernels = [undefined, referenceKernels] as const;
  for (const k of kernels) {
    const name = k ? "reference kernels" : "wasm kernels";
    const make = (o: ConstructorParameters<typeof TraceTripletAdapter>[0] = {}) => new TraceTripletAdapter({ ...o, kernels: k });

    describe(name, () => {
      it("repairs the hierarchy: a root child inside another span's interval moves under the tightest one", () => {
        // two roots: session (0-10) and a stray LLM call (2-3) whose real parent was lost; agent span 1-4
        const spans = [
          sp({ id: "s", start: 0, end: 10 }),
          sp({ id: "agent", parent: "s", start: 1, end: 4, attrs: { "agent.name": "writer" } }),
          llm("x", null, 2, 3, { "gen_ai.response.id": "r1" }),
        ];
        const repaired = make().adapt(spans);
        expect(repaired.map((t) => t.metadata.agent_name)).toEqual(["writer"]);
        const unrepaired = make({ repairHierarchy: false }).adapt(spans);
        expect(unrepaired.map((t) => t.metadata.agent_name)).toEqual(["*"]);
        // with an agent filter, only the repaired trace puts the call inside the agent
        expect(make({ agentMatch: "writ" }).adapt(spans)).toHaveLength(1);
        expect(make({ agentMatch: "writ", repairHierarchy: false }).adapt(spans)).toHaveLength(0);
      });

      it("repair descends through a single-child wrapper root, and does not repair deeper levels", () => {
        const wrapped = [
          sp({ id: "wrapper", start: 0, end: 20 }),
          sp({ id: "session", parent: "wrapper", start: 0, end: 10 }),
          sp({ id: "agent", parent: "session", start: 1, end: 4, attrs: { "agent.name": "writer" } }),
          llm("x", "session", 2, 3),
        ];
        expect(
          make()
            .adapt(wrapped)
            .map((t) => t.metadata.agent_name),
        ).toEqual(["writer"]);
        const deeper = [
          sp({ id: "root", start: 0, end: 20 }),
          sp({ id: "other", parent: "root", start: 15, end: 16 }),
          sp({ id: "session", parent: "root", start: 0, end: 10 }),
          sp({ id: "agent", parent: "session", start: 1, end: 4, attrs: { "agent.name": "writer" } }),
          llm("x", "session", 2, 3), // mis-nested one level below the root's children: left alone
        ];
        expect(
          make()
            .adapt(deeper)
            .map((t) => t.metadata.agent_name),
        ).toEqual(["*"]);
      });

      it("an identical interval never qualifies as a parent (zero slack)", () => {
        const spans = [sp({ id: "a", start: 0, end: 5, attrs: { "agent.name": "twin" } }), llm("x", null, 0, 5)];
        expect(
          make()
            .adapt(spans)
            .map((t) => t.metadata.agent_name),
        ).toEqual(["*"]);
      });

      it("nested LLM calls: a call without response id inside a call is dropped unless dedup is off; equal response ids always dedup", () => {
        const spans = [
          sp({ id: "root", start: 0, end: 10 }),
          llm("outer", "root", 1, 5, { "gen_ai.response.id": "A" }),
          llm("inner", "outer", 2, 3),
          llm("again", "root", 6, 7, { "gen_ai.response.id": "A" }),
          llm("other", "root", 8, 9, { "gen_ai.response.id": "B" }),
        ];
        expect(ids(make().adapt(spans))).toEqual(["A", "B"]);
        expect(ids(make({ dedupLlmCall: false }).adapt(spans))).toEqual(["A", null, "B"]);
      });

      it("matches LLM calls by name pattern (regex search) and labels them with the nearest agent", () => {
        const spans = [
          sp({ id: "root", start: 0, end: 10 }),
          sp({ id: "ag", parent: "root", start: 1, end: 9, attrs: { "agentops.span.kind": "agent", "operation.name": "planner" } }),
          sp({ id: "c1", parent: "ag", name: "litellm.completion", start: 2, end: 3 }),
          sp({ id: "c2", parent: "root", name: "openai.chat.completion.create", start: 9.5, end: 9.8 }),
        ];
        const out = make({ llmCallMatch: "completion" }).adapt(spans);
        expect(out.map((t) => t.metadata.agent_name)).toEqual(["planner", "*"]);
        expect(make({ llmCallMatch: /^litellm/ }).adapt(spans)).toHaveLength(1);
      });

      it("excludes LLM calls inside a reward subtree unless told not to", () => {
        const spans = [
          sp({ id: "root", start: 0, end: 10 }),
          llm("a", "root", 1, 2, { "gen_ai.response.id": "a" }),
          sp({
            id: "judge",
            parent: "root",
            name: "agentlightning.operation",
            start: 3,
            end: 6,
            attrs: { "agentlightning.operation.name": "agentlightning.reward" },
          }),
          llm("j", "judge", 4, 5, { "gen_ai.response.id": "j" }),
        ];
        expect(ids(make().adapt(spans))).toEqual(["a"]);
        expect(ids(make({ excludeLlmCallInReward: false }).adapt(spans))).toEqual(["a", "j"]);
      });

      it("first_occurrence: the worked example (R1 -> L2, R2 -> L1), and a reward before a call ends skips it", () => {
        const spans = [
          sp({ id: "root", start: 0, end: 10 }),
          llm("L1", "root", 1, 2, { "gen_ai.response.id": "L1" }),
          llm("L2", "root", 3, 4, { "gen_ai.response.id": "L2" }),
          reward("R1", "root", 5, 0.5),
          reward("R2", "root", 6, 0.9),
        ];
        expect(rewards(make().adapt(spans))).toEqual([0.9, 0.5]);
        const early = [...spans.slice(0, 3), reward("R1", "root", 3.5, 0.5)];
        expect(rewards(make().adapt(early))).toEqual([0.5, null]);
      });

      it("first_sibling: only siblings, in child order; 0 is a real reward", () => {
        const spans = [
          sp({ id: "root", start: 0, end: 20 }),
          sp({ id: "t1", parent: "root", start: 0, end: 9 }),
          llm("L1", "t1", 1, 2, { "gen_ai.response.id": "L1" }),
          reward("R1", "t1", 3, 0),
          sp({ id: "t2", parent: "root", start: 10, end: 19 }),
          llm("L2", "t2", 11, 12, { "gen_ai.response.id": "L2" }),
          reward("Rtop", "root", 20, 1), // a reward that is a sibling of t1/t2, not of any call
        ];
        expect(rewards(make({ rewardMatch: "first_sibling" }).adapt(spans))).toEqual([0, null]);
        expect(rewards(make({ rewardMatch: "first_occurrence" }).adapt(spans))).toEqual([0, 1]);
      });

      it("reads token ids from arrays or Python-repr strings, and can skip calls with empty token ids", () => {
        const spans = [
          sp({ id: "root", start: 0, end: 10 }),
          sp({
            id: "a",
            parent: "root",
            name: LLM,
            start: 1,
            end: 2,
            attrs: { prompt_token_ids: "[1, 2, 3]", response_token_ids: "(4, 5)" },
          }),
          sp({
            id: "b",
            parent: "root",
            name: LLM,
            start: 3,
            end: 4,
            attrs: {
              "agentlightning.operation.output.prompt_token_ids": [7],
              "agentlightning.operation.output.choices.0.token_ids": [8, 9],
            },
          }),
          sp({ id: "c", parent: "root", name: LLM, start: 5, end: 6, attrs: { prompt_token_ids: "not a list" } }),
          reward("r", "root", 7, 1),
        ];
        const out = make().adapt(spans);
        expect(out.map((t) => [t.prompt.token_ids, t.response.token_ids])).toEqual([
          [
            [1, 2, 3],
            [4, 5],
          ],
          [[7], [8, 9]],
          [[], []],
        ]);
        expect(rewards(out)).toEqual([null, null, 1]);
        const skipped = make({ skipEmptyTokenSpans: true }).adapt(spans);
        expect(skipped.map((t) => t.prompt.token_ids)).toEqual([[1, 2, 3], [7]]);
        expect(rewards(skipped)).toEqual([null, 1]); // the dropped call takes no part in matching
      });

      it("finalReward replaces the last triplet's reward; triplets keep DFS order", () => {
        const spans = [
          sp({ id: "root", start: 0, end: 10 }),
          sp({ id: "late", parent: "root", start: 5, end: 9 }),
          llm("L2", "late", 6, 7, { "gen_ai.response.id": "late" }),
          llm("L1", "root", 1, 2, { "gen_ai.response.id": "early" }),
        ];
        const out = make({ finalReward: 0.25 }).adapt(spans);
        expect(ids(out)).toEqual(["late", "early"]);
        expect(rewards(out)).toEqual([null, 0.25]);
      });

      it("builds the triplet's prompt/response content and metadata from gen_ai attributes", () => {
        const spans = [
          llm("x", null, 0, 1, {
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": JSON.stringify([
              { type: "text", text: "hi" },
              { type: "image_url", image_url: { url: "http://img/1.png" } },
            ]),
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": "hello",
            "gen_ai.request.model": "m",
            "gen_ai.request.temperature": 0.5,
            "gen_ai.response.id": "rid",
            "gen_ai.response.model": "m2",
            "logprobs.content": '[{"token": "hello", "logprob": -0.1}]',
          }),
        ];
        const [t] = make().adapt(spans);
        expect(t.prompt.image_urls).toEqual(["http://img/1.png"]);
        expect(t.response.raw_content).toEqual([{ role: "assistant", content: "hello" }]);
        expect(t.response.logprobs).toEqual([{ token: "hello", logprob: -0.1 }]);
        expect(t.metadata).toEqual({
          request: { model: "m", temperature: 0.5 },
          response: { id: "rid", model: "m2" },
          response_id: "rid",
          agent_name: "*",
        });
      });
    });
  }

  it("Wasm and reference kernels give identical triplets on random span forests", async () => {
    const { rng } = await import("../wasm/helpers.ts");
    for (let s = 0; s < 150; s++) {
      const r = rng(s);
      const n = r.int(1, 40);
      const spans = [];
      for (let i = 0; i < n; i++) {
        const parent = i === 0 || r.bool(0.15) ? (r.bool(0.5) ? null : `missing${r.int(0, 2)}`) : `s${r.int(0, i - 1)}`;
        const start = r.int(0, 50),
          end = start + r.int(0, 20);
        const kind = r.int(0, 5);
        if (kind <= 1) spans.push(llm(`s${i}`, parent, start, end, r.bool() ? { "gen_ai.response.id": `r${r.int(0, 5)}` } : {}));
        else if (kind === 2) spans.push(reward(`s${i}`, parent, start, r.pick([0, 1, 0.5])));
        else if (kind === 3) spans.push(sp({ id: `s${i}`, parent, start, end, attrs: { "agent.name": r.pick(["a", "b"]) } }));
        else spans.push(sp({ id: `s${i}`, parent, start, end }));
      }
      for (const o of [
        {},
        { rewardMatch: "first_sibling" as const },
        { agentMatch: "a" },
        { dedupLlmCall: false, repairHierarchy: false },
      ]) {
        const a = new TraceTripletAdapter(o).adapt(spans);
        const b = new TraceTripletAdapter({ ...o, kernels: referenceKernels }).adapt(spans);
        expect(a).toEqual(b);
      }
    }
  });
});

describe("reward formats (docs/adapters.md#the-reward-of-a-span) and agent names (docs/adapters.md#agent-names)", () => {
  it("reads agentlightning.reward.<i>.value, the AgentOps payload and the legacy annotation", () => {
    expect(
      getRewardValue(
        sp({
          id: "a",
          attrs: {
            "agentlightning.reward.0.name": "p",
            "agentlightning.reward.0.value": 0.5,
            "agentlightning.reward.1.name": "q",
            "agentlightning.reward.1.value": 2,
          },
        }),
      ),
    ).toBe(0.5);
    expect(getRewardValue(sp({ id: "b", attrs: { "agentops.task.output": JSON.stringify({ type: "reward", value: 0 }) } }))).toBe(0);
    expect(getRewardValue(sp({ id: "c", attrs: { "agentops.entity.output": "{not json" } }))).toBeNull();
    expect(getRewardValue(sp({ id: "d", name: "agentlightning.annotation", attrs: { reward: 0.75 } }))).toBe(0.75);
    expect(getRewardValue(sp({ id: "e", name: "other", attrs: { reward: 0.75 } }))).toBeNull();
    // an AgentOps reward payload with a null value stops the search (no fall through to the legacy form)
    expect(
      getRewardValue(
        sp({
          id: "f",
          name: "agentlightning.annotation",
          attrs: { "agentops.task.output": JSON.stringify({ type: "reward", value: null }), reward: 1 },
        }),
      ),
    ).toBeNull();
    expect(() => getRewardValue(sp({ id: "g", attrs: { "agentlightning.reward": 1 } }))).toThrow(ValidationError);
    expect(() =>
      getRewardValue(sp({ id: "h", attrs: { "agentlightning.reward.0.value": "x", "agentlightning.reward.0.name": "n" } })),
    ).toThrow(ValidationError);
  });
  it("agent names from each framework, first rule wins", () => {
    const n = (attrs: Record<string, string>, name = "x") => agentName(sp({ id: "a", name, attrs }));
    expect(n({ "agent.name": "A", recipient_agent_type: "B" })).toBe("A");
    expect(n({ "agentops.span.kind": "agent", "operation.name": "B" })).toBe("B");
    expect(n({ recipient_agent_type: "C" })).toBe("C");
    expect(n({ "langchain.chain.type": "D" })).toBe("D");
    expect(n({ "executor.id": "E" })).toBe("E");
    expect(n({ type: "agent", "agentlightning.operation.input.name": "F" })).toBe("F");
    expect(n({ lc_name: "G" }, "langchain.Chain.RunnableSeq")).toBe("G");
    expect(n({ lc_name: "G" })).toBeNull();
  });
});
