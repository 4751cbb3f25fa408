/**
 * The SQL agent's databases, made in code: three small schemas (a shop, a school, an airline network)
 * with realistic tables, keys and rows drawn from a fixed seed, so every build writes the same rows. They
 * are written as libSQL files on first use (`databasePath`), in a folder per content version under the
 * OS temp folder, each file built under a temporary name and renamed, so concurrent runners never see
 * half a database.
 */
import { existsSync, mkdirSync, renameSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "libsql";
import { Rng } from "../../src/model/init.ts";

export type Value = string | number | null;

export interface Table {
  name: string;
  /** Column definitions as they appear in CREATE TABLE (the first word is the column's name). */
  columns: string[];
  /** Table constraints after the columns (foreign keys). */
  constraints?: string[];
  rows: Value[][];
}

export const DB_IDS = ["shop", "school", "flights"] as const;
export type DbId = (typeof DB_IDS)[number];

const pick = <T>(rng: Rng, xs: readonly T[]): T => xs[Math.floor(rng.uniform() * xs.length)]!;
const int = (rng: Rng, lo: number, hi: number): number => lo + Math.floor(rng.uniform() * (hi - lo + 1));

/** `n` distinct "First Last" names. */
function people(rng: Rng, n: number): string[] {
  const first = [
    "Ann",
    "Bob",
    "Carla",
    "Dev",
    "Eva",
    "Farid",
    "Grace",
    "Hugo",
    "Ines",
    "Jon",
    "Kira",
    "Liam",
    "Mei",
    "Nora",
    "Omar",
    "Pia",
  ];
  const last = [
    "Adams",
    "Brown",
    "Costa",
    "Diaz",
    "Evans",
    "Fischer",
    "Garcia",
    "Hall",
    "Ito",
    "Jensen",
    "Khan",
    "Lopez",
    "Moreau",
    "Novak",
  ];
  const out = new Set<string>();
  while (out.size < n) out.add(`${pick(rng, first)} ${pick(rng, last)}`);
  return [...out];
}

const CITIES = ["Lisbon", "Porto", "Madrid", "Lyon", "Berlin", "Oslo", "Dublin", "Vienna"];

function shop(rng: Rng): Table[] {
  const customers = people(rng, 30).map((name, i): Value[] => [i + 1, name, pick(rng, CITIES), int(rng, 2018, 2024)]);
  const catalogue: [string, string, number, number][] = [
    ["Desk Lamp", "home", 10, 60],
    ["Throw Pillow", "home", 8, 40],
    ["Coffee Mug", "home", 4, 20],
    ["Wall Clock", "home", 15, 80],
    ["Laptop Stand", "electronics", 20, 90],
    ["USB Cable", "electronics", 3, 15],
    ["Headphones", "electronics", 25, 200],
    ["Webcam", "electronics", 30, 120],
    ["Keyboard", "electronics", 20, 150],
    ["Notebook", "stationery", 2, 12],
    ["Fountain Pen", "stationery", 10, 90],
    ["Stapler", "stationery", 5, 25],
    ["Running Shoes", "sports", 40, 160],
    ["Yoga Mat", "sports", 15, 70],
    ["Water Bottle", "sports", 5, 30],
    ["Tennis Racket", "sports", 35, 220],
    ["Board Game", "toys", 15, 60],
    ["Puzzle", "toys", 8, 35],
    ["Kite", "toys", 10, 45],
    ["Building Blocks", "toys", 12, 80],
  ];
  const products = catalogue.map(([name, category, lo, hi], i): Value[] => [i + 1, name, category, int(rng, lo, hi), int(rng, 0, 120)]);
  const orders = Array.from({ length: 90 }, (_, i): Value[] => [
    i + 1,
    int(rng, 1, customers.length),
    int(rng, 1, products.length),
    int(rng, 1, 5),
    int(rng, 2020, 2024),
  ]);
  return [
    {
      name: "customers",
      columns: ["id INTEGER PRIMARY KEY", "name TEXT NOT NULL", "city TEXT NOT NULL", "joined_year INTEGER NOT NULL"],
      rows: customers,
    },
    {
      name: "products",
      columns: [
        "id INTEGER PRIMARY KEY",
        "name TEXT NOT NULL",
        "category TEXT NOT NULL",
        "price INTEGER NOT NULL",
        "stock INTEGER NOT NULL",
      ],
      rows: products,
    },
    {
      name: "orders",
      columns: [
        "id INTEGER PRIMARY KEY",
        "customer_id INTEGER NOT NULL",
        "product_id INTEGER NOT NULL",
        "quantity INTEGER NOT NULL",
        "order_year INTEGER NOT NULL",
      ],
      constraints: ["FOREIGN KEY (customer_id) REFERENCES customers(id)", "FOREIGN KEY (product_id) REFERENCES products(id)"],
      rows: orders,
    },
  ];
}

function school(rng: Rng): Table[] {
  const students = people(rng, 40).map((name, i): Value[] => [i + 1, name, int(rng, 1, 4), pick(rng, ["north", "south", "east", "west"])]);
  const catalogue: [string, string, number][] = [
    ["Algebra", "mathematics", 6],
    ["Calculus", "mathematics", 6],
    ["Statistics", "mathematics", 4],
    ["Mechanics", "physics", 6],
    ["Optics", "physics", 4],
    ["Organic Chemistry", "chemistry", 6],
    ["Lab Safety", "chemistry", 2],
    ["World History", "history", 4],
    ["Ancient Rome", "history", 4],
    ["Poetry", "literature", 2],
    ["Novel Writing", "literature", 4],
    ["Databases", "computing", 6],
    ["Algorithms", "computing", 6],
  ];
  const courses = catalogue.map(([title, department, credits], i): Value[] => [i + 1, title, department, credits]);
  const seen = new Set<string>();
  const enrolments: Value[][] = [];
  while (enrolments.length < 130) {
    const s = int(rng, 1, students.length),
      c = int(rng, 1, courses.length);
    if (seen.has(`${s}/${c}`)) continue;
    seen.add(`${s}/${c}`);
    enrolments.push([s, c, int(rng, 40, 100)]);
  }
  return [
    {
      name: "students",
      columns: ["id INTEGER PRIMARY KEY", "name TEXT NOT NULL", "year INTEGER NOT NULL", "house TEXT NOT NULL"],
      rows: students,
    },
    {
      name: "courses",
      columns: ["id INTEGER PRIMARY KEY", "title TEXT NOT NULL", "department TEXT NOT NULL", "credits INTEGER NOT NULL"],
      rows: courses,
    },
    {
      name: "enrolments",
      columns: ["student_id INTEGER NOT NULL", "course_id INTEGER NOT NULL", "grade INTEGER NOT NULL"],
      constraints: [
        "PRIMARY KEY (student_id, course_id)",
        "FOREIGN KEY (student_id) REFERENCES students(id)",
        "FOREIGN KEY (course_id) REFERENCES courses(id)",
      ],
      rows: enrolments,
    },
  ];
}

function flights(rng: Rng): Table[] {
  const airportList: [string, string, string][] = [
    ["LIS", "Lisbon", "Portugal"],
    ["OPO", "Porto", "Portugal"],
    ["MAD", "Madrid", "Spain"],
    ["BCN", "Barcelona", "Spain"],
    ["CDG", "Paris", "France"],
    ["LYS", "Lyon", "France"],
    ["BER", "Berlin", "Germany"],
    ["MUC", "Munich", "Germany"],
    ["OSL", "Oslo", "Norway"],
    ["DUB", "Dublin", "Ireland"],
    ["VIE", "Vienna", "Austria"],
    ["FCO", "Rome", "Italy"],
  ];
  const airlines: Value[][] = [
    [1, "Atlantic Air", "Portugal"],
    [2, "Iberian Wings", "Spain"],
    [3, "Air Lumiere", "France"],
    [4, "Nordic Sky", "Norway"],
    [5, "Alpine Jet", "Austria"],
    [6, "Emerald Airways", "Ireland"],
  ];
  const flightRows: Value[][] = [];
  for (let i = 0; i < 70; i++) {
    const from = pick(rng, airportList);
    let to = pick(rng, airportList);
    while (to === from) to = pick(rng, airportList);
    flightRows.push([
      i + 1,
      `${String.fromCharCode(65 + (i % 6))}${100 + i * 7}`,
      int(rng, 1, airlines.length),
      from[0],
      to[0],
      int(rng, 300, 2800),
      int(rng, 60, 260),
    ]);
  }
  return [
    { name: "airports", columns: ["code TEXT PRIMARY KEY", "city TEXT NOT NULL", "country TEXT NOT NULL"], rows: airportList },
    { name: "airlines", columns: ["id INTEGER PRIMARY KEY", "name TEXT NOT NULL", "country TEXT NOT NULL"], rows: airlines },
    {
      name: "flights",
      columns: [
        "id INTEGER PRIMARY KEY",
        "number TEXT NOT NULL",
        "airline_id INTEGER NOT NULL",
        "origin TEXT NOT NULL",
        "destination TEXT NOT NULL",
        "distance_km INTEGER NOT NULL",
        "duration_min INTEGER NOT NULL",
      ],
      constraints: [
        "FOREIGN KEY (airline_id) REFERENCES airlines(id)",
        "FOREIGN KEY (origin) REFERENCES airports(code)",
        "FOREIGN KEY (destination) REFERENCES airports(code)",
      ],
      rows: flightRows,
    },
  ];
}

const BUILDERS: Record<DbId, (rng: Rng) => Table[]> = { shop, school, flights };
const SEEDS: Record<DbId, number> = { shop: 101, school: 202, flights: 303 };

const tableCache = new Map<DbId, Table[]>();

/** The tables of a database with their rows (always the same ones). */
export function tables(db: DbId): Table[] {
  let t = tableCache.get(db);
  if (!t) tableCache.set(db, (t = BUILDERS[db](new Rng(SEEDS[db]))));
  return t;
}

const createTable = (t: Table): string => `CREATE TABLE ${t.name} (\n  ${[...t.columns, ...(t.constraints ?? [])].join(",\n  ")}\n)`;

/** The CREATE TABLE statements. */
export function schemaSql(db: DbId): string {
  return tables(db).map(createTable).join(";\n");
}

/**
 * The schema as the prompts show it, one line per table: `orders(id, customer_id -> customers.id, ...)`.
 * Shorter than the CREATE TABLE statements (a small model reads every token) and names the same joins.
 */
export function schemaText(db: DbId): string {
  return tables(db)
    .map((t) => {
      const refs = new Map<string, string>();
      for (const c of t.constraints ?? []) {
        const m = /^FOREIGN KEY \((\w+)\) REFERENCES (\w+)\((\w+)\)$/.exec(c);
        if (m) refs.set(m[1]!, `${m[2]}.${m[3]}`);
      }
      const cols = t.columns.map((c) => c.split(" ")[0]!).map((c) => (refs.has(c) ? `${c} -> ${refs.get(c)}` : c));
      return `${t.name}(${cols.join(", ")})`;
    })
    .join("\n");
}

/** Writes the database to `path` (which must not exist). */
export function writeDatabase(db: DbId, path: string): void {
  const conn = new Database(path);
  try {
    conn.exec("BEGIN");
    for (const t of tables(db)) {
      conn.exec(createTable(t));
      const insert = conn.prepare(`INSERT INTO ${t.name} VALUES (${t.columns.map(() => "?").join(", ")})`);
      for (const row of t.rows) insert.run(row);
    }
    conn.exec("COMMIT");
  } finally {
    conn.close();
  }
}

/** Bump when the rows or schemas change, so stale files from an earlier build are not reused. */
const CONTENT_VERSION = 1;

/** The default folder of the built databases. */
export const defaultDatabaseDir = (): string => join(tmpdir(), `lightning-sql-agent-v${CONTENT_VERSION}`);

/** The libSQL file of a database in `dir`, built there first if it is not there yet. */
export function databasePath(db: DbId, dir = defaultDatabaseDir()): string {
  const path = join(dir, `${db}.db`);
  if (existsSync(path)) return path;
  mkdirSync(dir, { recursive: true });
  const temporary = `${path}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`;
  try {
    writeDatabase(db, temporary);
    renameSync(temporary, path);
  } finally {
    rmSync(temporary, { force: true });
  }
  return path;
}
