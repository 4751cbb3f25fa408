/**
 * The messages APO sends to its critic ("textual gradient") and editor models (docs/training.md#apo).
 * Three critique variants and two edit variants, picked at random for diversity. The template under
 * review always sits between `<prompt_template>` tags and the critique between `<critique>` tags, so a
 * model (or a test's scripted backend) can tell them from the surrounding instructions.
 */

export interface ChatMessage {
  role: "system" | "user";
  content: string;
}

/** What one rollout of a prompt looked like, as the critic sees it. */
export interface ApoExperiment {
  status: string;
  final_reward: number | null;
  spans: readonly unknown[];
  messages: unknown;
}

const tagged = (tag: string, text: string): string => `<${tag}>\n${text}\n</${tag}>`;
const json = (v: unknown): string => JSON.stringify(v, null, 1);
const reward = (r: number | null): string => (r === null ? "none" : String(r));

/** Status, reward and the conversation of each experiment (the spans only when `withSpans`). */
function describeExperiments(experiments: readonly ApoExperiment[], withSpans: boolean): string {
  return experiments
    .map((e, i) => {
      const head = `### Experiment ${i + 1}\nStatus: ${e.status}\nFinal reward: ${reward(e.final_reward)}`;
      const messages = `Conversation:\n${json(e.messages)}`;
      return withSpans ? `${head}\n${messages}\nSpans:\n${json(e.spans)}` : `${head}\n${messages}`;
    })
    .join("\n\n");
}

/** Critique 1: one user message; a short list of concrete, testable changes. */
function critiqueBrief(template: string, experiments: readonly ApoExperiment[]): ChatMessage[] {
  return [
    {
      role: "user",
      content: [
        "You optimize a prompt template. An agent filled in the template below and ran it on several tasks; each run got a reward (higher is better).",
        tagged("prompt_template", template),
        "Here is what happened in each run:",
        describeExperiments(experiments, false),
        "Write a short bulleted critique of the template: what in its wording made the low-reward runs go wrong, and which concrete, testable changes would fix that. Do not rewrite the template.",
      ].join("\n\n"),
    },
  ];
}

/** Critique 2: a prompt engineer reading every span; 3 to 5 "Critique:" bullets. */
function critiqueFromSpans(template: string, experiments: readonly ApoExperiment[]): ChatMessage[] {
  return [
    {
      role: "system",
      content:
        "You are an experienced prompt engineer. You read execution traces of an agent and explain how its prompt should change to earn higher rewards.",
    },
    {
      role: "user",
      content: [
        "The agent's prompt template:",
        tagged("prompt_template", template),
        "Traces of its runs, with every recorded span:",
        describeExperiments(experiments, true),
        'Give 3 to 5 bullets, each starting with "Critique:", naming a weakness of the template that the traces reveal and the change that would address it.',
      ].join("\n\n"),
    },
  ];
}

/** Critique 3: a review checklist as the system message; under 350 words. */
function critiqueChecklist(template: string, experiments: readonly ApoExperiment[]): ChatMessage[] {
  return [
    {
      role: "system",
      content: [
        "You review prompt templates. Check each of these and report only the problems that matter for the observed runs:",
        "- Structure: is the task stated first, and are the parts of the prompt in a sensible order?",
        "- Instructions: are they specific, unambiguous and free of contradictions?",
        "- Control: does the prompt say how to handle unclear, missing or unexpected input?",
        "- Input and output: are the inputs explained and the expected answer format spelled out?",
        "- Scope and safety: does it keep the model on the task?",
        "- Efficiency: is anything redundant or needlessly long?",
      ].join("\n"),
    },
    {
      role: "user",
      content: [
        tagged("prompt_template", template),
        "Runs of this prompt (status, score, conversation):",
        describeExperiments(experiments, false),
        "Write your review in under 350 words, most important problem first.",
      ].join("\n\n"),
    },
  ];
}

/** Edit 1: revision rules as the system message; the whole improved template back. */
function editFollowCritique(template: string, critique: string): ChatMessage[] {
  return [
    {
      role: "system",
      content: [
        "You revise prompt templates following a critique. Rules:",
        "- Address every point of the critique.",
        "- When the critique asks for an answer format or an example, add it to the template.",
        "- Say what the model should achieve before how it should do it.",
        "- Keep every placeholder of the original template (`{name}`, `{{ name }}`) exactly as written; add no new ones.",
        "- Reply with the improved template only: no preface, no explanation, no code fences.",
      ].join("\n"),
    },
    { role: "user", content: `${tagged("prompt_template", template)}\n\n${tagged("critique", critique)}` },
  ];
}

/** Edit 2: a conservative edit fixing only the most important point. */
function editConservative(template: string, critique: string): ChatMessage[] {
  return [
    {
      role: "user",
      content: [
        "Improve the prompt template below with a small, careful edit. Of the critique's points, fix only the single most important one and keep the rest of the template as it is.",
        "Keep every placeholder (`{name}`, `{{ name }}`) exactly as written.",
        tagged("prompt_template", template),
        tagged("critique", critique),
        "Reply with the revised template only.",
      ].join("\n\n"),
    },
  ];
}

export const CRITIQUE_PROMPTS: readonly ((template: string, experiments: readonly ApoExperiment[]) => ChatMessage[])[] = [
  critiqueBrief,
  critiqueFromSpans,
  critiqueChecklist,
];

export const EDIT_PROMPTS: readonly ((template: string, critique: string) => ChatMessage[])[] = [editFollowCritique, editConservative];
