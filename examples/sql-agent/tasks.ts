/**
 * Question / gold-SQL pairs over the three databases (databases.ts), generated from templates with a
 * seeded RNG, the slot values (a city, a product, a course...) drawn from the databases' own rows. Fields
 * as Spider's: `db_id`, `question`, `query` (the gold SQL). The held-out split is always the same set of
 * questions; training tasks never repeat one of them.
 */
import { Rng } from "../../src/model/init.ts";
import { DB_IDS, type DbId, tables, type Value } from "./databases.ts";

export interface SqlTask {
  id: string;
  db_id: DbId;
  question: string;
  /** The gold query. */
  query: string;
}

type Drawn = Omit<SqlTask, "id" | "db_id">;

const pick = <T>(rng: Rng, xs: readonly T[]): T => xs[Math.floor(rng.uniform() * xs.length)]!;
const int = (rng: Rng, lo: number, hi: number): number => lo + Math.floor(rng.uniform() * (hi - lo + 1));
const distinct = (xs: Value[]): Value[] => [...new Set(xs)];

/** The values of one column of a table. */
function column(db: DbId, table: string, name: string): Value[] {
  const t = tables(db).find((x) => x.name === table)!;
  const k = t.columns.findIndex((c) => c.split(" ")[0] === name);
  return t.rows.map((r) => r[k]!);
}

const col = (db: DbId, table: string, name: string) => distinct(column(db, table, name));

const SHOP: ((rng: Rng) => Drawn)[] = [
  (rng) => {
    const city = pick(rng, col("shop", "customers", "city"));
    return { question: `How many customers live in ${city}?`, query: `SELECT COUNT(*) FROM customers WHERE city = '${city}'` };
  },
  (rng) => {
    const year = pick(rng, col("shop", "customers", "joined_year"));
    return {
      question: `List the names of customers who joined in ${year}.`,
      query: `SELECT name FROM customers WHERE joined_year = ${year}`,
    };
  },
  (rng) => {
    const category = pick(rng, col("shop", "products", "category"));
    const price = int(rng, 2, 12) * 10;
    return {
      question: `Which products in the ${category} category cost less than ${price}?`,
      query: `SELECT name FROM products WHERE category = '${category}' AND price < ${price}`,
    };
  },
  (rng) => {
    const category = pick(rng, col("shop", "products", "category"));
    return {
      question: `What is the average price of ${category} products?`,
      query: `SELECT AVG(price) FROM products WHERE category = '${category}'`,
    };
  },
  (rng) => {
    const category = pick(rng, col("shop", "products", "category"));
    return {
      question: `Which ${category} product is the most expensive?`,
      query: `SELECT name FROM products WHERE category = '${category}' ORDER BY price DESC LIMIT 1`,
    };
  },
  (rng) => {
    const name = pick(rng, col("shop", "customers", "name"));
    return {
      question: `How many orders did ${name} place?`,
      query: `SELECT COUNT(*) FROM orders JOIN customers ON orders.customer_id = customers.id WHERE customers.name = '${name}'`,
    };
  },
  (rng) => {
    const product = pick(rng, col("shop", "products", "name"));
    return {
      question: `How many units of ${product} were ordered in total?`,
      query: `SELECT SUM(orders.quantity) FROM orders JOIN products ON orders.product_id = products.id WHERE products.name = '${product}'`,
    };
  },
  (rng) => {
    const year = pick(rng, col("shop", "orders", "order_year"));
    return { question: `How many orders were placed in ${year}?`, query: `SELECT COUNT(*) FROM orders WHERE order_year = ${year}` };
  },
  (rng) => {
    const n = int(rng, 2, 10) * 10;
    return {
      question: `How many products have fewer than ${n} items in stock?`,
      query: `SELECT COUNT(*) FROM products WHERE stock < ${n}`,
    };
  },
  (rng) => {
    const product = pick(rng, col("shop", "products", "name"));
    return {
      question: `In which cities do the customers who ordered ${product} live?`,
      query: `SELECT DISTINCT customers.city FROM customers JOIN orders ON customers.id = orders.customer_id JOIN products ON orders.product_id = products.id WHERE products.name = '${product}'`,
    };
  },
];

