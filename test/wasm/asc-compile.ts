/** Compiles an AssemblyScript entry with asc's API in memory (no files written) and returns the module's bytes. */
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import asc from "assemblyscript/asc";

export const repoRoot = fileURLToPath(new URL("../../", import.meta.url));

export async function compileInMemory(args: string[], outFile: string): Promise<Uint8Array> {
  const outputs: Record<string, Uint8Array> = {};
  const { error, stderr } = await asc.main([...args, "--outFile", outFile], {
    stdout: asc.createMemoryStream(),
    stderr: asc.createMemoryStream(),
    readFile: (f, base) => {
      try {
        return readFileSync(`${repoRoot}${base ? `${base}/` : ""}${f}`, "utf8");
      } catch {
        return null; // asc probes for files that may not exist
      }
    },
    writeFile: (name, contents) => {
      outputs[name] = contents as Uint8Array;
    },
    listFiles: () => [],
  });
  if (error) throw new Error(`asc failed: ${error.message}\n${stderr.toString()}`);
  const bytes = outputs[outFile];
  if (!bytes) throw new Error(`asc wrote no ${outFile}`);
  return bytes;
}
