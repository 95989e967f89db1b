#!/usr/bin/env node
/**
 * Generate src/schema/*.ts from the JSON Schemas in specs/schema with
 * json-schema-to-typescript, so the wire's TypeScript types are never kept
 * in step by hand.
 *
 *   node scripts/gen-types.mjs            write the files
 *   node scripts/gen-types.mjs --check    write nothing; exit 1 naming every stale file
 *
 * A value the schema leaves open (any JSON: an input, an output, a payload)
 * is typed `JsonValue` rather than `unknown`, through the generator's
 * `tsType` extension.
 */

import { readFileSync, writeFileSync, mkdirSync, existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { compile } from "json-schema-to-typescript";

const HERE = dirname(fileURLToPath(import.meta.url));
const SCHEMAS = join(HERE, "..", "..", "..", "specs", "schema");
const OUT = join(HERE, "..", "src", "schema");
const DOCUMENTS = {
  effects: "effects.json",
  events: "events.json",
  records: "records.json",
  decideRequests: "decide-requests.json",
  decideReplies: "decide-replies.json",
  flow: "flow.json",
};
const SHAPES = ["type", "$ref", "anyOf", "oneOf", "allOf", "enum", "const", "properties", "items", "not"];

/** Every open value (a schema that says nothing of its shape) becomes JsonValue. */
function openValues(node) {
  if (Array.isArray(node)) {
    return node.map(openValues);
  }
  if (node === null || typeof node !== "object") {
    return node;
  }
  const out = {};
  for (const [key, value] of Object.entries(node)) {
    if (key === "properties" || key === "$defs" || key === "patternProperties") {
      out[key] = Object.fromEntries(Object.entries(value).map(([k, v]) => [k, openValues(v)]));
    } else if (key === "enum" || key === "const" || key === "default" || key === "examples") {
      out[key] = value;
    } else {
      out[key] = openValues(value);
    }
  }
  if (!SHAPES.some((shape) => shape in node) && node.additionalProperties === undefined) {
    out.tsType = "JsonValue";
  }
  return out;
}

function banner(file) {
  return [
    "/* eslint-disable */",
    `/** Generated from specs/schema/${file} by scripts/gen-types.mjs (json-schema-to-typescript): do not edit. */`,
    "",
    'import type { JsonValue } from "../flowEffect";',
    "",
  ].join("\n");
}

async function generate() {
  const out = {};
  for (const [name, file] of Object.entries(DOCUMENTS)) {
    const schema = openValues(JSON.parse(readFileSync(join(SCHEMAS, file), "utf8")));
    out[`${name}.ts`] = await compile(schema, name, {
      bannerComment: banner(file),
      additionalProperties: false,
      unknownAny: true,
      strictIndexSignatures: true,
      format: true,
      declareExternallyReferenced: true,
    });
  }
  return out;
}

const check = process.argv.includes("--check");
const files = await generate();
const stale = [];
mkdirSync(OUT, { recursive: true });
for (const [name, text] of Object.entries(files)) {
  const path = join(OUT, name);
  const now = existsSync(path) ? readFileSync(path, "utf8") : null;
  if (now === text) {
    continue;
  }
  if (check) {
    stale.push(`src/schema/${name}`);
  } else {
    writeFileSync(path, text);
    console.log(`wrote src/schema/${name}`);
  }
}
if (check && stale.length > 0) {
  console.error(`stale, run \`node scripts/gen-types.mjs\`: ${stale.join(", ")}`);
  process.exit(1);
}
if (check) {
  console.log(`src/schema: ${Object.keys(files).length} files, up to date`);
}
