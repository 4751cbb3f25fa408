/** renderPromptTemplate: f-string and jinja, escapes, missing variables, refused engines. */
import { describe, expect, it } from "vitest";
import {
  formatPromptTemplate,
  MissingTemplateVariableError,
  renderPromptTemplate,
  UnsupportedTemplateEngineError,
  ValidationError,
  type PromptTemplate,
} from "../../src/types/index.ts";

const fString = (template: string): PromptTemplate => ({ resource_type: "prompt_template", template, engine: "f-string" });
const jinja = (template: string): PromptTemplate => ({ resource_type: "prompt_template", template, engine: "jinja" });

function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (e) {
    return e;
  }
  throw new Error("expected a throw");
}

describe("f-string templates", () => {
  it("fills named fields; doubled braces are literal braces", () => {
    expect(renderPromptTemplate(fString("Q: { q } -> {{json}} {{{q}}}"), { q: "2+2" })).toBe("Q: 2+2 -> {json} {2+2}");
    expect(renderPromptTemplate(fString("n={n} list={xs}"), { n: 3, xs: [1, 2] })).toBe("n=3 list=[1,2]");
  });

  it("a missing field is a MissingTemplateVariableError naming it (inherited names do not count)", () => {
    const e = thrown(() => renderPromptTemplate(fString("Hi {name} {toString}"), { name: "A" }));
    expect(e).toBeInstanceOf(MissingTemplateVariableError);
    expect(e).toBeInstanceOf(ValidationError);
    expect((e as MissingTemplateVariableError).variable).toBe("toString");
    expect((e as ValidationError).issues[0]!.path).toEqual(["toString"]);
  });

  it("formatPromptTemplate renders the same and still refuses other engines", () => {
    expect(formatPromptTemplate(fString("{a}{{"), { a: 1 })).toBe("1{");
    expect(() => formatPromptTemplate(jinja("{{ a }}"), { a: 1 })).toThrow(/only 'f-string' is supported/);
  });
});

describe("jinja templates", () => {
  it("renders variables, loops, conditions, filters and string-literal braces", () => {
    const t = jinja("{% for x in items %}{{ loop.index }}:{{ x | upper }} {% endfor %}{% if flag %}yes{% endif %} {{ '{{' }}lit{{ '}}' }}");
    expect(renderPromptTemplate(t, { items: ["a", "b"], flag: true })).toBe("1:A 2:B yes {{lit}}");
    expect(renderPromptTemplate(jinja("{% set n = 2 %}{{ n * k }} {{ user.name }}"), { k: 3, user: { name: "Ann" } })).toBe("6 Ann");
  });

  it("an undefined top-level name is a MissingTemplateVariableError, except under `is defined` and `default`", () => {
    const e = thrown(() => renderPromptTemplate(jinja("Hi {{ nmae }}"), { name: "A" }));
    expect(e).toBeInstanceOf(MissingTemplateVariableError);
    expect((e as MissingTemplateVariableError).variable).toBe("nmae");
    const lenient = jinja("{% if x is defined %}{{ x }}{% else %}none{% endif %}/{{ y | default('dflt') }}/{{ z is undefined }}");
    expect(renderPromptTemplate(lenient, {})).toBe("none/dflt/true");
    expect(renderPromptTemplate(lenient, { x: 1, y: 2, z: 3 })).toBe("1/2/false");
  });

  it("a template that does not parse is a ValidationError on the template", () => {
    const e = thrown(() => renderPromptTemplate(jinja("{% if x %}open"), { x: 1 }));
    expect(e).toBeInstanceOf(ValidationError);
    expect((e as ValidationError).issues[0]!.path).toEqual(["template"]);
  });
});

describe("other engines", () => {
  it("poml (and anything unknown) is refused with the engine named", () => {
    const poml = thrown(() => renderPromptTemplate({ template: "<p>{{q}}</p>", engine: "poml" }, { q: 1 }));
    expect(poml).toBeInstanceOf(UnsupportedTemplateEngineError);
    expect((poml as UnsupportedTemplateEngineError).engine).toBe("poml");
    expect((poml as Error).message).toMatch(/'poml' is not supported/);
    expect(() => renderPromptTemplate({ template: "", engine: "mustache" }, {})).toThrow(/'mustache' is not supported/);
  });
});
