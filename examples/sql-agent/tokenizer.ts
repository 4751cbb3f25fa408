/**
 * The SQL demo policy's tokenizer: the Calc-X recipe (a byte-level BPE in Qwen2's shape, trained here
 * deterministically, with the same ChatML template and special tokens: examples/calc-x/tokenizer.ts) on
 * the SQL agent's own conversations (conversations.ts), so that the prompts' words, the tables' and
 * columns' names and SQL's keywords are mostly one token each.
 *
 * One change to Qwen2's pre-tokenizer: a word never takes the space or quote before it (`SQL_SPLIT`), so a
 * value is the same tokens in the question (` in Lyon?`) and in the query (`= 'Lyon'`): copying it is
 * copying tokens. Runs of spaces and punctuation (` = '`, `, `) are merged like words.
 */
import { ChatTemplate } from "../../src/model/hf/chat-template.ts";
import { CHAT_TEMPLATE, EOS_TOKEN, PAD_TOKEN } from "../calc-x/chat-template.ts";
import { type BpeModel, tokenizerFiles, trainBpe } from "../calc-x/tokenizer.ts";
import { Databases, mixedExamples } from "./conversations.ts";
import { trainTasks } from "./tasks.ts";

/**
 * Words (underscores included: `customer_id`), single digits, and the runs between them; a run never
 * starts with a newline, so the generation prompt's last token (`assistant\n`) is the same in the prompt
 * alone and with the reply after it.
 */
export const SQL_SPLIT = "[\\p{L}_]+|\\p{N}|[^\\p{L}\\p{N}_\\n]+\\n*|\\n+";

export const TOKENIZER_SEED = 91;
/** Vocabulary cap (bytes + merges + added tokens): above what the corpus reaches, so every pair seen twice is merged. */
export const TOKENIZER_VOCAB = 2048;
/** The model's context: the longest prompt (a rewrite) plus the agent's 160 new tokens fit. */
export const SQL_CONTEXT = 512;

/** The training text: `n` examples (nodes mixed as in the SFT data), rendered with the chat template. */
export async function tokenizerCorpus(n = 3000, seed = TOKENIZER_SEED): Promise<string[]> {
  const template = new ChatTemplate(CHAT_TEMPLATE, { eos_token: EOS_TOKEN, pad_token: PAD_TOKEN });
  const dbs = new Databases();
  try {
    return (await mixedExamples(trainTasks(n, seed), dbs, seed, 0.5)).map((e) => template.render(e.messages, {}));
  } finally {
    dbs.close();
  }
}

/** The SQL demo's tokenizer: its BPE and its files (same inputs, same bytes). */
export async function trainSqlTokenizer(
  options: { examples?: number; seed?: number; vocabSize?: number } = {},
): Promise<{ bpe: BpeModel; files: ReturnType<typeof tokenizerFiles> }> {
  const bpe = trainBpe(await tokenizerCorpus(options.examples, options.seed), options.vocabSize ?? TOKENIZER_VOCAB, SQL_SPLIT);
  return { bpe, files: tokenizerFiles(bpe, SQL_CONTEXT) };
}