const SCHOOL: ((rng: Rng) => Drawn)[] = [
  (rng) => {
    const year = pick(rng, col("school", "students", "year"));
    return { question: `How many students are in year ${year}?`, query: `SELECT COUNT(*) FROM students WHERE year = ${year}` };
  },
  (rng) => {
    const house = pick(rng, col("school", "students", "house"));
    return { question: `List the names of students in the ${house} house.`, query: `SELECT name FROM students WHERE house = '${house}'` };
  },
  (rng) => {
    const department = pick(rng, col("school", "courses", "department"));
    return { question: `List the titles of ${department} courses.`, query: `SELECT title FROM courses WHERE department = '${department}'` };
  },
  (rng) => {
    const credits = pick(rng, col("school", "courses", "credits"));
    return { question: `How many courses are worth ${credits} credits?`, query: `SELECT COUNT(*) FROM courses WHERE credits = ${credits}` };
  },
  (rng) => {
    const course = pick(rng, col("school", "courses", "title"));
    return {
      question: `What is the average grade in ${course}?`,
      query: `SELECT AVG(enrolments.grade) FROM enrolments JOIN courses ON enrolments.course_id = courses.id WHERE courses.title = '${course}'`,
    };
  },
  (rng) => {
    const student = pick(rng, col("school", "students", "name"));
    return {
      question: `How many courses is ${student} enrolled in?`,
      query: `SELECT COUNT(*) FROM enrolments JOIN students ON enrolments.student_id = students.id WHERE students.name = '${student}'`,
    };
  },
  (rng) => {
    const course = pick(rng, col("school", "courses", "title"));
    return {
      question: `What is the highest grade in ${course}?`,
      query: `SELECT MAX(enrolments.grade) FROM enrolments JOIN courses ON enrolments.course_id = courses.id WHERE courses.title = '${course}'`,
    };
  },
  (rng) => {
    const course = pick(rng, col("school", "courses", "title"));
    const grade = int(rng, 5, 9) * 10;
    return {
      question: `Which students scored above ${grade} in ${course}?`,
      query: `SELECT students.name FROM students JOIN enrolments ON students.id = enrolments.student_id JOIN courses ON enrolments.course_id = courses.id WHERE courses.title = '${course}' AND enrolments.grade > ${grade}`,
    };
  },
];

const FLIGHTS: ((rng: Rng) => Drawn)[] = [
  (rng) => {
    const code = pick(rng, col("flights", "airports", "code"));
    return { question: `How many flights leave from ${code}?`, query: `SELECT COUNT(*) FROM flights WHERE origin = '${code}'` };
  },
  (rng) => {
    const k = Math.floor(rng.uniform() * column("flights", "flights", "origin").length);
    const from = column("flights", "flights", "origin")[k],
      to = column("flights", "flights", "destination")[k];
    return {
      question: `List the numbers of the flights from ${from} to ${to}.`,
      query: `SELECT number FROM flights WHERE origin = '${from}' AND destination = '${to}'`,
    };
  },
  (rng) => {
    const country = pick(rng, col("flights", "airports", "country"));
    return { question: `Which cities in ${country} have an airport?`, query: `SELECT city FROM airports WHERE country = '${country}'` };
  },
  (rng) => {
    const airline = pick(rng, col("flights", "airlines", "name"));
    return {
      question: `How many flights does ${airline} operate?`,
      query: `SELECT COUNT(*) FROM flights JOIN airlines ON flights.airline_id = airlines.id WHERE airlines.name = '${airline}'`,
    };
  },
  (rng) => {
    const code = pick(rng, col("flights", "flights", "origin"));
    return {
      question: `What is the number of the longest flight from ${code}?`,
      query: `SELECT number FROM flights WHERE origin = '${code}' ORDER BY distance_km DESC LIMIT 1`,
    };
  },
  (rng) => {
    const city = pick(rng, col("flights", "airports", "city"));
    return {
      question: `What is the average duration of flights to ${city}?`,
      query: `SELECT AVG(flights.duration_min) FROM flights JOIN airports ON flights.destination = airports.code WHERE airports.city = '${city}'`,
    };
  },
  (rng) => {
    const km = int(rng, 20, 27) * 100;
    return {
      question: `List the numbers of the flights longer than ${km} km.`,
      query: `SELECT number FROM flights WHERE distance_km > ${km}`,
    };
  },
  (rng) => {
    const country = pick(rng, col("flights", "airlines", "country"));
    return { question: `Which airline is based in ${country}?`, query: `SELECT name FROM airlines WHERE country = '${country}'` };
  },
];

const TEMPLATES: Record<DbId, ((rng: Rng) => Drawn)[]> = { shop: SHOP, school: SCHOOL, flights: FLIGHTS };

/** One task drawn from `rng`: a database, then one of its templates. */
export function drawTask(rng: Rng): Omit<SqlTask, "id"> {
  const db_id = pick(rng, DB_IDS);
  return { db_id, ...pick(rng, TEMPLATES[db_id])(rng) };
}

export const HELD_OUT_SEED = 4001;
/** The size of the held-out split. */
export const HELD_OUT_SIZE = 60;

let heldOutCache: SqlTask[] | null = null;

/** The held-out tasks: HELD_OUT_SIZE distinct questions, always the same ones. */
export function heldOutTasks(): SqlTask[] {
  if (heldOutCache) return heldOutCache;
  const rng = new Rng(HELD_OUT_SEED);
  const seen = new Set<string>();
  const out: SqlTask[] = [];
  while (out.length < HELD_OUT_SIZE) {
    const t = drawTask(rng);
    if (seen.has(t.question)) continue;
    seen.add(t.question);
    out.push({ id: `heldout-${out.length}`, ...t });
  }
  return (heldOutCache = out);
}

/** `n` training tasks from `seed`, none of them a held-out question (they may repeat among themselves). */
export function trainTasks(n: number, seed: number): SqlTask[] {
  const banned = new Set(heldOutTasks().map((t) => t.question));
  const rng = new Rng(seed);
  const out: SqlTask[] = [];
  while (out.length < n) {
    const t = drawTask(rng);
    if (!banned.has(t.question)) out.push({ id: `train-${seed}-${out.length}`, ...t });
  }
  return out;
}
