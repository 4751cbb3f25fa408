export * from "./base.ts";
