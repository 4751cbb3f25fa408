import { ValidationError } from "../../types/errors.ts";

/** A Hugging Face model folder that cannot be used: names the file and the field (or tensor) at fault. */
export class HfFormatError extends ValidationError {
  constructor(
    readonly file: string,
    readonly field: string | null,
    message: string,
  ) {
    super(`${file}${field === null ? "" : ` (${field})`}: ${message}`, field === null ? [file] : [file, field]);
  }
}
