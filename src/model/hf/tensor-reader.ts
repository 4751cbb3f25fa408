/**
 * Reads one safetensors tensor straight into its float32 output (docs/hf-models.md, "Memory and
 * speed"). The tensor is read in pieces of about `chunkBytes`, the next piece's read in flight while
 * the current one is converted. A plain tensor (no transpose) is read into its own output, 16-bit
 * words into the upper half, then widened in place; a matrix that changes layout is read in bands of
 * rows into one of two reused scratch buffers and transposed from there. Besides the outputs, nothing
 * of the size of a tensor is allocated: fresh memory is what loading costs most (page faults).
 */
import type { FileReader } from "../../platform/index.ts";
import { HfFormatError } from "./errors.ts";
import { HF_DTYPE_BYTES, transposeBand, widenInPlace, type HfDtype } from "./tensors.ts";

/** Default piece size: large enough that a read's fixed cost is small, small enough to stay cached. */
export const READ_CHUNK_BYTES = 4 << 20;

/** Where a tensor's bytes are: the file (named in errors), the tensor's name, its byte offset. */
export interface TensorLocation {
  reader: FileReader;
  file: string;
  name: string;
  offset: number;
}

export class TensorReader {
  private scratch: [Uint8Array, Uint8Array] = [new Uint8Array(0), new Uint8Array(0)];

  constructor(private readonly chunkBytes = READ_CHUNK_BYTES) {}

  /**
   * The float32 values of a [rows, cols] tensor stored in `dtype`, transposed to [cols, rows] when asked,
   * in a new array or in `into` (rows * cols elements, overwritten).
   */
  async read(
    at: TensorLocation,
    dtype: HfDtype,
    rows: number,
    cols: number,
    transpose: boolean,
    into?: Float32Array,
  ): Promise<Float32Array> {
    const out = into ?? new Float32Array(rows * cols);
    if (out.length !== rows * cols)
      throw new RangeError(`tensor ${at.name} has ${rows * cols} values; the array given holds ${out.length}`);
    if (transpose) await this.readTransposed(at, dtype, rows, cols, out);
    else await this.readPlain(at, dtype, out);
    return out;
  }

  private async readPlain(at: TensorLocation, dtype: HfDtype, out: Float32Array): Promise<void> {
    const n = out.length;
    const size = HF_DTYPE_BYTES[dtype];
    // float32 lands where it belongs; 16-bit words in the upper half, widened in place afterwards.
    const base = dtype === "F32" ? 0 : 2 * n;
    const per = Math.max(1, Math.floor(this.chunkBytes / size));
    const pieces = Math.ceil(n / per);
    await pipelined(
      pieces,
      (k) => {
        const from = k * per;
        const count = Math.min(n, from + per) - from;
        return readExactly(at, from * size, new Uint8Array(out.buffer, out.byteOffset + base + from * size, count * size));
      },
      (k) => {
        if (dtype !== "F32") widenInPlace(out, dtype, k * per, Math.min(n, (k + 1) * per));
      },
    );
  }

  private async readTransposed(at: TensorLocation, dtype: HfDtype, rows: number, cols: number, out: Float32Array): Promise<void> {
    const rowBytes = cols * HF_DTYPE_BYTES[dtype];
    // Bands of a multiple of 8 rows (the transposing kernels take 8 rows at a time).
    const band = Math.min(rows, Math.max(8, Math.floor(this.chunkBytes / rowBytes / 8) * 8));
    const bands = Math.ceil(rows / band);
    const buffers = this.scratchFor(band * rowBytes);
    const rowsOf = (k: number): number => Math.min(rows, (k + 1) * band) - k * band;
    await pipelined(
      bands,
      (k) => readExactly(at, k * band * rowBytes, buffers[k % 2].subarray(0, rowsOf(k) * rowBytes)),
      (k) => transposeBand(buffers[k % 2], dtype, out, k * band, rowsOf(k), rows, cols),
    );
  }

  /** Two scratch buffers of at least `bytes`, grown when a tensor needs more (fresh, so aligned). */
  private scratchFor(bytes: number): [Uint8Array, Uint8Array] {
    if (this.scratch[0].length < bytes) this.scratch = [new Uint8Array(bytes), new Uint8Array(bytes)];
    return this.scratch;
  }
}

/** Reads `target.length` bytes at `at.offset + offset`; a short read means the file was cut. */
async function readExactly(at: TensorLocation, offset: number, target: Uint8Array): Promise<void> {
  const got = await at.reader.readInto(at.offset + offset, target);
  if (got !== target.length)
    throw new HfFormatError(at.file, at.name, `the file ends ${target.length - got} bytes before the tensor's data_offsets`);
}

/**
 * Runs read(0), then for each k: waits for read(k), starts read(k + 1), runs convert(k). On an error the
 * read in flight is waited for before rethrowing, so nothing still writes into the buffers afterwards.
 */
async function pipelined(count: number, read: (k: number) => Promise<void>, convert: (k: number) => void): Promise<void> {
  let next: Promise<void> | null = count > 0 ? read(0) : null;
  try {
    for (let k = 0; k < count; k++) {
      const current = next as Promise<void>;
      next = null;
      await current;
      if (k + 1 < count) next = read(k + 1);
      convert(k);
    }
  } catch (e) {
    // The first error is the one reported; a failure of the read in flight would only repeat it.
    if (next)
      await next.then(
        () => undefined,
        () => undefined,
      );
    throw e;
  }
}
