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

/** A model or adapter path that is not a folder: missing, or a file. Names the path and what it should hold. */
export class ModelFolderError extends ValidationError {
  constructor(
    readonly folder: string,
    message: string,
  ) {
    super(message, [folder]);
  }
}
