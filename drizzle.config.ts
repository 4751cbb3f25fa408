/**
 * drizzle-kit configuration for the libSQL store: `npx drizzle-kit generate` writes SQL migrations from
 * src/store/libsql/schema.ts into src/store/libsql/migrations; then
 * `npx tsx scripts/embed-migrations.ts` embeds them into migrations/index.ts, which the store
 * applies when it opens (no file lookup at run time, so it works on every runtime and from the package).
 */
import { defineConfig } from "drizzle-kit";

export default defineConfig({
  dialect: "sqlite",
  schema: "./src/store/libsql/schema.ts",
  out: "./src/store/libsql/migrations",
});
